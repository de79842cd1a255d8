//! The built-in vision model: a small ViT with 2D RoPE (DINOv3's architecture: axial rotation
//! of normalised patch centres) trained on Fashion-MNIST; see
//! `assets/fashion-model/MODEL_CARD.md`.

use std::path::PathBuf;

use roformer::images::error::ConfigError;
use roformer::images::processor::ImageProcessor;
use roformer::vision::{VisionError, VisionModelDir};

/// How the built-in vision model is named in messages.
pub const NAME: &str = "<built-in Fashion-MNIST model>";

/// Its `config.json`.
pub const CONFIG: &str = include_str!("../assets/fashion-model/config.json");
/// Its `model.safetensors`.
pub const WEIGHTS: &[u8] = include_bytes!("../assets/fashion-model/model.safetensors");
/// Its `preprocessor_config.json`.
pub const PREPROCESSOR: &str = include_str!("../assets/fashion-model/preprocessor_config.json");

/// The built-in vision model's config and weights, named [`NAME`].
///
/// # Errors
/// None for the shipped files; the type is [`VisionModelDir::from_memory`]'s.
pub fn model_dir() -> Result<VisionModelDir, VisionError> {
    VisionModelDir::from_memory(PathBuf::from(NAME), CONFIG, WEIGHTS.to_vec())
}

/// The built-in vision model's image processor.
///
/// # Errors
/// None for the shipped file; the type is [`ImageProcessor::from_json`]'s.
pub fn processor() -> Result<ImageProcessor, ConfigError> {
    ImageProcessor::from_json(PREPROCESSOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn the_built_in_vision_model_loads_with_its_processor() {
        let dir = model_dir().unwrap();
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
        processor().unwrap();
    }
}
