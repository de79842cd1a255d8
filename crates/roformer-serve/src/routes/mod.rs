//! The routes, one module per family, and what the text routes share: admit, encode, queue.
//! (The image routes share theirs in [`images`].)

pub mod completions;
pub mod decode;
pub mod embed;
pub mod embed_all;
pub mod embed_sparse;
pub mod fill_mask;
pub mod images;
pub mod info;
pub mod models;
pub mod openai;
pub mod predict;
pub mod rerank;
pub mod similarity;
pub mod tokenize;

use roformer::Encoding;

use crate::access_log::Usage;
use crate::admission::Permit;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::{encode_all, encode_pairs};
use crate::state::AppState;

/// A request admitted and encoded, ready to queue.
pub(crate) struct Prepared {
    /// Held until the answer is built: the request counts against the limit until then.
    _permit: Permit,
    /// The texts' encodings, in request order.
    pub encodings: Vec<Encoding>,
    /// For the access log.
    pub usage: Usage,
}

/// Admits a request (429 beyond the limit) and encodes its texts (413 for one over the limit
/// unless `truncate`).
///
/// # Errors
/// [`ApiError::Overloaded`], [`ApiError::InputTooLong`].
pub(crate) fn prepare(
    state: &AppState,
    texts: Vec<String>,
    truncate: bool,
) -> Result<Prepared, ApiError> {
    let permit = state.admission.admit()?;
    let encodings = encode_all(
        &state.backend.tokenizer,
        &texts,
        state.max_input_length,
        truncate,
    )?;
    Ok(Prepared::new(state, permit, encodings, texts))
}

/// Admits a request (429 beyond the limit) and encodes `query` paired with each of `texts`
/// as `[CLS] query [SEP] text [SEP]` (413 for a pair over the limit unless `truncate`).
///
/// # Errors
/// [`ApiError::Overloaded`], [`ApiError::InputTooLong`], [`ApiError::Validation`].
pub(crate) fn prepare_pairs(
    state: &AppState,
    query: &str,
    texts: Vec<String>,
    truncate: bool,
) -> Result<Prepared, ApiError> {
    let permit = state.admission.admit()?;
    let encodings = encode_pairs(
        &state.backend.tokenizer,
        query,
        &texts,
        state.max_input_length,
        truncate,
    )?;
    Ok(Prepared::new(state, permit, encodings, texts))
}

impl Prepared {
    /// The request holding `permit`, with its encodings and, for the access log, its usage.
    fn new(
        state: &AppState,
        permit: Permit,
        encodings: Vec<Encoding>,
        texts: Vec<String>,
    ) -> Prepared {
        let usage = Usage {
            inputs: texts.len(),
            tokens: encodings.iter().map(Encoding::len).sum(),
            texts: if state.config.log_inputs {
                texts
            } else {
                Vec::new()
            },
        };
        Prepared {
            _permit: permit,
            encodings,
            usage,
        }
    }

    /// Queues the encodings for `task` and waits for the batcher's answer.
    ///
    /// # Errors
    /// The batcher's.
    pub(crate) async fn run(&self, state: &AppState, task: Task) -> Result<Output, ApiError> {
        state.batcher.submit(task, self.encodings.clone()).await
    }
}

/// An answer of an unexpected kind (a bug, never a user's doing).
pub(crate) fn mismatch() -> ApiError {
    ApiError::Backend("the batcher answered with the wrong kind of output".into())
}
