//! `GET /health`, `GET /info`, `GET /metrics`, `GET /` (the page), and the JSON 404/405.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use roformer::pipeline::image::MAX_PATCHES;
use roformer::pipeline::Pooling;
use roformer::Precision;
use serde::Serialize;

use crate::backend::Head;
use crate::error::ApiError;
use crate::generate::ModelCard;
use crate::state::AppState;
use crate::vision::ImageQueue;

/// The page: one file, no build step, no external assets.
const PAGE: &str = include_str!("../page/index.html");

/// `GET /health`: 200 with an empty body when serving; 503 once shutdown has begun.
pub async fn health(State(state): State<AppState>) -> Response {
    if state.is_draining() {
        ApiError::Unhealthy.into_response()
    } else {
        StatusCode::OK.into_response()
    }
}

/// `model_type` of `/info`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelType {
    /// An encoder or masked LM: embeddings.
    Embedding {
        /// The default pooling.
        pooling: &'static str,
    },
    /// A classifier of several labels: `/predict`.
    Classifier {
        /// The label of each index.
        id2label: BTreeMap<String, String>,
    },
    /// A classifier of one label, a cross-encoder: `/rerank` (and `/predict`).
    Reranker {
        /// The label of its one index.
        id2label: BTreeMap<String, String>,
    },
}

/// The body of `GET /info`.
#[derive(Debug, Serialize)]
pub struct Info {
    model_id: String,
    model_sha: Option<String>,
    model_dtype: &'static str,
    model_type: ModelType,
    fill_mask: bool,
    max_concurrent_requests: usize,
    max_input_length: usize,
    max_batch_tokens: usize,
    max_client_batch_size: usize,
    version: &'static str,
    generation_model: Option<GenerationModel>,
    vision_model: Option<VisionModelInfo>,
    routes: Vec<&'static str>,
}

/// The vision model of `--vision` / `--vision-model` in `/info` (`null` without one): what it
/// is, how its images are read, and the image routes' limits.
#[derive(Debug, Serialize)]
pub struct VisionModelInfo {
    model_id: String,
    /// `image-classification` for a classifier, `image-feature-extraction` for a backbone.
    model_type: &'static str,
    /// The label of each index (empty for a backbone).
    id2label: BTreeMap<String, String>,
    patch_size: usize,
    hidden_size: usize,
    num_channels: usize,
    /// The default pooling of `/embed_image`.
    pooling: &'static str,
    /// The largest image body, in bytes (`--max-body-bytes`).
    max_image_bytes: u64,
    /// The most pixels an image may declare (`--max-image-pixels`).
    max_image_pixels: u64,
    /// The most patches an image may make after preprocessing.
    max_image_patches: usize,
}

/// The vision model's part of `/info`.
fn vision_info(queue: &ImageQueue) -> VisionModelInfo {
    let backend = queue.backend();
    let config = backend.model().config();
    let limits = queue.limits();
    VisionModelInfo {
        model_id: backend.model_id.clone(),
        model_type: if backend.classifier().is_some() {
            "image-classification"
        } else {
            "image-feature-extraction"
        },
        id2label: backend
            .labels()
            .into_iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), l))
            .collect(),
        patch_size: config.patch_size,
        hidden_size: config.hidden_size,
        num_channels: config.num_channels,
        pooling: Pooling::Cls.name(),
        max_image_bytes: limits.max_bytes,
        max_image_pixels: limits.max_pixels,
        max_image_patches: MAX_PATCHES,
    }
}

/// The GGUF model of `--gguf` in `/info` (`null` without one): its card and the completion
/// routes' limits.
#[derive(Debug, Serialize)]
pub struct GenerationModel {
    #[serde(flatten)]
    card: ModelCard,
    max_tokens: usize,
    max_waiting_generations: usize,
    max_prefill_tokens: usize,
    /// Cache positions the running completions may reserve together.
    max_cached_tokens: usize,
    /// Bytes one cached position takes: `layers * 2 * kv_heads * head_dim * 4` (f32 keys and
    /// values).
    kv_cache_bytes_per_token: usize,
    /// The bound on the key/value cache's memory: `max_cached_tokens *
    /// kv_cache_bytes_per_token`.
    kv_cache_max_bytes: usize,
}

