//! [`VisionModelDir`]: a Hugging Face vision model directory (`config.json` and
//! `model.safetensors` or `pytorch_model.bin`), loaded through the crate's one checkpoint
//! reader ([`Checkpoint`]): every tensor is compared with what the config implies before
//! anything is built, and every missing, mis-shaped and unexpected one is named in one
//! [`ModelError::Weights`].

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use candle_nn::VarBuilder;

use crate::error::{ModelError, WeightProblems};
use crate::model::{checkpoint_file, config_file, CHECKPOINT_FILES};
use crate::vision::config::VisionConfig;
use crate::vision::error::Result;
use crate::vision::model::{VisionForImageClassification, VisionModel};
use crate::vision::tensors::{check, VisionKind};
use crate::weights::{Checkpoint, Loaded};

/// A vision model directory: its validated config and its opened checkpoint.
#[derive(Debug)]
pub struct VisionModelDir {
    /// The directory.
    pub dir: PathBuf,
    /// `config.json`, validated.
    pub config: VisionConfig,
    /// The checkpoint file.
    pub checkpoint: Checkpoint,
}

impl VisionModelDir {
    /// Reads `dir/config.json` and opens the first checkpoint of `CHECKPOINT_FILES` present.
    ///
    /// # Errors
    /// [`ModelError::MissingFile`] when `dir` has no config or no checkpoint,
    /// [`ModelError::Io`] when one of them is a directory, and the errors of
    /// [`VisionConfig::from_file`] and [`Checkpoint::open`].
    pub fn open(dir: &Path) -> Result<VisionModelDir> {
        let config = VisionConfig::from_file(&config_file(dir)?)?;
        Ok(VisionModelDir {
            dir: dir.to_path_buf(),
            config,
            checkpoint: Checkpoint::open(&checkpoint_file(dir)?)?,
        })
    }

    /// A directory held in memory: the text of `config.json` and the bytes of
    /// `model.safetensors` (e.g. a model built into a binary). `dir` only names it in messages.
    ///
    /// # Errors
    /// The errors of [`VisionConfig::from_json_str`] and
    /// [`Checkpoint::from_safetensors_bytes`].
    pub fn from_memory(
        dir: PathBuf,
        config_json: &str,
        safetensors: Vec<u8>,
    ) -> Result<VisionModelDir> {
        let config = VisionConfig::from_json_str(config_json)?;
        let checkpoint =
            Checkpoint::from_safetensors_bytes(dir.join(CHECKPOINT_FILES[0]), safetensors)?;
        Ok(VisionModelDir {
            dir,
            config,
            checkpoint,
        })
    }

    /// Whether the checkpoint holds a classifier head (`classifier.*`).
    pub fn has_classifier(&self) -> bool {
        let tensors = self.checkpoint.tensors();
        tensors.keys().any(|k| k.starts_with("classifier."))
    }

    /// The backbone ([`VisionModel`]) with its weights in `dtype` on `device` (f32 runs the
    /// fused CPU ops on the CPU). A classifier's head is left unused.
    ///
    /// # Errors
    /// [`ModelError::Weights`] listing every missing, mis-shaped and unexpected tensor (and a
    /// layer count above the file's); [`ModelError::FileChanged`] when the file changed under
    /// the load; the model's own errors.
    pub fn load_model(&self, dtype: DType, device: &Device) -> Result<Loaded<VisionModel>> {
        self.load_kind(
            VisionKind::Model,
            dtype,
            device,
            |vb, scope, cfg| match scope.strip_suffix('.') {
                Some(prefix) => VisionModel::load(vb.pp(prefix), cfg),
                None => VisionModel::load(vb, cfg),
            },
        )
    }

    /// The classifier ([`VisionForImageClassification`]) with its weights in `dtype` on
    /// `device`.
    ///
    /// # Errors
    /// As [`VisionModelDir::load_model`].
    pub fn load_classifier(
        &self,
        dtype: DType,
        device: &Device,
    ) -> Result<Loaded<VisionForImageClassification>> {
        self.load_kind(
            VisionKind::ImageClassification,
            dtype,
            device,
            |vb, _, cfg| VisionForImageClassification::load(vb, cfg),
        )
    }

    /// Checks every tensor for `kind`, then builds with `build` from the checkpoint's top level
    /// (given the backbone's scope, `dinov3_vit.` or empty).
    fn load_kind<M>(
        &self,
        kind: VisionKind,
        dtype: DType,
        device: &Device,
        build: impl FnOnce(VarBuilder<'_>, &str, &VisionConfig) -> Result<M>,
    ) -> Result<Loaded<M>> {
        let (scope, problems) = check(&self.config, kind, &self.checkpoint);
        if !problems.is_empty() {
            return Err(ModelError::Weights {
                path: self.checkpoint.path().to_path_buf(),
                problems: WeightProblems(problems),
            }
            .into());
        }
        // The build's own error is kept whole (the loader sees its message); the loader's own
        // reports (unreadable values, a file changed under the load) come first.
        let mut failure = None;
        let loaded = self.checkpoint.load_with(dtype, device, |vb| {
            build(vb, &scope, &self.config).map_err(|e| {
                let message = e.to_string();
                failure = Some(e);
                ModelError::Input(message)
            })
        });
        match (loaded, failure) {
            (Ok(loaded), _) => Ok(loaded),
            (Err(ModelError::Input(_)), Some(own)) => Err(own),
            (Err(e), _) => Err(e.into()),
        }
    }
}
