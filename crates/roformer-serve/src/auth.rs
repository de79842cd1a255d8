//! `--api-key`: every route but `/health` and the page (`GET /`) needs
//! `Authorization: Bearer KEY` (as TEI's `--api-key`); without the flag, no route does.
//!
//! The page is open because a browser sends no `Authorization` header when it loads a page;
//! the page holds no data, and its scripts send the key (typed by the person) on every call.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The middleware: 401 for a missing or wrong key.
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    if is_open(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.trim().as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::Unauthorized.into_response(),
    }
}

/// Whether a request needs no key: `/health` (any method: load balancers probe it) and
/// `GET /` (the page itself, not its calls).
fn is_open(method: &Method, path: &str) -> bool {
    path == "/health" || (path == "/" && method == Method::GET)
}

/// Equality whose time depends only on the lengths, not on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::{is_open, same, Method};

    #[test]
    fn compares_whole_keys() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn only_health_and_the_page_are_open() {
        assert!(is_open(&Method::GET, "/health"));
        assert!(is_open(&Method::GET, "/"));
        assert!(!is_open(&Method::POST, "/"));
        for path in [
            "/info",
            "/metrics",
            "/embed",
            "/v1/completions",
            "//",
            "/index.html",
        ] {
            assert!(!is_open(&Method::GET, path), "{path}");
        }
    }
}
