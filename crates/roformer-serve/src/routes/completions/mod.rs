//! `POST /v1/completions` and `POST /v1/chat/completions` (OpenAI), served with `--gguf`:
//! the body is checked and tokenized here, queued on the [`Generator`] (429 when its queue is
//! full), and answered whole or, with `"stream": true`, as server-sent events.
//!
//! A client that goes away stops its generation: the handler's future (whole answers) or the
//! event stream (streams) owns the receiving end of the generator's channel, and the decoding
//! thread checks it before each new token.

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
use answer::{Header, Shape};
use request::{ChatRequest, CompletionRequest, Options};

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let prompt = req.prompt_text()?.to_owned();
    complete(&state, Shape::Completion, prompt, req.model, &req.options).await
}

/// `POST /v1/chat/completions` (ChatML models only).
pub async fn chat_completions(
    State(state): State<AppState>,
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
    let prompt = req.prompt_text()?;
    complete(&state, Shape::Chat, prompt, req.model, &req.options).await
}

/// The generator, or 404 without `--gguf`.
fn generator(state: &AppState) -> Result<&Generator, ApiError> {
    state.generator.as_ref().ok_or_else(|| {
        ApiError::NotFound("no generation model: start the server with --gguf FILE".into())
    })
}

/// Tokenizes `prompt`, checks the options, admits and queues the job, and answers.
async fn complete(
    state: &AppState,
    shape: Shape,
    prompt: String,
    model_name: Option<String>,
    options: &Options,
) -> Result<Response, ApiError> {
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
    let events = generator.start(job).await?;
    if options.stream {
        let include_usage = options.stream_options.is_some_and(|o| o.include_usage);
        let sse = answer::stream(header, events, include_usage, permit);
        Ok((Extension(usage), sse).into_response())
    } else {
        let body = answer::collect(&header, events).await?;
        drop(permit);
        Ok((Extension(usage), Json(body)).into_response())
    }
}
