//! `POST /v1/completions` and `POST /v1/chat/completions` (OpenAI), served with `--gguf`:
//! the body is checked and tokenized here, handed to the [`Generator`] (429 when
//! `--max-waiting-generations` completions are running or waiting), decoded together with the
//! other running completions, and answered whole or, with `"stream": true`, as server-sent
//! events.
//!
//! A client that goes away stops its generation: the handler's future (whole answers) or the
//! event stream (streams) owns the receiving end of the generator's channel, and the scheduler
//! checks it before each step and each new token. So does a request that runs past
//! `--request-timeout-s`: a whole answer is dropped by the timeout middleware with the handler,
//! a stream ends itself at the request's deadline (`timeout.rs`).

pub mod answer;
pub mod request;

use std::hash::{BuildHasher, RandomState};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use crate::access_log::Usage;
use crate::error::ApiError;
use crate::generate::Generator;
use crate::request::JsonBody;
use crate::state::AppState;
use crate::timeout::Deadline;
use answer::{Header, Shape};
use request::{ChatRequest, CompletionRequest, Options};

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<AppState>,
    Extension(deadline): Extension<Deadline>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let prompt = req.prompt_text()?.to_owned();
    let asked = Asked {
        shape: Shape::Completion,
        prompt,
        model_name: req.model,
        deadline,
    };
    complete(&state, asked, &req.options).await
}

/// `POST /v1/chat/completions` (ChatML models only).
pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(deadline): Extension<Deadline>,
    JsonBody(req): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    let generator = generator(&state)?;
    if !generator.model().has_chat() {
        return Err(ApiError::Validation(
            "the model's chat template is not ChatML (no <|im_start|>, or <|im_end|> is not \
             one token): use /v1/completions"
                .into(),
        ));
    }
    let asked = Asked {
        shape: Shape::Chat,
        prompt: req.prompt_text()?,
        model_name: req.model,
        deadline,
    };
    complete(&state, asked, &req.options).await
}

/// What a request asks for, beside its options.
struct Asked {
    /// Which route.
    shape: Shape,
    /// The text to continue (a chat already in ChatML).
    prompt: String,
    /// The `model` field, echoed.
    model_name: Option<String>,
    /// When the answer, streamed or whole, must have ended.
    deadline: Deadline,
}

/// The generator, or 404 without `--gguf`.
fn generator(state: &AppState) -> Result<&Generator, ApiError> {
    state.generator.as_ref().ok_or_else(|| {
        ApiError::NotFound("no generation model: start the server with --gguf FILE".into())
    })
}

/// Tokenizes the prompt, checks the options, admits and queues the job, and answers.
async fn complete(state: &AppState, asked: Asked, options: &Options) -> Result<Response, ApiError> {
    let Asked {
        shape,
        prompt,
        model_name,
        deadline,
    } = asked;
    let generator = generator(state)?;
    let model = generator.model();
    let ids = model.encode(&prompt)?;
    let job = options.job(
        model,
        ids,
        shape == Shape::Chat,
        state.config.max_tokens,
        RandomState::new().hash_one(&prompt),
    )?;
    let usage = Usage {
        inputs: 1,
        tokens: job.prompt.len(),
        texts: if state.config.log_inputs {
            vec![prompt]
        } else {
            Vec::new()
        },
    };
    let header = Header::new(
        shape,
        model_name.unwrap_or_else(|| model.model_id.clone()),
        job.prompt.len(),
    );
    let permit = state.admission.admit()?;
    let events = generator.start(job)?;
    if options.stream {
        let include_usage = options.stream_options.is_some_and(|o| o.include_usage);
        let sse = answer::stream(header, events, include_usage, deadline, permit);
        Ok((Extension(usage), sse).into_response())
    } else {
        let body = answer::collect(&header, events).await?;
        drop(permit);
        Ok((Extension(usage), Json(body)).into_response())
    }
}
