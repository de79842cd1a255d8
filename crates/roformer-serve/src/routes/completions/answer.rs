//! The answers of the completion routes in OpenAI's shapes: a whole completion
//! (`text_completion` or `chat.completion`, with `usage`), or server-sent events, one
//! `data: {json}` chunk per piece of text (`text_completion` with `choices[0].text`, or
//! `chat.completion.chunk` with `choices[0].delta.content`), a last chunk with
//! `finish_reason`, then `data: [DONE]`. A failure mid-stream is sent as one
//! `data: {"error", "error_type"}` event that ends the stream (no `[DONE]`); OpenAI's clients
//! raise an error on an event with an `error` field. So is the end of a stream that runs past
//! the request's deadline (`--request-timeout-s`, counted from the request's arrival):
//! `error_type` `Timeout`, and the generation is stopped, which frees the model for the next.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::admission::Permit;
use crate::error::ApiError;
use crate::generate::{Event, Finish};
use crate::timeout::Deadline;

/// Which route answers: the two differ only in the names of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

/// What every answer carries: its id, time, model and prompt size.
#[derive(Debug, Clone)]
pub struct Header {
    /// Which route.
    pub shape: Shape,
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model's name (as asked, or the file's).
    pub model: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
}

impl Header {
    /// A header with a fresh id.
    pub fn new(shape: Shape, model: String, prompt_tokens: usize) -> Header {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = match shape {
            Shape::Completion => "cmpl",
            Shape::Chat => "chatcmpl",
        };
        Header {
            shape,
            id: format!("{prefix}-{created:x}{n:06x}"),
            created,
            model,
            prompt_tokens,
        }
    }

    fn usage(&self, completion_tokens: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    /// The whole answer.
    pub fn complete(&self, text: String, finish: Finish, completion_tokens: usize) -> Value {
        let choice = match self.shape {
            Shape::Completion => json!({
                "index": 0, "text": text, "logprobs": null, "finish_reason": finish.reason(),
            }),
            Shape::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish.reason(),
            }),
        };
        let object = match self.shape {
            Shape::Completion => "text_completion",
            Shape::Chat => "chat.completion",
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice], "usage": self.usage(completion_tokens),
        })
    }

    /// One chunk of a stream: a piece of text, or (with `finish`) the last one.
    fn chunk(&self, text: Option<&str>, finish: Option<Finish>) -> Value {
        let reason = finish.map(Finish::reason);
        let choice = match self.shape {
            Shape::Completion => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": reason,
            }),
            Shape::Chat => {
                let delta = text.map_or(json!({}), |t| json!({"content": t}));
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": reason})
            }
        };
        self.chunk_of(json!([choice]))
    }

    fn chunk_of(&self, choices: Value) -> Value {
        let object = match self.shape {
            Shape::Completion => "text_completion",
            Shape::Chat => "chat.completion.chunk",
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": choices,
        })
    }

    /// The chat stream's first chunk: the assistant's role.
    fn role_chunk(&self) -> Value {
        self.chunk_of(json!([{
            "index": 0, "delta": {"role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null,
        }]))
    }
}

/// Collects a whole completion from the events.
///
/// # Errors
/// The model's failure, or [`ApiError::Backend`] when the events end without an end.
pub async fn collect(
    header: &Header,
    mut events: UnboundedReceiver<Event>,
) -> Result<Value, ApiError> {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text(piece) => text.push_str(&piece),
            Event::Done {
                finish,
                completion_tokens,
            } => return Ok(header.complete(text, finish, completion_tokens)),
            Event::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::Backend(
        "the generation ended without an answer".into(),
    ))
}

/// A stream's state: the events, the chunks ready to send, and whether it has ended.
struct Streaming {
    header: Header,
    events: UnboundedReceiver<Event>,
    ready: VecDeque<String>,
    include_usage: bool,
    deadline: Deadline,
    ended: bool,
    /// The request counts against `--max-concurrent-requests` until its stream ends.
    _admitted: Permit,
}

impl Streaming {
    /// Turns the next event into chunks; marks the end after the last.
    fn take(&mut self, event: Option<Event>) {
        let json = |v: Value| v.to_string();
        match event {
            Some(Event::Text(piece)) => {
                let chunk = self.header.chunk(Some(&piece), None);
                self.ready.push_back(json(chunk));
            }
            Some(Event::Done {
                finish,
                completion_tokens,
            }) => {
                self.ready
                    .push_back(json(self.header.chunk(None, Some(finish))));
                if self.include_usage {
                    let mut last = self.header.chunk_of(json!([]));
                    last["usage"] = self.header.usage(completion_tokens);
                    self.ready.push_back(json(last));
                }
                self.ready.push_back("[DONE]".into());
                self.ended = true;
            }
            Some(Event::Failed(e)) => self.fail(&e),
            None => self.fail(&ApiError::Backend(
                "the generation ended without an answer".into(),
            )),
        }
    }

    /// Ends the stream with an error event.
    fn fail(&mut self, e: &ApiError) {
        let body = json!({"error": e.to_string(), "error_type": e.error_type()});
        self.ready.push_back(body.to_string());
        self.ended = true;
    }

    /// Ends the stream at its deadline: stops the decoding (closing the channel, which the
    /// decoding thread checks before each token) and sends the timeout as the last event.
    fn time_out(&mut self) {
        self.events.close();
        self.fail(&self.deadline.error());
    }
}

/// The events as server-sent events, holding the request's admission until the end, and
/// ending at `deadline` if the generation has not. Dropping the stream (the client went away)
/// drops the receiver, which stops the decoding.
pub fn stream(
    header: Header,
    events: UnboundedReceiver<Event>,
    include_usage: bool,
    deadline: Deadline,
    admitted: Permit,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut ready = VecDeque::new();
    if header.shape == Shape::Chat {
        ready.push_back(header.role_chunk().to_string());
    }
    let state = Streaming {
        header,
        events,
        ready,
        include_usage,
        deadline,
        ended: false,
        _admitted: admitted,
    };
    Sse::new(stream::unfold(state, |mut state| async move {
        loop {
            if let Some(data) = state.ready.pop_front() {
                return Some((Ok(SseEvent::default().data(data)), state));
            }
            if state.ended {
                return None;
            }
            match tokio::time::timeout_at(state.deadline.at, state.events.recv()).await {
                Ok(event) => state.take(event),
                Err(_) => state.time_out(),
            }
        }
    }))
}
