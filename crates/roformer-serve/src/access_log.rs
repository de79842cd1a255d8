//! Access logs: one line per request, `METHOD ROUTE STATUS LATENCYms inputs=N tokens=N`, to
//! stderr (or a sink given at start). The texts appear (as `texts=[...]`, JSON) only with
//! `--log-inputs`: a handler hands them over in [`Usage`], and this module drops them
//! otherwise. Every request is also counted in the metrics.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::Metrics;

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

/// What the middleware needs: the metrics it counts requests in, whether texts are logged
/// (`--log-inputs`), and where lines go.
#[derive(Clone)]
pub struct AccessLog {
    /// Counters and histograms of the server.
    pub metrics: Arc<Metrics>,
    /// Whether a request's texts are logged.
    pub log_inputs: bool,
    /// Where log lines go.
    pub sink: LogSink,
}

/// The middleware: times the request, then logs and counts it.
pub async fn log(State(access): State<AccessLog>, req: Request, next: Next) -> Response {
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
    access.metrics.request(
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
    if access.log_inputs && !usage.texts.is_empty() {
        let texts = serde_json::to_string(&usage.texts).unwrap_or_default();
        line.push_str(&format!(" texts={texts}"));
    }
    (access.sink)(&line);
    response
}
