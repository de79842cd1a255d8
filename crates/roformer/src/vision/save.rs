//! Saving a vision model as a Hugging Face directory: `config.json` and `model.safetensors`
//! (metadata `{"format": "pt"}`), the tensors named as [`crate::vision::tensors`] lists them.
//! A `rope_axial` model over normalised coordinates saved this way is a `DINOv3ViTModel`
//! directory transformers loads (the zero `mask_token` it expects is written too).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use candle_nn::VarMap;

use crate::error::ModelError;
use crate::vision::config::VisionConfig;
use crate::vision::error::{invalid, Result};
use crate::vision::model::VisionForImageClassification;
use crate::vision::tensors::{expected_tensors, VisionKind};

/// The class a checkpoint of `kind` is saved as (`architectures` in the config):
/// transformers' `DINOv3ViTModel`, or this crate's name for the classifier (transformers has no
/// DINOv3 classification class).
pub fn architecture(kind: VisionKind) -> &'static str {
    match kind {
        VisionKind::Model => "DINOv3ViTModel",
        VisionKind::ImageClassification => "DINOv3ViTForImageClassification",
    }
}

/// The files of the directory of a `kind` model for `cfg` whose weights are in `varmap`:
/// `config.json` (pretty-printed) and `model.safetensors` (f32), as `(name, bytes)`. Write
/// them with [`save_pretrained`], or whole-or-nothing with the training checkpoints' writer.
///
/// # Errors
/// [`crate::vision::VisionError::Config`] for a tensor of the model missing from `varmap` or of another
/// shape; serialisation errors.
pub fn model_files(
    cfg: &VisionConfig,
    kind: VisionKind,
    varmap: &VarMap,
) -> Result<Vec<(String, Vec<u8>)>> {
    let vars = varmap
        .data()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for t in expected_tensors(cfg, kind) {
        let var = vars.get(&t.name).filter(|v| v.dims() == t.shape.as_slice());
        let Some(var) = var else {
            return Err(invalid(
                "config",
                format!("the map has no {} of shape {:?}", t.name, t.shape),
            ));
        };
        let value = var
            .as_tensor()
            .detach()
            .to_dtype(DType::F32)?
            .contiguous()?;
        tensors.push((t.name, value));
    }
    drop(vars);
    let scope = match kind {
        VisionKind::Model => String::new(),
        VisionKind::ImageClassification => {
            format!("{}.", VisionForImageClassification::BASE_PREFIX)
        }
    };
    let device = candle_core::Device::Cpu;
    let mask = Tensor::zeros((1, 1, cfg.hidden_size), DType::F32, &device)?;
    tensors.push((format!("{scope}embeddings.mask_token"), mask));
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let weights = safetensors::tensor::serialize(
        tensors.iter().map(|(n, t)| (n.as_str(), t)),
        Some(metadata),
    )
    .map_err(|e| candle_core::Error::Msg(format!("serialising the weights: {e}")))?;
    let mut config = serde_json::to_string_pretty(&cfg.to_raw(architecture(kind)))
        .map_err(|e| candle_core::Error::Msg(format!("serialising the config: {e}")))?;
    config.push('\n');
    Ok(vec![
        ("config.json".into(), config.into_bytes()),
        ("model.safetensors".into(), weights),
    ])
}

/// Writes [`model_files`] into `dir` (created if needed), replacing files of the same names.
///
/// # Errors
/// [`ModelError::Io`] for a file that cannot be written, and [`model_files`]'s.
pub fn save_pretrained(
    dir: &Path,
    cfg: &VisionConfig,
    kind: VisionKind,
    varmap: &VarMap,
) -> Result<()> {
    let files = model_files(cfg, kind, varmap)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(io(&path))?;
    }
    Ok(())
}
