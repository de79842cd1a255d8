//! [`RoFormerModel`]: embeddings and encoder (transformers' `RoFormerModel`), and loading a
//! model directory.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rotary::Positions;

use crate::config::RoFormerConfig;
use crate::cpu::Precision;
use crate::embeddings::Embeddings;
use crate::encoder::Encoder;
use crate::error::{ModelError, Result, WeightProblems};
use crate::input::{additive_mask, validate, Batch};
use crate::mode::{Dropout, Mode};
use crate::plan::Plan;
use crate::shapes::{self, ModelKind};
use crate::weights::{Checkpoint, Loaded};

/// The RoFormer encoder without a head: token ids in, last hidden states out.
///
/// ```text
/// h0 = Embeddings(input_ids, token_type_ids)                  [b, t, hidden]
/// h  = Layer_{n-1}( ... Layer_0(h0, positions, mask))          [b, t, hidden]
/// ```
#[derive(Debug)]
pub struct RoFormerModel {
    embeddings: Embeddings,
    encoder: Encoder,
    config: RoFormerConfig,
    dtype: DType,
    device: Device,
}

/// A model type that can be built from a checkpoint's var builder (rooted at the file's top
/// level, where a head model's encoder lives under `roformer.`).
pub trait Architecture: Sized {
    /// Which model this is: what `shapes::expected_tensors` lists for it, compared with the
    /// checkpoint before [`Architecture::load_root`] runs.
    const KIND: ModelKind;

    /// Builds the model, reading its tensors from `vb`.
    ///
    /// # Errors
    /// Config problems the architecture cannot run with, and var builder errors.
    fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self>;

    /// The encoder, to change (see [`Architecture::set_precision`]).
    fn roformer_mut(&mut self) -> &mut RoFormerModel;

    /// Sets the precision of the encoder's inference products
    /// (`crate::encoder::Encoder::set_precision`: bf16 packs the weights once); a head
    /// stays f32.
    ///
    /// # Errors
    /// As `crate::encoder::Encoder::set_precision`.
    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        self.roformer_mut().encoder_mut().set_precision(precision)
    }
}

