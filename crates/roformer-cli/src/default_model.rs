//! The model built into the binary: a small character-level RoFormer masked LM trained on the
//! Tang and Song poems and the Song lyrics (chinese-poetry), in traditional and simplified
//! characters; see `assets/poetry-model/MODEL_CARD.md`. `fill-mask`, `embed` and `tokenize`
//! use it when `--model` is not given, read from memory (nothing is written to disk).

use std::path::{Path, PathBuf};

use anyhow::Context;
use roformer::{ModelDir, RoFormerTokenizer};

/// How the built-in model is named in messages.
pub const NAME: &str = "<built-in poetry model>";

const CONFIG: &str = include_str!("../assets/poetry-model/config.json");
const WEIGHTS: &[u8] = include_bytes!("../assets/poetry-model/model.safetensors");
const VOCAB: &str = include_str!("../assets/poetry-model/vocab.txt");
const TOKENIZER_CONFIG: &str = include_str!("../assets/poetry-model/tokenizer_config.json");

/// The tokenizer of `--model DIR`, or of the built-in model when `model` is `None`.
///
/// # Errors
/// The tokenizer errors of [`RoFormerTokenizer::from_dir`] for a directory.
pub fn tokenizer(model: Option<&Path>) -> anyhow::Result<RoFormerTokenizer> {
    match model {
        Some(dir) => RoFormerTokenizer::from_dir(dir)
            .with_context(|| format!("loading the tokenizer of {}", dir.display())),
        None => RoFormerTokenizer::from_texts(VOCAB, Some(TOKENIZER_CONFIG))
            .with_context(|| format!("loading the tokenizer of the {NAME}")),
    }
}

/// The config and weights of `--model DIR`, or of the built-in model when `model` is `None`.
///
/// # Errors
/// The errors of [`ModelDir::open`] for a directory.
pub fn model_dir(model: Option<&Path>) -> anyhow::Result<ModelDir> {
    match model {
        Some(dir) => {
            ModelDir::open(dir).with_context(|| format!("loading the model in {}", dir.display()))
        }
        None => ModelDir::from_memory(PathBuf::from(NAME), CONFIG, WEIGHTS.to_vec())
            .with_context(|| format!("loading the {NAME}")),
    }
}

/// How a model is named in messages: the directory, or [`NAME`].
pub fn describe(model: Option<&Path>) -> String {
    model.map_or_else(|| NAME.to_owned(), |dir| dir.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use roformer::{Precision, RoFormerForMaskedLM};

    #[test]
    fn the_built_in_model_loads_with_its_tokenizer() {
        let tokenizer = tokenizer(None).unwrap();
        let dir = model_dir(None).unwrap();
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
