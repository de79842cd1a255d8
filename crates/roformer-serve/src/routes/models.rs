//! `GET /v1/models` (OpenAI), which OpenAI clients call first: `{"object": "list", "data":
//! [{"id", "object": "model", "created", "owned_by"}]}`, one entry per model served: the
//! RoFormer model (`/v1/embeddings`), then the GGUF model (`/v1/completions`) with `--gguf`.
//! Each `id` is the name the routes answer with; `created` is when the server started.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::state::AppState;

/// Who `owned_by` names.
const OWNER: &str = "roformer-serve";

/// One model of the list.
#[derive(Debug, Serialize)]
pub struct ModelEntry {
    id: String,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

/// The body of `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct ModelList {
    object: &'static str,
    data: Vec<ModelEntry>,
}

/// `GET /v1/models`.
pub async fn models(State(state): State<AppState>) -> Json<ModelList> {
    let entry = |id: &str| ModelEntry {
        id: id.to_owned(),
        object: "model",
        created: state.started_unix,
        owned_by: OWNER,
    };
    let mut data = vec![entry(&state.backend.model_id)];
    if let Some(generator) = &state.generator {
        data.push(entry(&generator.model().model_id));
    }
    Json(ModelList {
        object: "list",
        data,
    })
}