/// `GET /info`: the model and the limits, the GGUF model and the vision model with theirs, and
/// the routes served.
pub async fn info(State(state): State<AppState>) -> Json<Info> {
    let backend = &state.backend;
    let id2label = || {
        backend
            .labels
            .iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), l.clone()))
            .collect()
    };
    let model_type = match backend.head {
        Head::Classifier(_) if backend.labels.len() == 1 => ModelType::Reranker {
            id2label: id2label(),
        },
        Head::Classifier(_) => ModelType::Classifier {
            id2label: id2label(),
        },
        _ => ModelType::Embedding {
            pooling: state.config.pooling.name(),
        },
    };
    Json(Info {
        model_id: backend.model_id.clone(),
        model_sha: None,
        model_dtype: match backend.precision {
            Precision::Bf16 => "bfloat16",
            _ => "float32",
        },
        model_type,
        fill_mask: backend.masked_lm().is_some(),
        max_concurrent_requests: state.config.max_concurrent_requests,
        max_input_length: state.max_input_length,
        max_batch_tokens: state.config.max_batch_tokens,
        max_client_batch_size: state.config.max_client_batch_size,
        version: env!("CARGO_PKG_VERSION"),
        generation_model: state.generator.as_ref().map(|g| {
            let limits = g.limits();
            let per_token = g.model().kv_bytes_per_token();
            GenerationModel {
                card: g.model().card().clone(),
                max_tokens: state.config.max_tokens,
                max_waiting_generations: limits.max_sequences,
                max_prefill_tokens: limits.max_prefill_tokens,
                max_cached_tokens: limits.max_cached_tokens,
                kv_cache_bytes_per_token: per_token,
                kv_cache_max_bytes: limits.max_cached_tokens.saturating_mul(per_token),
            }
        }),
        vision_model: state.images.as_ref().map(vision_info),
        routes: routes(&state),
    })
}

/// The routes the loaded models serve: every route of the server but those that need a head
/// or a model it lacks (`/fill-mask` and `/embed_sparse` a masked-LM head, `/predict` a
/// classifier, `/rerank` a classifier of one label, the completion routes `--gguf`, the chat
/// route a ChatML model, `/embed_image` a vision model and `/image-classification` a vision
/// classifier).
pub fn routes(state: &AppState) -> Vec<&'static str> {
    let backend = &state.backend;
    let masked_lm = backend.masked_lm().is_some();
    let classifier = backend.classifier().is_some();
    let card = state.generator.as_ref().map(|g| g.model().card());
    let vision = state.images.as_ref().map(ImageQueue::backend);
    [
        ("GET /", true),
        ("GET /health", true),
        ("GET /info", true),
        ("GET /metrics", true),
        ("GET /v1/models", true),
        ("POST /embed", true),
        ("POST /v1/embeddings", true),
        ("POST /similarity", true),
        ("POST /embed_all", true),
        ("POST /embed_sparse", masked_lm),
        ("POST /fill-mask", masked_lm),
        ("POST /predict", classifier),
        ("POST /rerank", classifier && backend.labels.len() == 1),
        ("POST /tokenize", true),
        ("POST /decode", true),
        ("POST /v1/completions", card.is_some()),
        ("POST /v1/chat/completions", card.is_some_and(|c| c.chat)),
        (
            "POST /image-classification",
            vision.is_some_and(|v| v.classifier().is_some()),
        ),
        ("POST /embed_image", vision.is_some()),
    ]
    .into_iter()
    .filter_map(|(route, served)| served.then_some(route))
    .collect()
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let generations = state.generator.as_ref().map(|g| g.in_queue());
    let text = state
        .metrics
        .render(state.admission.in_flight(), generations);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `GET /`: the page.
pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// Any other path: a JSON 404.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such route: see GET /info and the README for the routes".into())
}

/// A known path with the wrong method: a JSON 405.
pub async fn wrong_method(method: axum::http::Method) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
    }
}
