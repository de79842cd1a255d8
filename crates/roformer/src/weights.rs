//! Checkpoint files: safetensors or PyTorch pickle (`torch.save`'s zip format), with tensor
//! names as transformers writes them, and loading that checks every tensor before failing.
//!
//! A RoFormer checkpoint saved from a head model (`RoFormerForMaskedLM`, ...) names the encoder
//! tensors `roformer.embeddings...` (`bert.embeddings...` for BERT); one saved from a bare
//! `RoFormerModel` (`BertModel`) names them `embeddings...`. The model always asks for the
//! prefixed names and [`Checkpoint`] serves the unprefixed ones when the file has no prefixed
//! tensors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::pickle::PthTensors;
use candle_core::safetensors::BufferedSafetensors;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};

use crate::error::{ModelError, Result, WeightProblem, WeightProblems};

/// The prefix of the encoder's tensors in checkpoints of RoFormer head models.
pub const BASE_PREFIX: &str = "roformer";

/// Every prefix an encoder's tensors may carry: RoFormer's and BERT's.
pub const ENCODER_PREFIXES: &[&str] = &[BASE_PREFIX, "bert"];

/// Tensors transformers stores that this crate recomputes and never reads: the sinusoidal
/// position table (its values do not depend on training).
/// Also BERT's `position_ids` buffer (`0..max_position_embeddings`), which older versions saved.
const RECOMPUTED: &[&str] = &["encoder.embed_positions.weight", "embeddings.position_ids"];

/// Whether the stored tensor `name` is one of [`RECOMPUTED`] (with or without an encoder
/// prefix).
pub(crate) fn is_recomputed(name: &str) -> bool {
    let bare = ENCODER_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p)?.strip_prefix('.'))
        .unwrap_or(name);
    RECOMPUTED.contains(&bare)
}

/// The storage format of a checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `model.safetensors`.
    Safetensors,
    /// `pytorch_model.bin` written by `torch.save` (a zip archive holding a pickle).
    Pickle,
}

enum Source {
    Safetensors(BufferedSafetensors),
    Pickle(PthTensors),
}

/// An opened checkpoint: the names and shapes of its tensors, read up front, and lazy access
/// to their data.
pub struct Checkpoint {
    path: PathBuf,
    format: Format,
    shapes: BTreeMap<String, Vec<usize>>,
    prefixed: bool,
    source: Source,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("tensors", &self.shapes.len())
            .finish()
    }
}

/// A model built from a checkpoint, and the checkpoint tensors it did not use.
#[derive(Debug)]
pub struct Loaded<M> {
    /// The model.
    pub model: M,
    /// Names of tensors in the file the model did not read (e.g. the MLM head when loading a
    /// bare encoder), sorted; the recomputed position table is not listed.
    pub unused: Vec<String>,
}

