//! Inference pipelines: texts in, answers out. Fill-mask, embeddings and sequence
//! classification, each over a batch of encoded texts, so that a caller (the CLI, one text at a
//! time; the server's batcher, many requests at once) has one way in.
//!
//! A batch is padded on the right to its longest encoding with the pad token, and the attention
//! mask hides the padding (a batch that needs no padding runs without a mask). Every output is
//! checked for NaN and infinity: a checkpoint whose weights are finite can still overflow f32 on
//! some text, and a non-finite value never passes for a result.

pub mod classify;
pub mod embed;
pub mod fill_mask;
pub mod scores;

use candle_core::{Device, Tensor};

use crate::{Encoding, ModelError};

pub use classify::{classify, labels};
pub use embed::{embed, NonFinite, Pooling};
pub use fill_mask::{fill, fill_mask, Candidate, MaskCandidates};
pub use scores::{softmax, top_k};

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
}

impl From<candle_core::Error> for PipelineError {
    fn from(e: candle_core::Error) -> Self {
        PipelineError::Model(ModelError::Candle(e))
    }
}

/// A batch as model inputs: `ids` and `types` `[b, t]` padded with `pad_id` (type 0), and the
/// attention mask `[b, t]` (f32, 1 for tokens, 0 for padding).
pub(crate) struct Padded {
    pub ids: Tensor,
    pub types: Tensor,
    pub mask: Tensor,
    /// Whether any text is shorter than `t`.
    pub padded: bool,
}

impl Padded {
    /// Pads `batch` (at least one encoding) to its longest encoding.
    pub(crate) fn new(
        batch: &[&Encoding],
        pad_id: u32,
        device: &Device,
    ) -> candle_core::Result<Padded> {
        let b = batch.len();
        let t = batch.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * t);
        let mut types = Vec::with_capacity(b * t);
        let mut mask = Vec::with_capacity(b * t);
        for e in batch {
            let missing = t - e.len();
            ids.extend_from_slice(&e.ids);
            ids.extend(std::iter::repeat_n(pad_id, missing));
            types.extend_from_slice(&e.type_ids);
            types.extend(std::iter::repeat_n(0, missing));
            mask.extend(e.attention_mask.iter().map(|&m| m as f32));
            mask.extend(std::iter::repeat_n(0f32, missing));
        }
        let padded = batch.iter().any(|e| e.len() < t);
        Ok(Padded {
            ids: Tensor::from_vec(ids, (b, t), device)?,
            types: Tensor::from_vec(types, (b, t), device)?,
            mask: Tensor::from_vec(mask, (b, t), device)?,
            padded,
        })
    }

    /// The attention mask to give the model: none when nothing is padded (the same result,
    /// without the masking work).
    pub(crate) fn model_mask(&self) -> Option<&Tensor> {
        self.padded.then_some(&self.mask)
    }
}

/// The index and value of the first NaN or infinity in `values`.
pub(crate) fn first_non_finite(values: &[f32]) -> Option<(usize, f32)> {
    values
        .iter()
        .position(|v| !v.is_finite())
        .map(|i| (i, values[i]))
}
