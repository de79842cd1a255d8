//! `POST /rerank` (TEI): `{"query", "texts", "truncate" (false), "raw_scores" (false),
//! "return_text" (false)}` -> `[{"index", "score"}, ...]` (with `"text"` when `return_text`),
//! by descending score (ties: lower index first). Each text is scored with the query as the
//! pair `[CLS] query [SEP] text [SEP]` by a sequence classifier with one label, as TEI's
//! rerankers are (a cross-encoder): the score is the sigmoid of its logit, or the logit with
//! `raw_scores`. A model without a classifier head is refused with 404, a classifier of
//! several labels (use `/predict`) with 422.

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::{mismatch, prepare_pairs};
use crate::access_log::Usage;
use crate::batcher::{Output, Task};
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// The body of `POST /rerank`.
#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    /// The query every text is scored against.
    pub query: String,
    /// The texts to rank (at least one).
    pub texts: Vec<String>,
    /// Cut pairs over `--max-input-length` instead of refusing them (TEI's `null` is false).
    #[serde(default)]
    pub truncate: Option<bool>,
    /// The logit instead of its sigmoid.
    #[serde(default)]
    pub raw_scores: bool,
    /// Echo each text in its entry.
    #[serde(default)]
    pub return_text: bool,
}

impl RerankRequest {
    /// The texts, checked as every text route checks them (at least one, at most `max`, none
    /// empty), and the query (not empty).
    ///
    /// # Errors
    /// [`ApiError::Empty`], [`ApiError::Validation`].
    pub fn texts(&self, max: usize) -> Result<Vec<String>, ApiError> {
        if self.query.trim().is_empty() {
            return Err(ApiError::Empty(
                "query is empty: send the text to rank the others against".into(),
            ));
        }
        Inputs::Many(self.texts.clone()).texts(max)
    }
}

/// One ranked text.
#[derive(Debug, Serialize)]
pub struct Rank {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    score: f32,
}

/// The entries of `scores` (one per text, in request order) by descending score, ties by the
/// lower index; with `texts`, each carries its text.
pub fn ranked(scores: &[f32], texts: Option<&[String]>) -> Vec<Rank> {
    let mut ranks: Vec<Rank> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Rank {
            index,
            text: texts.and_then(|t| t.get(index).cloned()),
            score,
        })
        .collect();
    ranks.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranks
}

/// The handler.
pub async fn rerank(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<RerankRequest>,
) -> Result<(Extension<Usage>, Json<Vec<Rank>>), ApiError> {
    if state.backend.classifier().is_none() {
        return Err(ApiError::NotFound(format!(
            "{} is not a sequence classifier: /rerank needs a checkpoint saved from \
             RoFormerForSequenceClassification with one label (a cross-encoder)",
            state.backend.model_id
        )));
    }
    let labels = state.backend.labels.len();
    if labels != 1 {
        return Err(ApiError::Validation(format!(
            "{} is a classifier of {labels} labels, not a reranker: /rerank needs a classifier \
             with one label (its logit is the relevance); use /predict for these labels",
            state.backend.model_id
        )));
    }
    let texts = req.texts(state.config.max_client_batch_size)?;
    let truncate = req.truncate.unwrap_or(false);
    let prepared = prepare_pairs(&state, &req.query, texts, truncate)?;
    let Output::Logits(logits) = prepared.run(&state, Task::Classify).await? else {
        return Err(mismatch());
    };
    let scores: Vec<f32> = logits
        .iter()
        .map(|z| {
            let z = z.first().copied().unwrap_or(0.0);
            if req.raw_scores {
                z
            } else {
                sigmoid(z)
            }
        })
        .collect();
    let echoed = req.return_text.then_some(req.texts.as_slice());
    Ok((
        Extension(prepared.usage.clone()),
        Json(ranked(&scores, echoed)),
    ))
}

/// `1 / (1 + exp(-z))`, in f64.
fn sigmoid(z: f32) -> f32 {
    (1.0 / (1.0 + (-f64::from(z)).exp())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_descending_score_ties_by_index() {
        let texts: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let r = ranked(&[0.2, 0.9, 0.2, -1.0], Some(&texts));
        let order: Vec<usize> = r.iter().map(|r| r.index).collect();
        assert_eq!(order, [1, 0, 2, 3]);
        assert_eq!(r[0].text.as_deref(), Some("b"));
        assert!(ranked(&[0.5], None)[0].text.is_none());
    }

    #[test]
    fn sigmoid_is_stable() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(1000.0), 1.0);
        assert_eq!(sigmoid(-1000.0), 0.0);
    }
}
