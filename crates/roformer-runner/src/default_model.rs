//! The text model of `--model DIR`, or the built-in poetry model ([`roformer_builtin::poetry`])
//! when `--model` is not given: `fill-mask` (through [`masked_lm`]), `embed`, `tokenize`,
//! `eval` and `serve` read it through here.

use std::path::Path;

use anyhow::Context;
use roformer::pipeline::MaskedLm;
use roformer::{ModelDir, Precision, RoFormerTokenizer};
use roformer_builtin::poetry;

/// How the built-in model is named in messages.
pub const NAME: &str = poetry::NAME;

/// The tokenizer of `--model DIR`, or of the built-in model when `model` is `None`.
///
/// # Errors
/// The tokenizer errors of [`RoFormerTokenizer::from_dir`] for a directory.
pub fn tokenizer(model: Option<&Path>) -> anyhow::Result<RoFormerTokenizer> {
    match model {
        Some(dir) => RoFormerTokenizer::from_dir(dir)
            .with_context(|| format!("loading the tokenizer of {}", dir.display())),
        None => poetry::tokenizer().with_context(|| format!("loading the tokenizer of the {NAME}")),
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
        None => poetry::model_dir().with_context(|| format!("loading the {NAME}")),
    }
}

/// The masked LM of `--model DIR`, or the built-in model when `model` is `None`, its products
/// in `precision`.
///
/// # Errors
/// The errors of [`MaskedLm::from_dir`] for a directory.
pub fn masked_lm(model: Option<&Path>, precision: Precision) -> anyhow::Result<MaskedLm> {
    match model {
        Some(dir) => MaskedLm::from_dir(dir, precision)
            .with_context(|| format!("loading the masked LM in {}", dir.display())),
        None => poetry::masked_lm(precision).with_context(|| format!("loading the {NAME}")),
    }
}

/// How a model is named in messages: the directory, or [`NAME`].
pub fn describe(model: Option<&Path>) -> String {
    model.map_or_else(|| NAME.to_owned(), |dir| dir.display().to_string())
}