impl RoFormerModel {
    /// Loads the encoder from `vb` scoped at the encoder's tensors (`embeddings.*`,
    /// `encoder.layer.*`, `embeddings_project.*`): `vb.pp("roformer")` for a head model's
    /// checkpoint.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        Ok(RoFormerModel {
            embeddings: Embeddings::load(vb.clone(), cfg)?,
            encoder: Encoder::load(vb.pp("encoder"), cfg)?,
            config: cfg.clone(),
            dtype: vb.dtype(),
            device: vb.device().clone(),
        })
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &RoFormerConfig {
        &self.config
    }

    /// The embedding block.
    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// The layer stack, to change (its inference precision: `Encoder::set_precision`; its
    /// rotary scaling: `Encoder::set_rope_scaling`).
    pub fn encoder_mut(&mut self) -> &mut Encoder {
        &mut self.encoder
    }

    /// The layer stack.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The word embedding matrix, `[vocab_size, embedding_size]`.
    pub fn word_embeddings(&self) -> &Tensor {
        self.embeddings.word_embeddings()
    }

    /// The dtype the weights were loaded in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The last hidden states `[batch, seq, hidden]`.
    ///
    /// - `input_ids`: `[batch, seq]` integer ids below `vocab_size`;
    /// - `token_type_ids`: same shape, below `type_vocab_size` (default all 0);
    /// - `attention_mask`: same shape, 1 for tokens to attend, 0 for padding (default all 1);
    ///   a decoder config (`is_decoder`) adds the causal mask;
    /// - `position_ids`: same shape, the rotary position of each token (default `0..seq` for
    ///   every sequence; set it for left padding or packed sequences). transformers' RoFormer
    ///   has no such input; with the default the outputs match it. Any length and any
    ///   position work: the rotary table is not limited by `max_position_embeddings`.
    ///
    /// # Errors
    /// [`ModelError::Input`] for inputs that do not fit the config or each other, candle
    /// errors otherwise.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
    ) -> Result<Tensor> {
        let batch = self.validate(input_ids, token_type_ids, attention_mask, position_ids)?;
        self.forward_batch(&batch, self.plan(Mode::Inference))
    }

    /// [`RoFormerModel::forward`] in training mode: the differentiable op-by-op path, with
    /// dropout where transformers puts it, drawn from `dropout` (use [`Dropout::disabled`] for
    /// deterministic gradients). Build the model from trainable variables
    /// (`crate::train::TrainableModel`) for the gradients to reach the weights.
    ///
    /// # Errors
    /// As [`RoFormerModel::forward`].
    pub fn forward_train(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
        dropout: &Dropout,
    ) -> Result<Tensor> {
        let batch = self.validate(input_ids, token_type_ids, attention_mask, position_ids)?;
        self.forward_batch(
            &batch,
            self.plan(Mode::Train {
                dropout,
                precision: crate::cpu::Precision::F32,
            }),
        )
    }

    /// The plan of a pass in `mode` over this model's tensors ([`Plan::new`]).
    pub fn plan<'a>(&self, mode: Mode<'a>) -> Plan<'a> {
        Plan::new(mode, &self.device, self.dtype)
    }

    pub(crate) fn forward_batch(&self, batch: &Batch, plan: Plan<'_>) -> Result<Tensor> {
        let h0 = self.embeddings.forward(
            &batch.input_ids,
            batch.token_type_ids.as_ref(),
            batch.positions.as_deref(),
            plan,
        )?;
        let mask = additive_mask(batch, self.config.is_decoder, self.dtype, &self.device)?;
        let positions = match &batch.positions {
            Some(p) => Positions::Explicit(p),
            None => Positions::START,
        };
        self.encoder.forward(&h0, positions, mask.as_ref(), plan)
    }

    pub(crate) fn validate(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
    ) -> Result<Batch> {
        validate(
            &self.config,
            &self.device,
            input_ids,
            token_type_ids,
            attention_mask,
            position_ids,
        )
    }
}

impl Architecture for RoFormerModel {
    const KIND: ModelKind = ModelKind::Encoder;

    fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        RoFormerModel::load(vb.pp(cfg.base_prefix()), cfg)
    }

    fn roformer_mut(&mut self) -> &mut RoFormerModel {
        self
    }
}

/// A Hugging Face model directory: its validated config and its opened checkpoint.
#[derive(Debug)]
pub struct ModelDir {
    /// The directory.
    pub dir: PathBuf,
    /// `config.json`, validated.
    pub config: RoFormerConfig,
    /// `model.safetensors`, or `pytorch_model.bin` when there is no safetensors file.
    pub checkpoint: Checkpoint,
}

/// Checkpoint file names looked for, in order of preference.
pub const CHECKPOINT_FILES: &[&str] = &["model.safetensors", "pytorch_model.bin"];

impl ModelDir {
    /// Reads `dir/config.json` and opens the first checkpoint of `CHECKPOINT_FILES` present.
    ///
    /// # Errors
    /// [`ModelError::MissingFile`] when `dir` has no config or no checkpoint,
    /// [`ModelError::Io`] when one of them is a directory, and the errors of
    /// [`RoFormerConfig::from_file`] and [`Checkpoint::open`].
    pub fn open(dir: &Path) -> Result<ModelDir> {
        let config = RoFormerConfig::from_file(&config_file(dir)?)?;
        Ok(ModelDir {
            dir: dir.to_path_buf(),
            config,
            checkpoint: Checkpoint::open(&checkpoint_file(dir)?)?,
        })
    }

