//! `POST /embed_sparse` (TEI): `{"inputs", "truncate" (false)}` -> per input, its SPLADE
//! vector as the list of its non-zero entries `[{"index", "value"}, ...]` by increasing
//! vocabulary index: `value = max_i log(1 + relu(z_i[index]))` over the masked-LM head's
//! logits `z_i` at each token of `[CLS] text [SEP]` (see `roformer::pipeline::tokens`).
//! Masked-LM checkpoints only (404 otherwise).

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;

use super::embed_all::EmbedAllRequest;
use super::{mismatch, prepare};
use crate::access_log::Usage;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::JsonBody;
use crate::state::AppState;

/// One non-zero entry of a sparse vector.
#[derive(Debug, Serialize)]
pub struct SparseValue {
    index: u32,
    value: f32,
}

/// The handler.
pub async fn embed_sparse(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<EmbedAllRequest>,
) -> Result<(Extension<Usage>, Json<Vec<Vec<SparseValue>>>), ApiError> {
    if state.backend.masked_lm().is_none() {
        return Err(ApiError::NotFound(format!(
            "{} has no masked-LM head: /embed_sparse (SPLADE) needs a checkpoint saved from \
             RoFormerForMaskedLM",
            state.backend.model_id
        )));
    }
    let texts = req.inputs.texts(state.config.max_client_batch_size)?;
    let prepared = prepare(&state, texts, req.truncate)?;
    let Output::Sparse(vectors) = prepared.run(&state, Task::Sparse).await? else {
        return Err(mismatch());
    };
    let answer = vectors
        .into_iter()
        .map(|entries| {
            entries
                .into_iter()
                .map(|(index, value)| SparseValue { index, value })
                .collect()
        })
        .collect();
    Ok((Extension(prepared.usage.clone()), Json(answer)))
}
