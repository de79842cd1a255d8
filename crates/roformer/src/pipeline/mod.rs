//! Inference pipelines: texts in, answers out. Fill-mask, embeddings (pooled, per token and
//! SPLADE) and sequence classification, each over a batch of encoded texts, so that a caller
//! (the CLI, one text at a time; the server's batcher, many requests at once) has one way in.
//! [`MaskedLm`] is fill-mask's front door: a checkpoint and its tokenizer, a text in, each
//! mask's predictions out.
//!
//! A batch is padded on the right to its longest encoding with the pad token, and the attention
//! mask hides the padding (a batch that needs no padding runs without a mask). Every output is
//! checked for NaN and infinity: a checkpoint whose weights are finite can still overflow f32 on
//! some text, and a non-finite value never passes for a result.

mod batch;
pub mod classify;
pub mod embed;
mod error;
pub mod fill_mask;
pub mod image;
mod masked_lm;
pub mod scores;
pub mod tokens;

pub use classify::{classify, labels};
pub use embed::{embed, NonFinite, Pooling};
pub use error::PipelineError;
pub use fill_mask::{fill, fill_mask, Candidate, MaskCandidates};
pub use masked_lm::{FilledMask, MaskedLm, Prediction};
pub use scores::{softmax, top_k};
pub use tokens::{splade, token_states};
