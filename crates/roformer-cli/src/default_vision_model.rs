//! The vision model built into the binary: a small ViT with 2D RoPE (DINOv3's architecture:
//! axial rotation of normalised patch centres) trained on Fashion-MNIST; see
//! `assets/fashion-model/MODEL_CARD.md`. `vision eval`, `vision classify`, `vision embed` and
//! `serve` use it when no model is given, read from memory (nothing is written to disk).

use std::path::{Path, PathBuf};

use anyhow::Context;
use roformer::images::processor::ImageProcessor;
use roformer::vision::VisionModelDir;

/// How the built-in vision model is named in messages.
pub const NAME: &str = "<built-in Fashion-MNIST model>";

/// The built-in model's `config.json` (also the config `bench vision --part train` times).
pub const CONFIG: &str = include_str!("../assets/fashion-model/config.json");
const WEIGHTS: &[u8] = include_bytes!("../assets/fashion-model/model.safetensors");
const PREPROCESSOR: &str = include_str!("../assets/fashion-model/preprocessor_config.json");

/// The config and weights of `--model DIR`, or of the built-in model when `model` is `None`.
///
/// # Errors
/// The errors of [`VisionModelDir::open`] for a directory.
pub fn model_dir(model: Option<&Path>) -> anyhow::Result<VisionModelDir> {
    match model {
        Some(dir) => VisionModelDir::open(dir)
            .with_context(|| format!("loading the vision model in {}", dir.display())),
        None => VisionModelDir::from_memory(PathBuf::from(NAME), CONFIG, WEIGHTS.to_vec())
            .with_context(|| format!("loading the {NAME}")),
    }
}

/// The image processor of `--model DIR` (its `preprocessor_config.json`, DINOv3's defaults
/// when it has none), or of the built-in model.
///
/// # Errors
/// A `preprocessor_config.json` that does not parse or asks for what is not supported.
pub fn processor(model: Option<&Path>) -> anyhow::Result<ImageProcessor> {
    let Some(dir) = model else {
        return ImageProcessor::from_json(PREPROCESSOR)
            .with_context(|| format!("the preprocessor of the {NAME}"));
    };
    let path = dir.join("preprocessor_config.json");
    if !path.exists() {
        return Ok(ImageProcessor::default());
    }
    ImageProcessor::from_path(&path).with_context(|| format!("reading {}", path.display()))
}

/// How a model is named in messages: the directory, or [`NAME`].
pub fn describe(model: Option<&Path>) -> String {
    model.map_or_else(|| NAME.to_owned(), |dir| dir.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn the_built_in_vision_model_loads_with_its_processor() {
        let dir = model_dir(None).unwrap();
        assert!(dir.has_classifier());
        let loaded = dir.load_classifier(DType::F32, &Device::Cpu).unwrap();
        // transformers saves DINOv3's mask token (masked-image training only), which
        // inference leaves unused; nothing else may be.
        let unused: Vec<&str> = loaded.unused.iter().map(String::as_str).collect();
        assert!(
            unused.is_empty() || unused == ["dinov3_vit.embeddings.mask_token"],
            "{unused:?}"
        );
        assert_eq!(loaded.model.config().num_labels, 10);
        assert_eq!(loaded.model.config().label(9), "Ankle boot");
        let weights_mb = WEIGHTS.len() as f64 / 1e6;
        assert!(weights_mb <= 8.0, "{weights_mb} MB");
        processor(None).unwrap();
    }
}
