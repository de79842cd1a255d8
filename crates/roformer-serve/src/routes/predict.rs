//! `POST /predict` (TEI): `{"inputs", "raw_scores" (false), "truncate" (false)}` -> for one
//! text `[{"score", "label"}, ...]` by descending score (softmax probabilities, or the logits
//! with `raw_scores`); for a list, one such list per text. Classifier checkpoints only.

use axum::extract::State;
use axum::{Extension, Json};
use roformer::pipeline::softmax;
use serde::{Deserialize, Serialize};

use super::{mismatch, prepare};
use crate::access_log::Usage;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// The body of `POST /predict`.
#[derive(Debug, Deserialize)]
pub struct PredictRequest {
    /// One text or a list.
    pub inputs: Inputs,
    /// Logits instead of probabilities.
    #[serde(default)]
    pub raw_scores: bool,
    /// Cut inputs over `--max-input-length` instead of refusing them.
    #[serde(default)]
    pub truncate: bool,
}

/// One label's score.
#[derive(Debug, Serialize)]
pub struct Score {
    score: f64,
    label: String,
}

/// The answer: for one text, or a list for a list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PredictResponse {
    /// One text was sent.
    One(Vec<Score>),
    /// A list was sent.
    Many(Vec<Vec<Score>>),
}

/// The handler.
pub async fn predict(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<PredictRequest>,
) -> Result<(Extension<Usage>, Json<PredictResponse>), ApiError> {
    if state.backend.classifier().is_none() {
        return Err(ApiError::NotFound(format!(
            "{} is not a sequence classifier: /predict needs a checkpoint saved from \
             RoFormerForSequenceClassification",
            state.backend.model_id
        )));
    }
    let single = req.inputs.is_single();
    let texts = req.inputs.texts(state.config.max_client_batch_size)?;
    let prepared = prepare(&state, texts, req.truncate)?;
    let Output::Logits(logits) = prepared.run(&state, Task::Classify).await? else {
        return Err(mismatch());
    };
    let mut answers: Vec<Vec<Score>> = logits
        .iter()
        .map(|z| scores(&state.backend.labels, z, req.raw_scores))
        .collect();
    let response = if single {
        PredictResponse::One(answers.pop().ok_or_else(mismatch)?)
    } else {
        PredictResponse::Many(answers)
    };
    Ok((Extension(prepared.usage.clone()), Json(response)))
}

/// The labels with their scores, highest first (ties: lower label index first).
fn scores(labels: &[String], logits: &[f32], raw: bool) -> Vec<Score> {
    let values: Vec<f64> = if raw {
        logits.iter().map(|&z| f64::from(z)).collect()
    } else {
        softmax(logits)
    };
    roformer::pipeline::top_k(&values, values.len())
        .into_iter()
        .map(|(i, score)| Score {
            score,
            label: labels
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| format!("LABEL_{i}")),
        })
        .collect()
}
