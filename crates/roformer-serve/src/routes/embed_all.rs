//! `POST /embed_all` (TEI): `{"inputs", "truncate" (false)}` -> per input, the last hidden
//! state of every token of `[CLS] text [SEP]` (`[[[f32]]]`, always a list of lists of vectors;
//! not pooled, not normalised).

use axum::extract::State;
use axum::{Extension, Json};
use serde::Deserialize;

use super::{mismatch, prepare};
use crate::access_log::Usage;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// The body of `POST /embed_all` (and of `POST /embed_sparse`).
#[derive(Debug, Deserialize)]
pub struct EmbedAllRequest {
    /// One text or a list.
    pub inputs: Inputs,
    /// Cut inputs over `--max-input-length` instead of refusing them.
    #[serde(default)]
    pub truncate: bool,
}

/// The handler.
pub async fn embed_all(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<EmbedAllRequest>,
) -> Result<(Extension<Usage>, Json<Vec<Vec<Vec<f32>>>>), ApiError> {
    let texts = req.inputs.texts(state.config.max_client_batch_size)?;
    let prepared = prepare(&state, texts, req.truncate)?;
    match prepared.run(&state, Task::TokenStates).await? {
        Output::TokenStates(states) => Ok((Extension(prepared.usage.clone()), Json(states))),
        _ => Err(mismatch()),
    }
}