    /// A model directory held in memory: the text of `config.json` and the bytes of
    /// `model.safetensors` (for instance built into a binary with `include_bytes!`). `dir` only
    /// names the model in messages; nothing is read from the file system.
    ///
    /// # Errors
    /// The errors of [`RoFormerConfig::from_json_str`] and
    /// [`Checkpoint::from_safetensors_bytes`].
    pub fn from_memory(dir: PathBuf, config_json: &str, safetensors: Vec<u8>) -> Result<ModelDir> {
        let config = RoFormerConfig::from_json_str(config_json)?;
        let checkpoint =
            Checkpoint::from_safetensors_bytes(dir.join(CHECKPOINT_FILES[0]), safetensors)?;
        Ok(ModelDir {
            dir,
            config,
            checkpoint,
        })
    }

    /// Builds model type `M` from the checkpoint on `device`, with f32 weights and the
    /// encoder's inference products in `precision` ([`Architecture::set_precision`]: bf16 packs
    /// the weights once, where the CPU has a native bf16 dot product). Every tensor is checked
    /// first, as in [`ModelDir::load_as`].
    ///
    /// # Errors
    /// As [`ModelDir::load_as`], and [`Architecture::set_precision`]'s.
    pub fn load<M: Architecture>(
        &self,
        device: &Device,
        precision: Precision,
    ) -> Result<Loaded<M>> {
        let mut loaded = self.load_as::<M>(DType::F32, device)?;
        loaded.model.set_precision(precision)?;
        Ok(loaded)
    }

    /// Builds model type `M` from the checkpoint with its weights held in `dtype` (f16 or
    /// bf16 run candle's ops op by op; [`ModelDir::load`] is the f32 model), checking every
    /// tensor first: the shapes the config implies (`shapes::check`) are compared with the
    /// checkpoint's before anything is built, so no size the checkpoint does not hold is
    /// allocated.
    ///
    /// # Errors
    /// [`ModelError::Weights`] listing every missing or mis-shaped tensor (and a layer count
    /// above the checkpoint's), and `M`'s own errors.
    pub fn load_as<M: Architecture>(&self, dtype: DType, device: &Device) -> Result<Loaded<M>> {
        let problems = shapes::check(&self.config, M::KIND, &self.checkpoint);
        if !problems.is_empty() {
            return Err(ModelError::Weights {
                path: self.checkpoint.path().to_path_buf(),
                problems: WeightProblems(problems),
            });
        }
        self.checkpoint
            .load_with(dtype, device, |vb| M::load_root(vb, &self.config))
    }
}

/// The `config.json` of the model directory `dir`.
///
/// # Errors
/// [`ModelError::MissingFile`] when `dir` is not a directory or has no config,
/// [`ModelError::Io`] when the config is a directory.
pub(crate) fn config_file(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Err(ModelError::MissingFile {
            dir: dir.to_path_buf(),
            what: "model directory".into(),
        });
    }
    let config_path = dir.join("config.json");
    if !config_path.exists() {
        return Err(ModelError::MissingFile {
            dir: dir.to_path_buf(),
            what: "config.json".into(),
        });
    }
    not_a_directory(config_path)
}

/// The checkpoint file of the model directory `dir`: the first of [`CHECKPOINT_FILES`]
/// present.
///
/// # Errors
/// [`ModelError::MissingFile`] when there is none, [`ModelError::Io`] when it is a directory.
pub(crate) fn checkpoint_file(dir: &Path) -> Result<PathBuf> {
    let weights = CHECKPOINT_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .ok_or_else(|| ModelError::MissingFile {
            dir: dir.to_path_buf(),
            what: CHECKPOINT_FILES.join(" or "),
        })?;
    not_a_directory(weights)
}

/// `path`, or [`ModelError::Io`] saying it is a directory (where a file is expected).
fn not_a_directory(path: PathBuf) -> Result<PathBuf> {
    if path.is_dir() {
        return Err(ModelError::Io {
            path,
            source: std::io::ErrorKind::IsADirectory.into(),
        });
    }
    Ok(path)
}
