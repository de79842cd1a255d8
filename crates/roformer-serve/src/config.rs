//! The server's settings: every flag of `roformer serve`, with its default.

use std::net::IpAddr;
use std::time::Duration;

use roformer::pipeline::Pooling;
use roformer::Precision;

use crate::error::ServeError;

/// The longest `--request-timeout-s` accepted: a week (a deadline must stay on the clock).
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Everything the server is told at start. [`ServeConfig::default`] gives every flag's
/// default; `max_input_length` `None` means the model's `max_position_embeddings`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind (`--host`, default 127.0.0.1: only this machine).
    pub host: IpAddr,
    /// Port to bind (`--port`, default 3000; 0 picks a free one).
    pub port: u16,
    /// Most tokens the batcher puts in one forward pass (`--max-batch-tokens`, default 16384);
    /// a single request larger than this runs alone.
    pub max_batch_tokens: usize,
    /// How long the batcher waits for more requests after the first of a batch when none is
    /// queued (`--max-wait-ms`, default 0: a request runs at once with whatever is already
    /// queued, and arrivals gather while the model is busy).
    pub max_wait: Duration,
    /// Requests admitted at once, queued or running (`--max-concurrent-requests`, default
    /// 512); beyond it a request is answered 429 at once.
    pub max_concurrent_requests: usize,
    /// Most inputs in one request (`--max-client-batch-size`, default 32).
    pub max_client_batch_size: usize,
    /// Most tokens per input, `[CLS]` and `[SEP]` included (`--max-input-length`, default the
    /// model's `max_position_embeddings`).
    pub max_input_length: Option<usize>,
    /// Largest request body (`--max-body-bytes`, default 2 MB).
    pub max_body_bytes: usize,
    /// Per-request time limit, from arrival to the end of the answer, queueing and a whole
    /// stream included (`--request-timeout-s`, default 30 s, at most
    /// [`MAX_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// How long shutdown waits for admitted requests (`--shutdown-timeout-s`, default 30 s).
    pub shutdown_timeout: Duration,
    /// Bearer token every route but `/health` and the page requires (`--api-key`; none by
    /// default).
    pub api_key: Option<String>,
    /// The one origin CORS allows (`--cors-origin`; no CORS headers by default).
    pub cors_origin: Option<String>,
    /// Whether access logs include the texts (`--log-inputs`; off by default).
    pub log_inputs: bool,
    /// Default pooling of `/embed` and `/v1/embeddings` (`--pooling`, default mean).
    pub pooling: Pooling,
    /// Precision of the encoder's products (`--precision`, default f32).
    pub precision: Precision,
    /// Most new tokens one completion may ask for, and the default of `max_tokens`
    /// (`--max-tokens`, default 512; the model's context bounds it too). `--gguf` only.
    pub max_tokens: usize,
    /// Completions that may be running or waiting at once (`--max-waiting-generations`,
    /// default 8); beyond it a completion is answered 429 at once. `--gguf` only.
    pub max_waiting_generations: usize,
    /// Cache positions the running completions may reserve together (`--max-cached-tokens`,
    /// default 8192): each reserves its prompt and `max_tokens`, and waits until that fits.
    /// Bounds the key/value cache's memory (`/info` says it in bytes). `--gguf` only.
    pub max_cached_tokens: usize,
    /// Prompt tokens one decoding step runs at most (`--max-prefill-tokens`, default 256):
    /// longer prompts are prefilled in chunks of this size while the others decode. `--gguf`
    /// only.
    pub max_prefill_tokens: usize,
    /// Most pixels (`width * height`) an image's header may declare (`--max-image-pixels`,
    /// default 4096 x 4096); a larger image is answered 413 before it is decoded.
    /// `--vision` / `--vision-model` only.
    pub max_image_pixels: u64,
    /// A pause after each generated token: zero (no flag). Tests set it to hold a generation
    /// open long enough to disconnect from it or to fill the queue behind it.
    pub generation_pause: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 3000,
            max_batch_tokens: 16384,
            max_wait: Duration::ZERO,
            max_concurrent_requests: 512,
            max_client_batch_size: 32,
            max_input_length: None,
            max_body_bytes: 2_000_000,
            request_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            api_key: None,
            cors_origin: None,
            log_inputs: false,
            pooling: Pooling::Mean,
            precision: Precision::F32,
            max_tokens: 512,
            max_waiting_generations: 8,
            max_cached_tokens: 8192,
            max_prefill_tokens: 256,
            max_image_pixels: 4096 * 4096,
            generation_pause: Duration::ZERO,
        }
    }
}

impl ServeConfig {
    /// Checks the limits: every count at least 1, `max_input_length` at least 2 (`[CLS]` and
    /// `[SEP]`), a request timeout of more than zero and at most a week, an API key that is not empty, a CORS origin that is a valid header value.
    ///
    /// # Errors
    /// [`ServeError::Config`] naming the flag, the value and what is accepted.
    pub fn validate(&self) -> Result<(), ServeError> {
        let at_least = |flag: &'static str, value: usize, min: usize| {
            if value < min {
                Err(ServeError::Config {
                    flag,
                    value: value.to_string(),
                    accepted: format!("an integer of at least {min}"),
                })
            } else {
                Ok(())
            }
        };
        at_least("--max-batch-tokens", self.max_batch_tokens, 1)?;
        at_least("--max-concurrent-requests", self.max_concurrent_requests, 1)?;
        at_least("--max-client-batch-size", self.max_client_batch_size, 1)?;
        at_least("--max-body-bytes", self.max_body_bytes, 1)?;
        at_least("--max-tokens", self.max_tokens, 1)?;
        at_least("--max-waiting-generations", self.max_waiting_generations, 1)?;
        at_least("--max-cached-tokens", self.max_cached_tokens, 2)?;
        at_least("--max-prefill-tokens", self.max_prefill_tokens, 1)?;
        if self.max_image_pixels == 0 {
            return Err(ServeError::Config {
                flag: "--max-image-pixels",
                value: "0".into(),
                accepted: "an integer of at least 1".into(),
            });
        }
        if let Some(n) = self.max_input_length {
            at_least("--max-input-length", n, 2)?;
        }
        if self.request_timeout.is_zero() || self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(ServeError::Config {
                flag: "--request-timeout-s",
                value: self.request_timeout.as_secs_f64().to_string(),
                accepted: format!(
                    "more than 0 and at most {} seconds (a week)",
                    MAX_REQUEST_TIMEOUT.as_secs()
                ),
            });
        }
        if self.api_key.as_deref().is_some_and(str::is_empty) {
            return Err(ServeError::Config {
                flag: "--api-key",
                value: String::new(),
                accepted: "a non-empty token".into(),
            });
        }
        if let Some(origin) = &self.cors_origin {
            if axum::http::HeaderValue::from_str(origin).is_err() {
                return Err(ServeError::Config {
                    flag: "--cors-origin",
                    value: origin.clone(),
                    accepted: "an origin such as https://example.com (visible ASCII)".into(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_timeout_is_more_than_zero_and_at_most_a_week() {
        let with = |request_timeout| ServeConfig {
            request_timeout,
            ..ServeConfig::default()
        };
        assert!(with(Duration::from_millis(1)).validate().is_ok());
        assert!(with(MAX_REQUEST_TIMEOUT).validate().is_ok());
        for bad in [Duration::ZERO, MAX_REQUEST_TIMEOUT + Duration::from_secs(1)] {
            let e = with(bad).validate().unwrap_err().to_string();
            assert!(e.contains("--request-timeout-s"), "{e}");
        }
    }
}
