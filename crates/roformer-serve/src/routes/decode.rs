//! `POST /decode` (TEI): `{"ids", "skip_special_tokens" (true)}` -> the text of each list of
//! ids, always a list of strings. `ids` is one list of ids or a list of them. Tokens are joined
//! as transformers' `decode` joins them (`RoFormerTokenizer::decode`); an id past the
//! vocabulary is refused (422), where transformers would drop it.

use axum::extract::State;
use axum::{Extension, Json};
use serde::Deserialize;

use crate::access_log::Usage;
use crate::error::ApiError;
use crate::request::JsonBody;
use crate::state::AppState;

/// `ids`: one sequence or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged, expecting = "a list of token ids or a list of such lists")]
pub enum Ids {
    /// One sequence.
    One(Vec<u32>),
    /// Several.
    Many(Vec<Vec<u32>>),
}

/// The body of `POST /decode`.
#[derive(Debug, Deserialize)]
pub struct DecodeRequest {
    /// The ids to decode.
    pub ids: Ids,
    /// Drop `[CLS]`, `[SEP]`, `[PAD]`, `[UNK]` and `[MASK]` (default true).
    #[serde(default = "yes")]
    pub skip_special_tokens: bool,
}

fn yes() -> bool {
    true
}

impl DecodeRequest {
    /// The sequences, checked: at least one, at most `max` (`--max-client-batch-size`).
    ///
    /// # Errors
    /// [`ApiError::Empty`] for an empty list of sequences, [`ApiError::Validation`] for too
    /// many.
    pub fn sequences(self, max: usize) -> Result<Vec<Vec<u32>>, ApiError> {
        let sequences = match self.ids {
            Ids::One(ids) => vec![ids],
            Ids::Many(lists) => lists,
        };
        if sequences.is_empty() {
            return Err(ApiError::Empty(
                "ids is an empty list: send a list of ids, or a list of such lists".into(),
            ));
        }
        if sequences.len() > max {
            return Err(ApiError::Validation(format!(
                "{} sequences in one request, more than the limit of {max} \
                 (--max-client-batch-size): split the request",
                sequences.len()
            )));
        }
        Ok(sequences)
    }
}

/// Decodes each sequence of `ids` with `tokenizer`.
///
/// # Errors
/// [`ApiError::Validation`] naming the first id past the vocabulary.
pub fn decode_all(
    tokenizer: &roformer::RoFormerTokenizer,
    sequences: &[Vec<u32>],
    skip_special_tokens: bool,
) -> Result<Vec<String>, ApiError> {
    sequences
        .iter()
        .enumerate()
        .map(|(i, ids)| {
            tokenizer
                .decode(ids, skip_special_tokens)
                .map_err(|e| ApiError::Validation(format!("sequence {i}: {e}")))
        })
        .collect()
}

/// The handler (no model run: answered here, not by the batcher).
pub async fn decode(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<DecodeRequest>,
) -> Result<(Extension<Usage>, Json<Vec<String>>), ApiError> {
    let skip = req.skip_special_tokens;
    let sequences = req.sequences(state.config.max_client_batch_size)?;
    let _permit = state.admission.admit()?;
    let texts = decode_all(&state.backend.tokenizer, &sequences, skip)?;
    let usage = Usage {
        inputs: sequences.len(),
        tokens: sequences.iter().map(Vec::len).sum(),
        texts: if state.config.log_inputs {
            texts.clone()
        } else {
            Vec::new()
        },
    };
    Ok((Extension(usage), Json(texts)))
}
