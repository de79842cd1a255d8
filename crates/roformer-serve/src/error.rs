//! Errors: [`ServeError`] for starting the server, [`ApiError`] for one request, answered as
//! JSON `{"error": "...", "error_type": "..."}` with its HTTP status (the `error_type` names
//! are TEI's, plus `Unauthorized`, `PayloadTooLarge`, `Timeout` and `NotFound`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A flag with a value the server cannot use.
    #[error("{flag} {value:?}: expected {accepted}")]
    Config {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What would be accepted.
        accepted: String,
    },
    /// The model could not be loaded.
    #[error("loading the model {model}")]
    Model {
        /// The model's name (directory or built-in).
        model: String,
        /// The cause.
        source: roformer::ModelError,
    },
    /// The tokenizer has no token the server needs.
    #[error("the tokenizer of {model}")]
    Tokenizer {
        /// The model's name.
        model: String,
        /// The cause.
        source: roformer::TokenizerError,
    },
    /// The vision model of `--vision` or `--vision-model` could not be loaded.
    #[error("loading the vision model {model}")]
    VisionModel {
        /// The model's name (directory or built-in).
        model: String,
        /// The cause.
        source: roformer::vision::VisionError,
    },
    /// The GGUF file of `--gguf` could not be read or built into a model.
    #[error("loading the LLaMA of --gguf {path}")]
    Gguf {
        /// The file.
        path: String,
        /// The cause.
        source: llama::LlamaError,
    },
    /// The address could not be bound or served.
    #[error("cannot listen on {addr}")]
    Io {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Why one request failed; answered by [`IntoResponse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body is not JSON, or not the request's shape (400).
    #[error("{0}")]
    Malformed(String),
    /// A request that parses but cannot be served as asked (422).
    #[error("{0}")]
    Validation(String),
    /// No input at all, or an empty text (422).
    #[error("{0}")]
    Empty(String),
    /// An input longer than `--max-input-length` without `truncate` (413).
    #[error(
        "input {index} has {tokens} tokens ([CLS] and [SEP] included), more than the limit of \
         {limit} (--max-input-length): send \"truncate\": true to cut it, or a shorter text"
    )]
    InputTooLong {
        /// The input's index in the request.
        index: usize,
        /// Its tokens.
        tokens: usize,
        /// The limit.
        limit: usize,
    },
    /// A prompt that leaves no room in the model's context for one new token (413).
    #[error(
        "the prompt has {tokens} tokens; the model's context holds {context} tokens, prompt and \
         completion together: send a shorter prompt"
    )]
    PromptTooLong {
        /// The prompt's tokens.
        tokens: usize,
        /// The model's context.
        context: usize,
    },
    /// A body larger than `--max-body-bytes` (413).
    #[error("the request body is larger than {limit} bytes (--max-body-bytes)")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// An input too large to decode or to run: an image over the pixel or patch limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// A body of a media type the route does not take (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A missing or wrong bearer token (401).
    #[error("missing or wrong API key: send the header 'Authorization: Bearer KEY'")]
    Unauthorized,
    /// No such route, or a route this model cannot serve (404).
    #[error("{0}")]
    NotFound(String),
    /// A known route asked with a method it does not take (405).
    #[error("{method} is not a method of this route")]
    MethodNotAllowed {
        /// The method asked.
        method: String,
    },
    /// Too many requests admitted (429, with `Retry-After`).
    #[error(
        "the server is at its limit of {limit} concurrent requests (--max-concurrent-requests): \
         retry later"
    )]
    Overloaded {
        /// The limit.
        limit: usize,
    },
    /// As many completions as allowed are running or waiting (429, with `Retry-After`).
    #[error(
        "{limit} completions are running or waiting, the most allowed \
         (--max-waiting-generations): retry later"
    )]
    GenerationQueueFull {
        /// Completions allowed to run or wait.
        limit: usize,
    },
    /// The server is shutting down (503).
    #[error("the server is shutting down")]
    Unhealthy,
    /// The request took longer than `--request-timeout-s` (504).
    #[error("the request took longer than {millis} ms (--request-timeout-s)")]
    Timeout {
        /// The limit, in milliseconds.
        millis: u128,
    },
    /// The model failed on the request (500).
    #[error("{0}")]
    Backend(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Malformed(_) => StatusCode::BAD_REQUEST,
            ApiError::Validation(_) | ApiError::Empty(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::InputTooLong { .. }
            | ApiError::PromptTooLong { .. }
            | ApiError::BodyTooLarge { .. }
            | ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Overloaded { .. } | ApiError::GenerationQueueFull { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Unhealthy => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Backend(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error_type` of the body.
    pub fn error_type(&self) -> &'static str {
        match self {
            ApiError::Malformed(_)
            | ApiError::Validation(_)
            | ApiError::InputTooLong { .. }
            | ApiError::PromptTooLong { .. }
            | ApiError::MethodNotAllowed { .. }
            | ApiError::UnsupportedMediaType(_) => "Validation",
            ApiError::Empty(_) => "Empty",
            ApiError::BodyTooLarge { .. } | ApiError::TooLarge(_) => "PayloadTooLarge",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::NotFound(_) => "NotFound",
            ApiError::Overloaded { .. } | ApiError::GenerationQueueFull { .. } => "Overloaded",
            ApiError::Unhealthy => "Unhealthy",
            ApiError::Timeout { .. } => "Timeout",
            ApiError::Backend(_) => "Backend",
        }
    }
}

/// The JSON body of an error.
#[derive(Debug, Serialize)]
struct ErrorBody {
    error: String,
    error_type: &'static str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.to_string(),
            error_type: self.error_type(),
        };
        let mut response = (self.status(), Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Overloaded { .. } | ApiError::GenerationQueueFull { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
