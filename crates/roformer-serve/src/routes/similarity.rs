//! `POST /similarity` (TEI, the Hugging Face sentence-similarity task):
//! `{"inputs": {"source_sentence", "sentences"}, "parameters": {"truncate" (false)}}` -> the
//! cosine similarity of the source sentence's embedding with each sentence's, in their order
//! (`[f32]`). The embeddings are those of `/embed` with the server's `--pooling`, in one batch.

use axum::extract::State;
use axum::{Extension, Json};
use serde::Deserialize;

use super::embed::vectors;
use crate::access_log::Usage;
use crate::batcher::Task;
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// `inputs` of `POST /similarity`.
#[derive(Debug, Deserialize)]
pub struct SimilarityInputs {
    /// The text the others are compared with.
    pub source_sentence: String,
    /// The texts to compare with it (at least one).
    pub sentences: Vec<String>,
}

/// `parameters` of `POST /similarity`.
#[derive(Debug, Default, Deserialize)]
pub struct SimilarityParameters {
    /// Cut inputs over `--max-input-length` instead of refusing them (TEI's `null` is false).
    #[serde(default)]
    pub truncate: Option<bool>,
}

/// The body of `POST /similarity`.
#[derive(Debug, Deserialize)]
pub struct SimilarityRequest {
    /// The source sentence and the sentences.
    pub inputs: SimilarityInputs,
    /// Options (may be absent or `null`).
    #[serde(default)]
    pub parameters: Option<SimilarityParameters>,
}

impl SimilarityRequest {
    /// The texts to embed (the source first) and `truncate`, checked: at least one sentence.
    ///
    /// # Errors
    /// [`ApiError::Empty`] for no sentence.
    pub fn texts(self) -> Result<(Inputs, bool), ApiError> {
        let SimilarityInputs {
            source_sentence,
            sentences,
        } = self.inputs;
        if sentences.is_empty() {
            return Err(ApiError::Empty(
                "inputs.sentences is an empty list: send at least one sentence to compare".into(),
            ));
        }
        let truncate = self.parameters.and_then(|p| p.truncate).unwrap_or(false);
        let mut texts = Vec::with_capacity(sentences.len() + 1);
        texts.push(source_sentence);
        texts.extend(sentences);
        Ok((Inputs::Many(texts), truncate))
    }
}

/// The cosine of `a` and `b`, summed in f64; 0 when either is the zero vector.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    (dot / (aa.sqrt() * bb.sqrt())) as f32
}

/// The handler.
pub async fn similarity(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<SimilarityRequest>,
) -> Result<(Extension<Usage>, Json<Vec<f32>>), ApiError> {
    let (inputs, truncate) = req.texts()?;
    // Normalised, as /embed's default: such requests share a forward pass with these.
    let task = Task::Embed {
        pooling: state.config.pooling,
        normalize: true,
    };
    let (vectors, usage) = vectors(&state, inputs, task, truncate).await?;
    let (source, others) = vectors.split_first().ok_or_else(super::mismatch)?;
    let scores = others.iter().map(|v| cosine(source, v)).collect();
    Ok((Extension(usage), Json(scores)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_known_vectors() {
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 2.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-7);
        assert!((cosine(&[1.0, 0.0], &[-3.0, 0.0]) + 1.0).abs() < 1e-7);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0, "the zero vector");
    }
}
