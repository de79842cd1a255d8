//! Checkpoint files: safetensors or PyTorch pickle (`torch.save`'s zip format), with tensor
//! names as transformers writes them, and loading that checks every tensor before failing.
//!
//! A RoFormer checkpoint saved from a head model (`RoFormerForMaskedLM`, ...) names the encoder
//! tensors `roformer.embeddings...` (`bert.embeddings...` for BERT); one saved from a bare
//! `RoFormerModel` (`BertModel`) names them `embeddings...`. The model always asks for the
//! prefixed names and [`Checkpoint`] serves the unprefixed ones when the file has no prefixed
//! tensors.
//!
//! Reading a checkpoint, from file to tensor:
//! - [`file_source::Source`]: the file, read with bounded positional reads (or a buffer held in memory),
//!   never held whole in memory nor mapped, so a file truncated during a load is a clean
//!   [`ModelError::FileChanged`], not a SIGBUS;
//! - `safetensors_file` and `torch_zip` (with `pickle`, our own pickle reader) index each
//!   tensor: dtype, shape, strides and the byte range of its storage, with every size checked
//!   against the file, so memory is bounded by the file's size and not by what it claims;
//! - `decode`: a tensor the model asks for is copied once into a contiguous tensor, whatever
//!   its strides, and refuses NaN and infinities ([`rotary::finite`]) as it goes; `finite`
//!   refuses a conversion that overflows;
//! - `backend`: serves the tensors to candle-nn and reports every problem by name.

mod backend;
mod decode;
mod finite;
mod pickle;
mod safetensors_file;
mod torch_zip;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use file_source::Source;

use self::backend::{lock, CheckedBackend, Log};
use self::decode::{DecodeError, StoredTensor};
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

/// One tensor of a checkpoint: its shape, and where its data lies or why it cannot be read.
pub(crate) struct Entry {
    /// The shape as stored.
    pub shape: Vec<usize>,
    /// The data's place, or why this tensor cannot be read (reported if the model uses it).
    pub data: std::result::Result<StoredTensor, String>,
}

