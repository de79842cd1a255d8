//! `POST /embed` (TEI): `{"inputs", "normalize" (true), "truncate" (false), "pooling"}` ->
//! one vector per input, always a list of lists.

use axum::extract::State;
use axum::{Extension, Json};
use roformer::pipeline::Pooling;
use serde::Deserialize;

use super::{mismatch, prepare};
use crate::access_log::Usage;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// `pooling` in a request.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolingName {
    /// The `[CLS]` state.
    Cls,
    /// The mean of the tokens' states.
    Mean,
}

impl From<PoolingName> for Pooling {
    fn from(p: PoolingName) -> Pooling {
        match p {
            PoolingName::Cls => Pooling::Cls,
            PoolingName::Mean => Pooling::Mean,
        }
    }
}

/// The body of `POST /embed`.
#[derive(Debug, Deserialize)]
pub struct EmbedRequest {
    /// One text or a list.
    pub inputs: Inputs,
    /// L2-normalise each vector (default true, as TEI).
    #[serde(default = "yes")]
    pub normalize: bool,
    /// Cut inputs over `--max-input-length` instead of refusing them.
    #[serde(default)]
    pub truncate: bool,
    /// The pooling (default `--pooling`).
    pub pooling: Option<PoolingName>,
}

fn yes() -> bool {
    true
}

/// Embeds the texts of `inputs`: the vectors and the usage for the log (shared with
/// `/v1/embeddings`).
///
/// # Errors
/// Validation, admission and model errors.
pub(crate) async fn vectors(
    state: &AppState,
    inputs: Inputs,
    task: Task,
    truncate: bool,
) -> Result<(Vec<Vec<f32>>, Usage), ApiError> {
    let texts = inputs.texts(state.config.max_client_batch_size)?;
    let prepared = prepare(state, texts, truncate)?;
    match prepared.run(state, task).await? {
        Output::Vectors(v) => Ok((v, prepared.usage.clone())),
        _ => Err(mismatch()),
    }
}

/// The handler.
pub async fn embed(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<(Extension<Usage>, Json<Vec<Vec<f32>>>), ApiError> {
    let pooling = req.pooling.map_or(state.config.pooling, Pooling::from);
    let task = Task::Embed {
        pooling,
        normalize: req.normalize,
    };
    let (vectors, usage) = vectors(&state, req.inputs, task, req.truncate).await?;
    Ok((Extension(usage), Json(vectors)))
}
