//! One generation at a time, with a bounded queue. A request takes a place in the queue
//! (429 when `--max-waiting-generations` are already waiting), waits for the model, then
//! decodes on a blocking thread that sends its text piece by piece on a channel. The handler or
//! the event stream holds the channel's receiving end: when the client goes away the receiver
//! is dropped, and decoding stops before the next token's forward pass.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use llama::generate::{generate, Sampling};
use llama::LlamaError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::model::LlamaModel;
use super::stop::{Step, StopScan};
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

/// What the decoding thread sends.
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

/// The queue in front of the model; cheap to clone.
#[derive(Debug, Clone)]
pub struct Generator {
    model: Arc<LlamaModel>,
    metrics: Arc<Metrics>,
    places: Arc<Semaphore>,
    places_total: usize,
    running: Arc<Semaphore>,
    pause: Duration,
}

/// Why decoding stopped early inside the token callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    /// A stop string: the text before it is sent already.
    StopString,
    /// An end token: the text held back for a possible stop string is sent.
    EndToken,
    /// The receiver was dropped.
    ClientGone,
}

impl Generator {
    /// A generator for `model` admitting one running and `max_waiting` waiting requests;
    /// `pause` follows each token (zero but in tests, which hold a generation open with it).
    pub fn new(
        model: Arc<LlamaModel>,
        metrics: Arc<Metrics>,
        max_waiting: usize,
        pause: Duration,
    ) -> Generator {
        let places_total = max_waiting.saturating_add(1);
        Generator {
            model,
            metrics,
            places: Arc::new(Semaphore::new(places_total)),
            places_total,
            running: Arc::new(Semaphore::new(1)),
            pause,
        }
    }

    /// The model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// Requests waiting for the model or running on it.
    pub fn in_queue(&self) -> usize {
        self.places_total - self.places.available_permits()
    }

    /// Queues `job`, waits for the model, and starts decoding: the events arrive on the
    /// receiver, and dropping it stops the decoding.
    ///
    /// # Errors
    /// [`ApiError::GenerationQueueFull`] at once when the queue is full.
    pub async fn start(&self, job: Job) -> Result<UnboundedReceiver<Event>, ApiError> {
        let place =
            self.places
                .clone()
                .try_acquire_owned()
                .map_err(|_| ApiError::GenerationQueueFull {
                    waiting: self.places_total - 1,
                })?;
        let turn = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::Backend("the generator has stopped".into()))?;
        let (tx, rx) = unbounded_channel();
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.run(&job, &tx, (place, turn)));
        Ok(rx)
    }

    /// Decodes `job` on this (blocking) thread, holding the queue place and the turn.
    fn run(
        &self,
        job: &Job,
        tx: &UnboundedSender<Event>,
        _held: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    ) {
        let event = catch_unwind(AssertUnwindSafe(|| self.decode(job, tx))).unwrap_or_else(|_| {
            Some(Event::Failed(ApiError::Backend(
                "the model panicked on this prompt (a bug: please report it)".into(),
            )))
        });
        let outcome = match &event {
            Some(Event::Done { finish, .. }) => finish.reason(),
            Some(_) => "error",
            None => "cancelled",
        };
        self.metrics.generation_ended(outcome);
        if let Some(event) = event {
            let _ = tx.send(event);
        }
    }

    /// The decoding loop; the last event to send, or `None` when the client went away.
    fn decode(&self, job: &Job, tx: &UnboundedSender<Event>) -> Option<Event> {
        let mut state = Decoding {
            job,
            tx,
            generator: self,
            scan: StopScan::new(job.stops.clone()),
            tokens: Vec::new(),
            produced: 0,
            halt: None,
        };
        let result = generate(
            self.model.model(),
            &job.prompt,
            job.max_tokens,
            job.sampling,
            None,
            |token| state.on_token(token),
        );
        let finish = match (result, state.halt) {
            (_, Some(Halt::ClientGone)) => return None,
            (Err(e), None) => return Some(Event::Failed(ApiError::Backend(e.to_string()))),
            (_, Some(Halt::StopString | Halt::EndToken)) => Finish::Stop,
            (Ok(_), None) => Finish::Length,
        };
        if state.halt != Some(Halt::StopString) {
            if let Err(e) = state.flush() {
                return Some(Event::Failed(ApiError::Backend(e.to_string())));
            }
        }
        Some(Event::Done {
            finish,
            completion_tokens: state.produced,
        })
    }
}

/// One decoding's running state: what the token callback sees.
struct Decoding<'a> {
    job: &'a Job,
    tx: &'a UnboundedSender<Event>,
    generator: &'a Generator,
    scan: StopScan,
    tokens: Vec<u32>,
    produced: usize,
    halt: Option<Halt>,
}

impl Decoding<'_> {
    /// Takes one new token: stops when the client is gone (before counting it), at an end
    /// token or a stop string (by returning an error, which ends [`generate`]); sends the text
    /// that is decided.
    fn on_token(&mut self, token: u32) -> llama::Result<()> {
        if self.tx.is_closed() {
            return self.halt(Halt::ClientGone);
        }
        self.produced += 1;
        self.generator.metrics.generated_token();
        if self.job.stop_ids.contains(&token) {
            return self.halt(Halt::EndToken);
        }
        self.tokens.push(token);
        let text = self.generator.model.tokenizer().decode(&self.tokens)?;
        let (piece, stop) = match self.scan.step(&text) {
            Step::Send(piece) => (piece, false),
            Step::Stop(piece) => (piece, true),
        };
        self.send(piece);
        if stop {
            return self.halt(Halt::StopString);
        }
        if !self.generator.pause.is_zero() {
            std::thread::sleep(self.generator.pause);
        }
        Ok(())
    }

    /// Records why decoding stops, and stops it.
    fn halt(&mut self, why: Halt) -> llama::Result<()> {
        self.halt = Some(why);
        Err(LlamaError::Request(format!("decoding halted: {why:?}")))
    }

    /// Sends the text held back for a stop string that did not come.
    fn flush(&mut self) -> llama::Result<()> {
        let text = self.generator.model.tokenizer().decode(&self.tokens)?;
        let rest = self.scan.finish(&text);
        self.send(rest);
        Ok(())
    }

    fn send(&self, piece: String) {
        if !piece.is_empty() {
            let _ = self.tx.send(Event::Text(piece));
        }
    }
}
