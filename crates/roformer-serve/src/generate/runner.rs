//! The front of the generator: a request takes a place (429 when `--max-waiting-generations`
//! completions are already running or waiting) and hands its job to the scheduler's thread
//! ([`super::scheduler`]), which decodes every running completion together and sends each
//! one's text piece by piece on its own channel. The handler or the event stream holds the
//! channel's receiving end: when the client goes away, or the request runs past its deadline,
//! the receiver is dropped, and the completion leaves the batch before the next step.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Semaphore;

use super::job::{Admitted, Event, GenerationLimits, Job};
use super::model::LlamaModel;
use super::scheduler::Scheduler;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// The front of the scheduler; cheap to clone.
#[derive(Debug, Clone)]
pub struct Generator {
    model: Arc<LlamaModel>,
    places: Arc<Semaphore>,
    limits: GenerationLimits,
    jobs: Sender<Admitted>,
}

impl Generator {
    /// A generator for `model` within `limits`, whose scheduler runs on a thread of its own
    /// until the last clone is dropped; `pause` follows each decoding step (zero but in tests,
    /// which hold a generation open with it). The limits are checked by
    /// [`crate::ServeConfig::validate`]; a thread that does not start is reported on stderr
    /// and every completion is then answered 500.
    pub fn new(
        model: Arc<LlamaModel>,
        metrics: Arc<Metrics>,
        limits: GenerationLimits,
        pause: Duration,
    ) -> Generator {
        let (jobs, inbox) = channel();
        let scheduler = Scheduler::new(model.clone(), metrics, limits, pause, inbox);
        std::thread::Builder::new()
            .name("generator".into())
            .spawn(move || scheduler.run())
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("error: cannot start the generator thread: {e}"));
        Generator {
            model,
            places: Arc::new(Semaphore::new(limits.max_sequences)),
            limits,
            jobs,
        }
    }

    /// The model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// The limits it runs within.
    pub fn limits(&self) -> GenerationLimits {
        self.limits
    }

    /// Completions running or waiting.
    pub fn in_queue(&self) -> usize {
        self.limits.max_sequences - self.places.available_permits()
    }

    /// Hands `job` to the scheduler, which starts it at its next step if its cache fits
    /// (else once enough running completions have ended): the events arrive on the receiver,
    /// and dropping it ends the completion.
    ///
    /// # Errors
    /// [`ApiError::Validation`] for a job whose prompt and `max_tokens` exceed
    /// `--max-cached-tokens`; [`ApiError::GenerationQueueFull`] at once when
    /// `--max-waiting-generations` completions are running or waiting;
    /// [`ApiError::Backend`] when the scheduler has stopped.
    pub fn start(&self, job: Job) -> Result<UnboundedReceiver<Event>, ApiError> {
        let needed = job.cached_tokens();
        if needed > self.limits.max_cached_tokens {
            return Err(ApiError::Validation(format!(
                "the prompt's {} tokens and max_tokens {} need {needed} cache positions, more \
                 than the server holds (--max-cached-tokens {}): ask for fewer tokens",
                job.prompt.len(),
                job.max_tokens,
                self.limits.max_cached_tokens
            )));
        }
        let place =
            self.places
                .clone()
                .try_acquire_owned()
                .map_err(|_| ApiError::GenerationQueueFull {
                    limit: self.limits.max_sequences,
                })?;
        let (tx, rx) = unbounded_channel();
        self.jobs
            .send(Admitted { job, tx, place })
            .map_err(|_| ApiError::Backend("the generator has stopped".into()))?;
        Ok(rx)
    }
}
