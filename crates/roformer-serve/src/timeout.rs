//! `--request-timeout-s`: a request not answered in time gets a JSON 504. Its work is dropped
//! with it: the permit frees at once, and the batcher's answer, if it comes, goes nowhere.
//!
//! The limit runs from the request's arrival to the end of its answer. A streamed answer has
//! begun (200) before it ends, so the middleware puts the request's [`Deadline`] in its
//! extensions, and a stream reads it and ends itself at that time (with an error event; see
//! `routes::completions::answer`).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::error::ApiError;
use crate::state::AppState;

/// When a request must be answered by: its arrival plus `--request-timeout-s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// The time.
    pub at: Instant,
    /// The limit it came from, for the error message.
    pub limit_ms: u128,
}

impl Deadline {
    /// The error of a request that ran past it.
    pub fn error(self) -> ApiError {
        ApiError::Timeout {
            millis: self.limit_ms,
        }
    }
}

/// The middleware.
pub async fn limit(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let limit = state.config.request_timeout;
    let deadline = Deadline {
        at: Instant::now() + limit,
        limit_ms: limit.as_millis(),
    };
    req.extensions_mut().insert(deadline);
    match tokio::time::timeout_at(deadline.at, next.run(req)).await {
        Ok(response) => response,
        Err(_) => deadline.error().into_response(),
    }
}
