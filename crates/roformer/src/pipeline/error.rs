//! What can go wrong running a pipeline.

use crate::error::ModelError;

/// What can go wrong running a pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The model's output for one text of the batch is not finite.
    #[error(
        "the model's {what} at token {token} of text {text} are not finite ({value} at index \
         {index}): the checkpoint's weights overflow f32 on this text"
    )]
    NonFinite {
        /// The text's index in the batch.
        text: usize,
        /// What was not finite (`logits`).
        what: &'static str,
        /// The token's index in `[CLS] text [SEP]`.
        token: usize,
        /// The index in the output row (a vocabulary id or a label).
        index: usize,
        /// The value.
        value: f32,
    },
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The tokenizer's files, or a vocabulary without a special token the pipeline needs.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// A fill-mask text without a mask token.
    #[error("the text has no mask token: write {mask_token} where a token should be predicted")]
    NoMask {
        /// The tokenizer's mask token (usually `[MASK]`).
        mask_token: String,
    },
    /// Fill-mask on a checkpoint without the masked-LM head.
    #[error(
        "{} has no masked-LM head (no cls.predictions.* tensors): fill-mask needs a checkpoint \
         saved from RoFormerForMaskedLM",
        checkpoint.display()
    )]
    NoMaskedLmHead {
        /// The checkpoint file.
        checkpoint: std::path::PathBuf,
    },
}

impl From<candle_core::Error> for PipelineError {
    fn from(e: candle_core::Error) -> Self {
        PipelineError::Model(ModelError::Candle(e))
    }
}
