//! `roformer serve`: RoFormer models as an HTTP service.
//!
//! Routes (shapes of TEI, OpenAI and the Hugging Face inference API, so their clients work):
//! `GET /health`, `GET /info`, `GET /metrics`, `GET /`, `GET /v1/models`, `POST /embed`,
//! `POST /v1/embeddings`, `POST /similarity`, `POST /embed_all`, `POST /embed_sparse`,
//! `POST /fill-mask`, `POST /predict`, `POST /rerank`, `POST /tokenize`, `POST /decode`
//! (`GET /info` lists those the loaded model serves), with a GGUF
//! LLaMA ([`Models::generator`]) `POST /v1/completions` and `POST /v1/chat/completions`, the
//! running ones decoded together, one forward pass a step, behind a bounded queue
//! ([`generate`]), and with a vision model
//! ([`Models::vision`]) `POST /image-classification` and `POST /embed_image`, the image file's
//! bytes as the body, run by their own thread ([`vision`]). Texts are admitted up to
//! `--max-concurrent-requests` (429 beyond), encoded and checked in the handler, and queued
//! to one batcher thread (`batcher.rs`) that runs the model as soon as it is free, on every
//! request queued meanwhile (up to a token budget). Errors are JSON `{"error", "error_type"}`
//! ([`error::ApiError`]).
//!
//! ```no_run
//! # async fn start(backend: roformer_serve::Backend) -> Result<(), roformer_serve::ServeError> {
//! use roformer_serve::{access_log, shutdown, ServeConfig, Server};
//! let server = Server::bind(ServeConfig::default(), backend, access_log::stderr()).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(shutdown::signal()).await
//! # }
//! ```

#![warn(missing_docs)]

pub mod access_log;
mod admission;
mod auth;
pub mod backend;
mod batcher;
pub mod config;
pub mod error;
pub mod generate;
mod metrics;
pub mod request;
pub mod routes;
pub mod shutdown;
mod state;
mod timeout;
pub mod vision;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, Method};
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;
use roformer::images::decode::DecodeLimits;
use tokio::net::TcpListener;
use tower_http::cors::CorsLayer;

pub use backend::{Backend, Head};
pub use config::ServeConfig;
pub use error::{ApiError, ServeError};
pub use generate::LlamaModel;
pub use vision::VisionBackend;

use access_log::LogSink;
use admission::Admission;
use batcher::{BatchLimits, Batcher};
use generate::{GenerationLimits, Generator};
use metrics::Metrics;
use state::{AppState, Shared};
use vision::ImageQueue;

/// The models a server runs: the RoFormer encoder (always), a GGUF LLaMA for the completion
/// routes and a vision model for the image routes (both optional). A [`Backend`] alone converts
/// into one.
#[derive(Debug)]
pub struct Models {
    /// The RoFormer model of the text routes.
    pub encoder: Backend,
    /// The decoder of `/v1/completions` and `/v1/chat/completions`; without it they answer
    /// 404.
    pub generator: Option<LlamaModel>,
    /// The model of `/image-classification` and `/embed_image`; without it they answer 404.
    pub vision: Option<VisionBackend>,
}

impl From<Backend> for Models {
    fn from(encoder: Backend) -> Models {
        Models {
            encoder,
            generator: None,
            vision: None,
        }
    }
}

/// A bound server, not yet serving.
pub struct Server {
    state: AppState,
    listener: TcpListener,
    addr: SocketAddr,
}

