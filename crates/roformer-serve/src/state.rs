//! What every handler shares: the settings, the model, the batcher, the generator, the image
//! queue, admission,
//! metrics, the health state and the access log.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::access_log::LogSink;
use crate::admission::Admission;
use crate::backend::Backend;
use crate::batcher::Batcher;
use crate::config::ServeConfig;
use crate::generate::Generator;
use crate::metrics::Metrics;
use crate::vision::ImageQueue;

/// The shared state; cloning it is cheap.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The parts of [`AppState`].
pub struct Shared {
    /// The settings.
    pub config: ServeConfig,
    /// The model.
    pub backend: Arc<Backend>,
    /// Where requests queue.
    pub batcher: Batcher,
    /// The GGUF model's queue (`--gguf`), if one was loaded.
    pub generator: Option<Generator>,
    /// The vision model's queue (`--vision`, `--vision-model`), if one was loaded.
    pub images: Option<ImageQueue>,
    /// The bound on admitted requests.
    pub admission: Admission,
    /// Counters and histograms.
    pub metrics: Arc<Metrics>,
    /// Set once shutdown begins: `/health` answers 503.
    pub draining: AtomicBool,
    /// The token limit per input (`--max-input-length`, or the model's).
    pub max_input_length: usize,
    /// Where access log lines go.
    pub log: LogSink,
    /// When the server started, in Unix seconds (`created` of `/v1/models`).
    pub started_unix: u64,
}

impl AppState {
    /// Wraps the parts.
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Marks shutdown as begun.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
