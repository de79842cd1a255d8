//! The bodies of `POST /v1/completions` and `POST /v1/chat/completions` (OpenAI's fields that
//! the generator honours), and their checks, which turn a body into a [`Job`].
//! Other OpenAI fields (`top_p`, `presence_penalty`, ...) are accepted and ignored.

use llama::generate::Sampling;
use serde::Deserialize;

use crate::error::ApiError;
use crate::generate::model::chat_prompt;
use crate::generate::{Job, LlamaModel};
use crate::request::Inputs;

/// The largest `temperature` accepted (OpenAI's).
pub const MAX_TEMPERATURE: f64 = 2.0;
/// The most stop strings in one request (OpenAI's).
pub const MAX_STOPS: usize = 4;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "a string or a list of strings")]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and no choices) before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling and length fields both routes share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Options {
    /// New tokens at most (default: `--max-tokens`, or what the context leaves).
    pub max_tokens: Option<u64>,
    /// 0 for greedy decoding; above 0, sampling from `softmax(logits / temperature)`
    /// (default 1, as OpenAI's).
    pub temperature: Option<f64>,
    /// The sampler's seed: the same seed, prompt and settings give the same completion
    /// (default: a fresh one per request).
    pub seed: Option<i64>,
    /// Strings that end the completion (not included in it).
    pub stop: Option<Stop>,
    /// Answer as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Stream settings.
    pub stream_options: Option<StreamOptions>,
    /// Completions per prompt: only 1.
    pub n: Option<u64>,
    /// Let the end tokens (end of sequence, and `<|im_end|>` in a chat) not end the completion:
    /// they become part of its text, and it runs to `max_tokens` or a stop string (vLLM's
    /// extension of OpenAI's fields; for benchmarks that need a fixed length).
    #[serde(default)]
    pub ignore_eos: bool,
}

/// The body of `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The text to continue: a string, or a list holding one string.
    pub prompt: Inputs,
    /// Echoed in the answer (the server has one model).
    pub model: Option<String>,
    /// The shared fields.
    #[serde(flatten)]
    pub options: Options,
}

/// A chat message's author.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The person.
    User,
    /// The model's earlier turns.
    Assistant,
}

impl Role {
    /// The role's name in ChatML.
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a chat.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text.
    pub content: String,
}

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The chat so far; the answer is the assistant's next turn.
    pub messages: Vec<Message>,
    /// Echoed in the answer.
    pub model: Option<String>,
    /// The shared fields.
    #[serde(flatten)]
    pub options: Options,
}

impl CompletionRequest {
    /// The prompt's text: one string.
    ///
    /// # Errors
    /// [`ApiError::Validation`] for a list of other than one string.
    pub fn prompt_text(&self) -> Result<&str, ApiError> {
        match &self.prompt {
            Inputs::One(text) => Ok(text),
            Inputs::Many(texts) if texts.len() == 1 => Ok(&texts[0]),
            Inputs::Many(texts) => Err(ApiError::Validation(format!(
                "prompt is a list of {} strings: send one prompt per request (requests sent \
                 at once are decoded together)",
                texts.len()
            ))),
        }
    }
}

impl ChatRequest {
    /// The chat as a ChatML prompt.
    ///
    /// # Errors
    /// [`ApiError::Empty`] for no message.
    pub fn prompt_text(&self) -> Result<String, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::Empty(
                "messages is an empty list: send at least one message".into(),
            ));
        }
        Ok(chat_prompt(
            self.messages
                .iter()
                .map(|m| (m.role.name(), m.content.as_str())),
        ))
    }
}

impl Options {
    /// Checks the fields against the model and `max_tokens_limit` (`--max-tokens`) and
    /// builds the job for `prompt` (its token ids); `fresh_seed` is used when no seed is
    /// given.
    ///
    /// # Errors
    /// [`ApiError::Empty`] for a prompt of no tokens, [`ApiError::PromptTooLong`] for one that
    /// fills the context, [`ApiError::Validation`] for a field out of its range.
    pub fn job(
        &self,
        model: &LlamaModel,
        prompt: Vec<u32>,
        chat: bool,
        max_tokens_limit: usize,
        fresh_seed: u64,
    ) -> Result<Job, ApiError> {
        if prompt.is_empty() {
            return Err(ApiError::Empty(
                "the prompt has no tokens: send some text to continue".into(),
            ));
        }
        let context = model.context();
        let room = context.saturating_sub(prompt.len());
        if room == 0 {
            return Err(ApiError::PromptTooLong {
                tokens: prompt.len(),
                context,
            });
        }
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::Validation(
                "n must be 1: one completion per request".into(),
            ));
        }
        let max_tokens = self.max_tokens(prompt.len(), room, max_tokens_limit)?;
        Ok(Job {
            max_tokens,
            sampling: Sampling {
                temperature: self.temperature()?,
                seed: self.seed.map_or(fresh_seed, |s| s as u64),
            },
            stops: self.stops()?,
            stop_ids: if self.ignore_eos {
                Vec::new()
            } else {
                model.stop_ids(chat)
            },
            prompt,
        })
    }

    /// `max_tokens`, checked: 1 to `limit`, and within the `room` the prompt leaves.
    fn max_tokens(&self, prompt: usize, room: usize, limit: usize) -> Result<usize, ApiError> {
        let Some(asked) = self.max_tokens else {
            return Ok(limit.min(room));
        };
        let asked = usize::try_from(asked).unwrap_or(usize::MAX);
        if asked == 0 || asked > limit {
            return Err(ApiError::Validation(format!(
                "max_tokens {asked}: expected 1 to {limit} (--max-tokens)"
            )));
        }
        if asked > room {
            return Err(ApiError::Validation(format!(
                "max_tokens {asked}: the prompt has {prompt} tokens and the model's context {}, \
                 which leaves room for {room} new tokens: ask for at most {room}",
                prompt + room
            )));
        }
        Ok(asked)
    }

    /// `temperature`, checked: finite, 0 to [`MAX_TEMPERATURE`].
    fn temperature(&self) -> Result<f64, ApiError> {
        let t = self.temperature.unwrap_or(1.0);
        if !(0.0..=MAX_TEMPERATURE).contains(&t) {
            return Err(ApiError::Validation(format!(
                "temperature {t}: expected a number from 0 (greedy) to {MAX_TEMPERATURE}"
            )));
        }
        Ok(t)
    }

    /// `stop`, checked: at most [`MAX_STOPS`] strings, none empty.
    fn stops(&self) -> Result<Vec<String>, ApiError> {
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(list)) => list.clone(),
        };
        if stops.len() > MAX_STOPS {
            return Err(ApiError::Validation(format!(
                "stop has {} strings: expected at most {MAX_STOPS}",
                stops.len()
            )));
        }
        if let Some(i) = stops.iter().position(String::is_empty) {
            return Err(ApiError::Validation(format!(
                "stop string {i} is empty: every stop string must hold a text"
            )));
        }
        Ok(stops)
    }
}
