//! `POST /v1/embeddings` (OpenAI): `{"input", "model", "encoding_format"}` -> `{"object":
//! "list", "data": [{"object": "embedding", "embedding", "index"}], "model", "usage"}`.
//! `base64` is the little-endian f32 bytes of each vector. Vectors are L2-normalised and pooled
//! by `--pooling`; inputs over the limit are refused (OpenAI has no truncate flag).
//!
//! The `--gguf` completion routes (`/v1/completions`, `/v1/chat/completions`) are in
//! [`super::completions`], served by their own continuous-batching generator rather than the batcher.

use axum::extract::State;
use axum::{Extension, Json};
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::embed::vectors;
use crate::access_log::Usage;
use crate::batcher::Task;
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// `encoding_format`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    /// Lists of numbers.
    #[default]
    Float,
    /// Base64 of the little-endian f32 bytes.
    Base64,
}

/// The body of `POST /v1/embeddings`.
#[derive(Debug, Deserialize)]
pub struct EmbeddingsRequest {
    /// One text or a list.
    pub input: Inputs,
    /// Echoed in the answer (the server has one model).
    pub model: Option<String>,
    /// How vectors are written.
    #[serde(default)]
    pub encoding_format: EncodingFormat,
}

/// A vector, as numbers or base64.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Embedding {
    /// Numbers.
    Float(Vec<f32>),
    /// Base64 of the little-endian f32 bytes.
    Base64(String),
}

/// One entry of `data`.
#[derive(Debug, Serialize)]
pub struct EmbeddingData {
    object: &'static str,
    embedding: Embedding,
    index: usize,
}

/// `usage`.
#[derive(Debug, Serialize)]
pub struct TokenUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct EmbeddingsResponse {
    object: &'static str,
    data: Vec<EmbeddingData>,
    model: String,
    usage: TokenUsage,
}

/// The handler.
pub async fn embeddings(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<EmbeddingsRequest>,
) -> Result<(Extension<Usage>, Json<EmbeddingsResponse>), ApiError> {
    let task = Task::Embed {
        pooling: state.config.pooling,
        normalize: true,
    };
    let (vectors, usage) = vectors(&state, req.input, task, false).await?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| EmbeddingData {
            object: "embedding",
            embedding: match req.encoding_format {
                EncodingFormat::Float => Embedding::Float(v),
                EncodingFormat::Base64 => Embedding::Base64(base64_f32(&v)),
            },
            index,
        })
        .collect();
    let response = EmbeddingsResponse {
        object: "list",
        data,
        model: req.model.unwrap_or_else(|| state.backend.model_id.clone()),
        usage: TokenUsage {
            prompt_tokens: usage.tokens,
            total_tokens: usage.tokens,
        },
    };
    Ok((Extension(usage), Json(response)))
}

/// Base64 (standard alphabet, padded) of the little-endian bytes of `v`.
fn base64_f32(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
