//! What the front of the generator ([`super::runner`]) hands the scheduler
//! ([`super::scheduler`]) and what comes back: a completion's job, its admitted form, its
//! events and why it ended, and the limits both run within.

use llama::generate::Sampling;
use tokio::sync::OwnedSemaphorePermit;

use crate::error::ApiError;

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
