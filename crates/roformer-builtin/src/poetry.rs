//! The built-in text model: a small character-level RoFormer masked LM trained on the Tang and
//! Song poems and the Song lyrics (chinese-poetry), in traditional and simplified characters;
//! see `assets/poetry-model/MODEL_CARD.md`.

use std::path::PathBuf;

use roformer::pipeline::{MaskedLm, PipelineError};
use roformer::{ModelDir, ModelError, Precision, RoFormerTokenizer, TokenizerError};

/// How the built-in model is named in messages.
pub const NAME: &str = "<built-in poetry model>";

/// Its `config.json`.
pub const CONFIG: &str = include_str!("../assets/poetry-model/config.json");
/// Its `model.safetensors` (f16).
pub const WEIGHTS: &[u8] = include_bytes!("../assets/poetry-model/model.safetensors");
/// Its `vocab.txt`.
pub const VOCAB: &str = include_str!("../assets/poetry-model/vocab.txt");
/// Its `tokenizer_config.json`.
pub const TOKENIZER_CONFIG: &str = include_str!("../assets/poetry-model/tokenizer_config.json");

/// The built-in model's tokenizer.
///
/// # Errors
/// None for the shipped files; the type is [`RoFormerTokenizer::from_texts`]'s.
pub fn tokenizer() -> Result<RoFormerTokenizer, TokenizerError> {
    RoFormerTokenizer::from_texts(VOCAB, Some(TOKENIZER_CONFIG))
}

/// The built-in model's config and weights, named [`NAME`].
///
/// # Errors
/// None for the shipped files; the type is [`ModelDir::from_memory`]'s.
pub fn model_dir() -> Result<ModelDir, ModelError> {
    ModelDir::from_memory(PathBuf::from(NAME), CONFIG, WEIGHTS.to_vec())
}

/// The built-in model as a [`MaskedLm`], its products in `precision`: fill a mask in a line.
///
/// ```
/// let lm = roformer_builtin::poetry::masked_lm(roformer::Precision::F32)?;
/// let masks = lm.fill_mask("举头望明[MASK]", 3)?;
/// let best = &masks[0].predictions[0];
/// assert_eq!(best.token.as_deref(), Some("月"));
/// assert_eq!(best.sequence.as_deref(), Some("举头望明月"));
/// # Ok::<(), roformer::pipeline::PipelineError>(())
/// ```
///
/// # Errors
/// None for the shipped files; the type is [`MaskedLm::new`]'s.
pub fn masked_lm(precision: Precision) -> Result<MaskedLm, PipelineError> {
    MaskedLm::new(&model_dir()?, tokenizer()?, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use roformer::RoFormerForMaskedLM;

    #[test]
    fn the_built_in_model_loads_with_its_tokenizer() {
        let tokenizer = tokenizer().unwrap();
        let dir = model_dir().unwrap();
        assert!(dir.checkpoint.has_mlm_head());
        assert_eq!(dir.config.vocab_size, tokenizer.vocab_size());
        let weights_mb = WEIGHTS.len() as f64 / 1e6;
        assert!(weights_mb <= 20.0, "{weights_mb} MB");
        let loaded = dir
            .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
            .unwrap();
        assert!(loaded.unused.is_empty(), "{:?}", loaded.unused);
        // Both scripts are in the vocabulary.
        for c in ["举", "舉", "头", "頭", "月"] {
            assert!(tokenizer.vocab().contains(c), "{c}");
        }
    }
}
