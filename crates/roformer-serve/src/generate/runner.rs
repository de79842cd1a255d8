//! The front of the generator: a request takes a place (429 when `--max-waiting-generations`
//! completions are already running or waiting) and hands its job to the scheduler's thread
//! ([`super::scheduler`]), which decodes every running completion together and sends each
//! one's text piece by piece on its own channel. The handler or the event stream holds the
//! channel's receiving end: when the client goes away, or the request runs past its deadline,
//! the receiver is dropped, and the completion leaves the batch before the next step.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration;

use llama::generate::Sampling;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::model::LlamaModel;
use super::scheduler::Scheduler;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Why a completion ended, as OpenAI's `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop string or an end token.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    /// The `finish_reason` string.
    pub fn reason(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What the scheduler sends a completion's client.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A piece of the completion.
    Text(String),
    /// The end: why, and how many tokens the model produced (end token included).
    Done {
        /// Why.
        finish: Finish,
        /// Tokens produced.
        completion_tokens: usize,
    },
    /// The model failed.
    Failed(ApiError),
}

/// One completion to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The prompt's ids (at least one).
    pub prompt: Vec<u32>,
    /// New tokens at most (at least one; prompt and these fit the context).
    pub max_tokens: usize,
    /// Greedy or sampled.
    pub sampling: Sampling,
    /// Stop strings.
    pub stops: Vec<String>,
    /// Tokens that end the completion (not part of its text).
    pub stop_ids: Vec<u32>,
}

impl Job {
    /// Cache positions the job may fill: its prompt and its new tokens.
    pub fn cached_tokens(&self) -> usize {
        self.prompt.len().saturating_add(self.max_tokens)
    }
}

/// A job with its place among the running and waiting completions and its client's channel:
/// what the scheduler's thread receives.
#[derive(Debug)]
pub struct Admitted {
    /// The completion.
    pub job: Job,
    /// Where its events go.
    pub tx: tokio::sync::mpsc::UnboundedSender<Event>,
    /// Its place, given back when it ends.
    pub place: OwnedSemaphorePermit,
}

/// How many completions may run or wait, and how the scheduler bounds its steps and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationLimits {
    /// Completions running or waiting at most (`--max-waiting-generations`); one more is
    /// answered 429.
    pub max_sequences: usize,
    /// Cache positions reserved by running completions at most (`--max-cached-tokens`): each
    /// reserves its prompt and `max_tokens`, and waits until that fits.
    pub max_cached_tokens: usize,
    /// Prompt tokens run in one step at most (`--max-prefill-tokens`): longer prompts are
    /// prefilled in chunks of this size while the others decode.
    pub max_prefill_tokens: usize,
}

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