impl Checkpoint {
    /// Opens a checkpoint, telling the format by its first bytes (a zip archive is a PyTorch
    /// pickle, anything else is parsed as safetensors), and reads its tensor list.
    ///
    /// # Errors
    /// [`ModelError::Io`] if the file cannot be read, [`ModelError::CorruptCheckpoint`] if it
    /// cannot be parsed (truncated, corrupt, legacy non-zip pickle).
    pub fn open(path: &Path) -> Result<Checkpoint> {
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let corrupt = |reason: String| ModelError::CorruptCheckpoint {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(io)?;
        let (format, source, shapes): (_, _, BTreeMap<String, Vec<usize>>) = if bytes
            .starts_with(b"PK\x03\x04")
        {
            drop(bytes);
            let pth = PthTensors::new(path, None).map_err(|e| corrupt(e.to_string()))?;
            let shapes = pth
                .tensor_infos()
                .iter()
                .map(|(name, info)| (name.clone(), info.layout.dims().to_vec()))
                .collect();
            (Format::Pickle, Source::Pickle(pth), shapes)
        } else {
            return Self::from_safetensors_bytes(path, bytes).map_err(|e| match e {
                ModelError::CorruptCheckpoint { path, reason } => ModelError::CorruptCheckpoint {
                    path,
                    reason: format!(
                        "{reason} (expected safetensors, or a zip archive written by \
                                 torch.save)"
                    ),
                },
                other => other,
            });
        };
        Ok(Self::assemble(path.to_path_buf(), format, shapes, source))
    }

    /// A checkpoint from the bytes of a safetensors file held in memory (for instance a model
    /// built into a binary with `include_bytes!`). `path` only names it in messages and in
    /// [`Checkpoint::path`]; nothing is read from the file system.
    ///
    /// # Errors
    /// [`ModelError::CorruptCheckpoint`] if the bytes are not a safetensors file.
    pub fn from_safetensors_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Checkpoint> {
        let path = path.into();
        let st = BufferedSafetensors::new(bytes).map_err(|e| ModelError::CorruptCheckpoint {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let shapes = st
            .tensors()
            .into_iter()
            .map(|(name, view)| (name, view.shape().to_vec()))
            .collect();
        Ok(Self::assemble(
            path,
            Format::Safetensors,
            shapes,
            Source::Safetensors(st),
        ))
    }

    fn assemble(
        path: PathBuf,
        format: Format,
        shapes: BTreeMap<String, Vec<usize>>,
        source: Source,
    ) -> Checkpoint {
        let prefixed = shapes.keys().any(|k: &String| {
            ENCODER_PREFIXES
                .iter()
                .any(|p| k.strip_prefix(p).is_some_and(|rest| rest.starts_with('.')))
        });
        Checkpoint {
            path,
            format,
            shapes,
            prefixed,
            source,
        }
    }

    /// The file this checkpoint was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The storage format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Tensor names and shapes as stored, sorted by name.
    pub fn tensors(&self) -> &BTreeMap<String, Vec<usize>> {
        &self.shapes
    }

    /// Whether the encoder tensors carry the `roformer.` (or `bert.`) prefix (a head model's
    /// checkpoint).
    pub fn is_prefixed(&self) -> bool {
        self.prefixed
    }

    /// Whether the file holds a masked-LM head (`cls.predictions.*` tensors), i.e. was saved
    /// from `RoFormerForMaskedLM` (or `...ForCausalLM`).
    pub fn has_mlm_head(&self) -> bool {
        self.shapes
            .keys()
            .any(|k| k.starts_with("cls.predictions."))
    }

    /// The stored name that serves the model's name `name`: itself, or without the
    /// `roformer.` (`bert.`) prefix in an unprefixed file.
    pub fn resolve(&self, name: &str) -> Option<&str> {
        if let Some((stored, _)) = self.shapes.get_key_value(name) {
            return Some(stored);
        }
        if self.prefixed {
            return None;
        }
        let bare = ENCODER_PREFIXES
            .iter()
            .find_map(|p| name.strip_prefix(p)?.strip_prefix('.'))?;
        self.shapes.get_key_value(bare).map(|(k, _)| k.as_str())
    }

    /// Reads the stored tensor `stored` (a name of [`Checkpoint::tensors`]) on the CPU in its
    /// stored dtype.
    ///
    /// # Errors
    /// Candle errors for a tensor whose data cannot be read.
    pub fn read(&self, stored: &str) -> candle_core::Result<Tensor> {
        match &self.source {
            Source::Safetensors(st) => st.load(stored, &Device::Cpu),
            Source::Pickle(pth) => pth.get(stored)?.ok_or_else(|| {
                candle_core::Error::Msg(format!("tensor {stored} vanished from the archive"))
            }),
        }
    }

    /// Builds a model with `build`, which asks for tensors through the [`VarBuilder`] it is
    /// given (names as transformers writes them for a head model), in `dtype` on `device`.
    ///
    /// Every tensor is checked as it is asked for; a missing, mis-shaped or unreadable one is
    /// recorded and replaced by zeros so that the build goes on and finds all the problems.
    ///
    /// # Errors
    /// [`ModelError::Weights`] listing every problem; otherwise the error `build` returns.
    pub fn load_with<M>(
        &self,
        dtype: DType,
        device: &Device,
        build: impl FnOnce(VarBuilder<'_>) -> Result<M>,
    ) -> Result<Loaded<M>> {
        let log = Arc::new(Mutex::new(Log::default()));
        let backend = CheckedBackend {
            checkpoint: self,
            log: Arc::clone(&log),
        };
        let vb = VarBuilder::from_backend(Box::new(backend), dtype, device.clone());
        let built = build(vb);
        let log = lock(&log);
        if !log.problems.is_empty() {
            return Err(ModelError::Weights {
                path: self.path.clone(),
                problems: WeightProblems(log.problems.clone()),
            });
        }
        let model = built?;
        let unused = self
            .shapes
            .keys()
            .filter(|k| !log.used.contains(*k) && !is_recomputed(k))
            .cloned()
            .collect();
        Ok(Loaded { model, unused })
    }
}

/// What a load asked for: the stored names used and the problems met.
#[derive(Default)]
struct Log {
    used: BTreeSet<String>,
    problems: Vec<WeightProblem>,
}

fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The candle-nn backend of [`Checkpoint::load_with`].
struct CheckedBackend<'a> {
    checkpoint: &'a Checkpoint,
    log: Arc<Mutex<Log>>,
}

impl CheckedBackend<'_> {
    /// Zeros standing in for a bad tensor (a broadcast scalar: no allocation).
    fn stand_in(shape: &Shape, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        Tensor::zeros((), dtype, dev)?.broadcast_as(shape)
    }
}

impl SimpleBackend for CheckedBackend<'_> {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _init: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let expected = shape.dims().to_vec();
        let Some(stored) = self.checkpoint.resolve(name) else {
            lock(&self.log).problems.push(WeightProblem::Missing {
                name: name.to_string(),
                expected,
            });
            return Self::stand_in(&shape, dtype, dev);
        };
        let mut log = lock(&self.log);
        log.used.insert(stored.to_string());
        let found = &self.checkpoint.shapes[stored];
        if *found != expected {
            log.problems.push(WeightProblem::Shape {
                name: stored.to_string(),
                expected,
                found: found.clone(),
            });
            return Self::stand_in(&shape, dtype, dev);
        }
        drop(log);
        let loaded = self
            .checkpoint
            .read(stored)
            .and_then(|t| t.to_dtype(dtype)?.to_device(dev));
        match loaded {
            Ok(t) => Ok(t),
            Err(e) => {
                lock(&self.log).problems.push(WeightProblem::Unreadable {
                    name: stored.to_string(),
                    reason: e.to_string(),
                });
                Self::stand_in(&shape, dtype, dev)
            }
        }
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let stored =
            self.checkpoint
                .resolve(name)
                .ok_or_else(|| candle_core::Error::CannotFindTensor {
                    path: name.to_string(),
                })?;
        lock(&self.log).used.insert(stored.to_string());
        self.checkpoint
            .read(stored)?
            .to_dtype(dtype)?
            .to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.checkpoint.resolve(name).is_some()
    }
}