impl Server {
    /// Checks `config`, starts the batcher on the encoder of `models` (the generator on its
    /// decoder and the image queue on its vision model, if any) and binds `--host`:`--port`; access log lines go to `log`.
    ///
    /// # Errors
    /// [`ServeError::Config`] for a bad setting, [`ServeError::Io`] when the address cannot be
    /// bound.
    pub async fn bind(
        config: ServeConfig,
        models: impl Into<Models>,
        log: LogSink,
    ) -> Result<Server, ServeError> {
        config.validate()?;
        let Models {
            encoder: backend,
            generator,
            vision,
        } = models.into();
        let max_input_length = config
            .max_input_length
            .unwrap_or(backend.max_position_embeddings)
            .max(2);
        let backend = Arc::new(backend);
        let metrics = Arc::new(Metrics::default());
        let limits = BatchLimits {
            max_tokens: config.max_batch_tokens,
            max_wait: config.max_wait,
        };
        let batcher = Batcher::start(backend.clone(), metrics.clone(), limits);
        let generator = generator.map(|model| {
            let limits = GenerationLimits {
                max_sequences: config.max_waiting_generations,
                max_cached_tokens: config.max_cached_tokens,
                max_prefill_tokens: config.max_prefill_tokens,
            };
            Generator::new(
                Arc::new(model),
                metrics.clone(),
                limits,
                config.generation_pause,
            )
        });
        let images = vision.map(|model| {
            let limits = DecodeLimits {
                max_bytes: u64::try_from(config.max_body_bytes).unwrap_or(u64::MAX),
                max_pixels: config.max_image_pixels,
            };
            ImageQueue::start(Arc::new(model), metrics.clone(), limits)
        });
        let wanted = SocketAddr::new(config.host, config.port);
        let io = |source| ServeError::Io {
            addr: wanted.to_string(),
            source,
        };
        let listener = TcpListener::bind(wanted).await.map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let state = AppState::new(Shared {
            admission: Admission::new(config.max_concurrent_requests),
            config,
            backend,
            batcher,
            generator,
            images,
            metrics,
            draining: AtomicBool::new(false),
            max_input_length,
            log,
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
        Ok(Server {
            state,
            listener,
            addr,
        })
    }

    /// The address bound (with the port picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` resolves, then drains: no new connections, `/health` 503,
    /// admitted requests finished, for at most `--shutdown-timeout-s`.
    ///
    /// # Errors
    /// [`ServeError::Io`] when accepting connections fails.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let (draining, mut drained) = tokio::sync::watch::channel(false);
        let state = self.state.clone();
        let signal = async move {
            shutdown.await;
            state.start_draining();
            let _ = draining.send(true);
        };
        let grace = self.state.config.shutdown_timeout;
        let admission = self.state.admission.clone();
        let app = router(self.state);
        let serving = axum::serve(self.listener, app).with_graceful_shutdown(signal);
        let deadline = async move {
            if drained.wait_for(|&d| d).await.is_err() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            served = serving.into_future() => served.map_err(|source| ServeError::Io {
                addr: self.addr.to_string(),
                source,
            }),
            () = deadline => {
                eprintln!(
                    "shutdown: {} requests still running after {} s (--shutdown-timeout-s), \
                     cut off",
                    admission.in_flight(),
                    grace.as_secs_f64()
                );
                Ok(())
            }
        }
    }
}

/// The routes with their middleware: access log (outermost), CORS (with `--cors-origin`),
/// API key, request timeout, body limit.
pub fn router(state: AppState) -> Router {
    let config = &state.config;
    let mut app = Router::new()
        .route("/", get(routes::info::page))
        .route("/health", get(routes::info::health))
        .route("/info", get(routes::info::info))
        .route("/metrics", get(routes::info::metrics))
        .route("/v1/models", get(routes::models::models))
        .route("/embed", post(routes::embed::embed))
        .route("/v1/embeddings", post(routes::openai::embeddings))
        .route("/fill-mask", post(routes::fill_mask::fill_mask))
        .route("/predict", post(routes::predict::predict))
        .route("/tokenize", post(routes::tokenize::tokenize))
        .route("/decode", post(routes::decode::decode))
        .route("/similarity", post(routes::similarity::similarity))
        .route("/embed_all", post(routes::embed_all::embed_all))
        .route("/embed_sparse", post(routes::embed_sparse::embed_sparse))
        .route("/rerank", post(routes::rerank::rerank))
        .route(
            "/image-classification",
            post(routes::images::image_classification),
        )
        .route("/embed_image", post(routes::images::embed_image))
        .route("/v1/completions", post(routes::completions::completions))
        .route(
            "/v1/chat/completions",
            post(routes::completions::chat_completions),
        )
        .fallback(routes::info::not_found)
        .method_not_allowed_fallback(routes::info::wrong_method)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(from_fn_with_state(state.clone(), timeout::limit))
        .layer(from_fn_with_state(state.clone(), auth::require_key));
    if let Some(origin) = config
        .cors_origin
        .as_deref()
        .and_then(|o| HeaderValue::from_str(o).ok())
    {
        app = app.layer(
            CorsLayer::new()
                .allow_origin(origin)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
        );
    }
    let access = access_log::AccessLog {
        metrics: state.metrics.clone(),
        log_inputs: config.log_inputs,
        sink: state.log.clone(),
    };
    app.layer(from_fn_with_state(access, access_log::log))
        .with_state(state)
}

/// Builds a multi-threaded runtime, binds, calls `on_bound` with the address (to announce it),
/// and serves until SIGTERM or SIGINT, then drains ([`Server::run`]).
///
/// # Errors
/// As [`Server::bind`] and [`Server::run`]; [`ServeError::Io`] when the runtime cannot start.
pub fn run_blocking(
    config: ServeConfig,
    models: impl Into<Models>,
    log: LogSink,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io {
            addr: "(the async runtime)".into(),
            source,
        })?;
    runtime.block_on(async {
        let server = Server::bind(config, models, log).await?;
        on_bound(server.local_addr());
        server.run(shutdown::signal()).await
    })
}