/// An opened checkpoint: the names and shapes of its tensors, read up front, and lazy access
/// to their data.
///
/// The file is not read into memory: a tensor's bytes are read a chunk at a time into the
/// tensor the model keeps, when the model asks for it (see the `file-source` crate).
pub struct Checkpoint {
    path: PathBuf,
    format: Format,
    shapes: BTreeMap<String, Vec<usize>>,
    entries: BTreeMap<String, Entry>,
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
    /// pickle, anything else is parsed as safetensors), and reads its tensor list. The file
    /// stays open; tensor data is read when a model asks for it.
    ///
    /// # Errors
    /// [`ModelError::Io`] if the file cannot be opened, [`ModelError::CorruptCheckpoint`]
    /// if it is not a regular file or cannot be parsed (truncated, corrupt, legacy non-zip
    /// pickle, a pickle nested too deeply or using opcodes `torch.save` does not write),
    /// [`ModelError::FileChanged`] if it shrank while its tensor list was read.
    pub fn open(path: &Path) -> Result<Checkpoint> {
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let corrupt = |reason: String| ModelError::CorruptCheckpoint {
            path: path.to_path_buf(),
            reason,
        };
        // Asked before opening: opening a FIFO would wait for a writer.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(corrupt("not a regular file".into()));
        }
        let file = std::fs::File::open(path).map_err(io)?;
        let source = Source::file(file).map_err(io)?;
        let mut magic = Vec::new();
        let zip = source
            .read(0..4.min(source.len()), &mut magic)
            .is_ok_and(|m| m == b"PK\x03\x04");
        let (format, entries) = if zip {
            (Format::Pickle, torch_zip::index(&source))
        } else {
            let entries = safetensors_file::index(&source).map_err(|reason| {
                format!("{reason} (expected safetensors, or a zip archive written by torch.save)")
            });
            (Format::Safetensors, entries)
        };
        // A file that shrank while it was indexed fails as changed, not as corrupt.
        if let Some(what) = source.changed() {
            return Err(ModelError::FileChanged {
                path: path.to_path_buf(),
                what,
            });
        }
        let entries = entries.map_err(corrupt)?;
        Ok(Self::assemble(path.to_path_buf(), format, entries, source))
    }

    /// A checkpoint from the bytes of a safetensors file held in memory (for instance a model
    /// built into a binary with `include_bytes!`). `path` only names it in messages and in
    /// [`Checkpoint::path`]; nothing is read from the file system.
    ///
    /// # Errors
    /// [`ModelError::CorruptCheckpoint`] if the bytes are not a safetensors file.
    pub fn from_safetensors_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Checkpoint> {
        let path = path.into();
        let source = Source::Owned(bytes);
        let entries =
            safetensors_file::index(&source).map_err(|reason| ModelError::CorruptCheckpoint {
                path: path.clone(),
                reason,
            })?;
        Ok(Self::assemble(path, Format::Safetensors, entries, source))
    }

    fn assemble(
        path: PathBuf,
        format: Format,
        entries: BTreeMap<String, Entry>,
        source: Source,
    ) -> Checkpoint {
        let shapes: BTreeMap<String, Vec<usize>> = entries
            .iter()
            .map(|(name, e)| (name.clone(), e.shape.clone()))
            .collect();
        let prefixed = shapes.keys().any(|k| {
            ENCODER_PREFIXES
                .iter()
                .any(|p| k.strip_prefix(p).is_some_and(|rest| rest.starts_with('.')))
        });
        Checkpoint {
            path,
            format,
            shapes,
            entries,
            prefixed,
            source,
        }
    }

    /// Checks that the file has not changed since it was opened: no read came back short,
    /// and its size and modification time are those it had. A model built from a file
    /// that changed under it may mix old and new bytes, so a load ends with this check.
    ///
    /// # Errors
    /// [`ModelError::FileChanged`], saying what changed.
    pub fn check_unchanged(&self) -> Result<()> {
        match self.source.changed() {
            Some(what) => Err(ModelError::FileChanged {
                path: self.path.clone(),
                what,
            }),
            None => Ok(()),
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

    /// Reads the stored tensor `stored` (a name of [`Checkpoint::tensors`]) as a contiguous
    /// tensor in `dtype` on `device`.
    ///
    /// Every value is checked: a NaN or an infinity in the file, or a value that the
    /// conversion to `dtype` turns into one (e.g. 1e5 as `f16`), is refused.
    ///
    /// # Errors
    /// The problem, ready to report: [`WeightProblem::NonFinite`] for a NaN or infinity,
    /// [`WeightProblem::Unreadable`] for a tensor absent from the file, whose data is out of
    /// bounds or of a dtype this crate does not read, that overflows `dtype`, or whose bytes
    /// could not be read (the file shrank: see [`Checkpoint::check_unchanged`]).
    pub fn read(
        &self,
        stored: &str,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Tensor, WeightProblem> {
        let unreadable = |reason: String| WeightProblem::Unreadable {
            name: stored.to_string(),
            reason,
        };
        let entry = self
            .entries
            .get(stored)
            .ok_or_else(|| unreadable("not in the checkpoint".into()))?;
        let data = entry.data.as_ref().map_err(|e| unreadable(e.clone()))?;
        let tensor = data.decode(&self.source).map_err(|e| match e {
            DecodeError::NonFinite(bad) => WeightProblem::NonFinite {
                name: stored.to_string(),
                index: bad.index,
                value: bad.value.to_string(),
            },
            DecodeError::Unreadable(reason) => unreadable(reason),
        })?;
        let converted = finite::to_dtype_finite(&tensor, dtype).map_err(unreadable)?;
        converted
            .to_device(device)
            .map_err(|e| unreadable(e.to_string()))
    }

    /// Builds a model with `build`, which asks for tensors through the [`VarBuilder`] it is
    /// given (names as transformers writes them for a head model), in `dtype` on `device`.
    ///
    /// Every tensor is checked as it is asked for; a missing, mis-shaped or unreadable one is
    /// recorded and replaced by zeros so that the build goes on and finds all the problems.
    ///
    /// # Errors
    /// [`ModelError::FileChanged`] if the file changed during the load (whatever else went
    /// wrong: a short read makes other problems of its own); [`ModelError::Weights`] listing
    /// every problem; otherwise the error `build` returns.
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
        self.check_unchanged()?;
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
