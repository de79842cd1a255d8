//! `--request-timeout-s`: a request not answered in time gets a JSON 504. Its work is dropped
//! with it: the permit frees at once, and the batcher's answer, if it comes, goes nowhere.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The middleware.
pub async fn limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = state.config.request_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            millis: limit.as_millis(),
        }
        .into_response(),
    }
}
