//! The image routes, served with `--vision` or `--vision-model DIR`; each takes the image
//! file's bytes (PNG or JPEG) as its body, as the Hugging Face inference API does:
//! - `POST /image-classification?top_k=5` -> `[{"label", "score"}, ...]`, softmax
//!   probabilities by descending score (a classifier checkpoint only);
//! - `POST /embed_image?pooling=cls&normalize=true` -> the image's vector `[hidden]`: the CLS
//!   token (`cls`, the model's `pooler_output`, as `roformer vision embed`) or the mean of the
//!   patch tokens (`mean`), L2-normalised unless `normalize=false`.
//!
//! Both are admitted as the text routes are (429 beyond `--max-concurrent-requests`) and queued
//! to the image thread ([`crate::vision::queue`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use roformer::pipeline::image::LabelScore;
use roformer::pipeline::Pooling;
use serde::Deserialize;

use super::embed::PoolingName;
use super::mismatch;
use crate::access_log::Usage;
use crate::error::ApiError;
use crate::state::AppState;
use crate::vision::queue::{ImageOutput, ImageTask};
use crate::vision::ImageBody;

/// The labels answered when `top_k` is not given (the Hugging Face pipeline's default).
pub const DEFAULT_TOP_K: usize = 5;

/// The query of `POST /image-classification`.
#[derive(Debug, Deserialize)]
pub struct ClassifyQuery {
    /// How many labels to answer, at least 1 (default [`DEFAULT_TOP_K`]; at most every label).
    pub top_k: Option<usize>,
}

/// The query of `POST /embed_image`.
#[derive(Debug, Deserialize)]
pub struct EmbedImageQuery {
    /// `cls` (default) or `mean`.
    pub pooling: Option<PoolingName>,
    /// L2-normalise the vector (default true, as `/embed`).
    pub normalize: Option<bool>,
}

/// The handler of `POST /image-classification`.
pub async fn image_classification(
    State(state): State<AppState>,
    query: Result<Query<ClassifyQuery>, QueryRejection>,
    ImageBody(bytes): ImageBody,
) -> Result<(Extension<Usage>, Json<Vec<LabelScore>>), ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let top_k = query.top_k.unwrap_or(DEFAULT_TOP_K);
    if top_k == 0 {
        return Err(ApiError::Validation("top_k must be at least 1".into()));
    }
    let queue = state.images.as_ref().ok_or_else(no_vision_model)?;
    if queue.backend().classifier().is_none() {
        return Err(ApiError::NotFound(format!(
            "{} is not an image classifier (no classifier.* tensors): POST /embed_image \
             embeds its images",
            queue.backend().model_id
        )));
    }
    let (output, usage) = run(&state, ImageTask::Classify { top_k }, bytes).await?;
    match output {
        ImageOutput::Labels(labels) => Ok((Extension(usage), Json(labels))),
        ImageOutput::Vector(_) => Err(mismatch()),
    }
}

/// The handler of `POST /embed_image`.
pub async fn embed_image(
    State(state): State<AppState>,
    query: Result<Query<EmbedImageQuery>, QueryRejection>,
    ImageBody(bytes): ImageBody,
) -> Result<(Extension<Usage>, Json<Vec<f32>>), ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let task = ImageTask::Embed {
        pooling: query.pooling.map_or(Pooling::Cls, Pooling::from),
        normalize: query.normalize.unwrap_or(true),
    };
    let (output, usage) = run(&state, task, bytes).await?;
    match output {
        ImageOutput::Vector(vector) => Ok((Extension(usage), Json(vector))),
        ImageOutput::Labels(_) => Err(mismatch()),
    }
}

/// Admits the request (429 beyond the limit), queues its image for `task` and waits: the
/// answer and, for the access log, one input of the image's tokens.
async fn run(
    state: &AppState,
    task: ImageTask,
    bytes: axum::body::Bytes,
) -> Result<(ImageOutput, Usage), ApiError> {
    let queue = state.images.as_ref().ok_or_else(no_vision_model)?;
    let _permit = state.admission.admit()?;
    let answer = queue.submit(task, bytes).await?;
    let usage = Usage {
        inputs: 1,
        tokens: answer.tokens,
        texts: Vec::new(),
    };
    Ok((answer.output, usage))
}

/// The 404 of an image route on a server without a vision model.
fn no_vision_model() -> ApiError {
    ApiError::NotFound(
        "no vision model is served: start the server with --vision (the built-in \
         Fashion-MNIST model) or --vision-model DIR"
            .into(),
    )
}

/// The 400 of a query string that does not parse.
fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::Malformed(format!("the query string: {}", e.body_text()))
}
