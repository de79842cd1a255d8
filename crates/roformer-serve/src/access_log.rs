//! Access logs: one line per request, `METHOD ROUTE STATUS LATENCYms inputs=N tokens=N`, to
//! stderr (or a sink given at start). The texts appear (as `texts=[...]`, JSON) only with
//! `--log-inputs`: a handler hands them over in [`Usage`], and this module drops them
//! otherwise. Every request is also counted in the metrics.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;

/// Where log lines go.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The default sink: standard error.
pub fn stderr() -> LogSink {
    Arc::new(|line| eprintln!("{line}"))
}

/// What a request carried, attached by its handler to the response (as an extension).
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// Texts in the request.
    pub inputs: usize,
    /// Their tokens, `[CLS]` and `[SEP]` included.
    pub tokens: usize,
    /// The texts themselves (logged only with `--log-inputs`).
    pub texts: Vec<String>,
}

/// The middleware: times the request, then logs and counts it.
pub async fn log(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(req).await;
    let latency = started.elapsed();
    let usage = response
        .extensions()
        .get::<Usage>()
        .cloned()
        .unwrap_or_default();
    let status = response.status().as_u16();
    state.metrics.request(
        &route,
        status,
        latency,
        usage.inputs as u64,
        usage.tokens as u64,
    );
    let mut line = format!(
        "{method} {route} {status} {:.1}ms inputs={} tokens={}",
        latency.as_secs_f64() * 1e3,
        usage.inputs,
        usage.tokens
    );
    if state.config.log_inputs && !usage.texts.is_empty() {
        let texts = serde_json::to_string(&usage.texts).unwrap_or_default();
        line.push_str(&format!(" texts={texts}"));
    }
    (state.log)(&line);
    response
}
