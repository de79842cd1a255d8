//! `roformer serve`: the model as an HTTP service (see the `roformer-serve` crate for the
//! routes, batching, limits and shutdown). Flags become a [`ServeConfig`]; the models are
//! loaded (the RoFormer one always, a GGUF LLaMA with `--gguf`, a vision model with `--vision`
//! or `--vision-model`), the address bound, and
//! `listening on http://HOST:PORT` is the first line on standard output (with `--port 0`, the
//! port picked), so scripts can read it.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use roformer::pipeline::Pooling;
use roformer_serve::{access_log, Backend, LlamaModel, Models, ServeConfig, VisionBackend};

use crate::default_model;
use crate::default_vision_model;
use crate::precision::PrecisionArg;

/// `--pooling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolingArg {
    /// The mean of the last hidden states of the text's tokens (`[CLS]` and `[SEP]` included).
    Mean,
    /// The last hidden state of the `[CLS]` token.
    Cls,
}

/// Arguments of `roformer serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint directory: config.json, model.safetensors (or pytorch_model.bin), vocab.txt
    /// and, if present, tokenizer_config.json. A masked-LM head enables /fill-mask and
    /// /embed_sparse, a sequence-classification head /predict (and /rerank with one label)
    /// [default: the built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// A GGUF LLaMA (e.g. SmolLM2 from scripts/fetch_smollm2.sh) to serve POST /v1/completions
    /// and /v1/chat/completions (ChatML models). The RoFormer routes are served as well, by
    /// --model or, without it, the built-in model
    #[arg(long, value_name = "FILE")]
    gguf: Option<PathBuf>,
    /// Also serve the built-in Fashion-MNIST vision model: POST /image-classification and
    /// POST /embed_image, the image file's bytes as the body
    #[arg(long, conflicts_with = "vision_model")]
    vision: bool,
    /// Also serve this vision model (a DINOv3ViTModel directory, or a classifier from `vision
    /// train`; its preprocessor_config.json if present): POST /embed_image, and
    /// /image-classification for a classifier
    #[arg(long, value_name = "DIR")]
    vision_model: Option<PathBuf>,
    /// Most pixels (width x height) an image may declare; a larger one is answered 413 before
    /// it is decoded. Image bodies are also bounded by --max-body-bytes. With --vision or
    /// --vision-model.
    #[arg(long, default_value_t = ServeConfig::default().max_image_pixels,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_image_pixels: u64,
    /// Most new tokens one completion may ask for, and its default (the model's context also
    /// bounds it). With --gguf.
    #[arg(long, default_value_t = ServeConfig::default().max_tokens as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: u64,
    /// Completions that may be running or waiting at once (running ones are decoded together,
    /// one forward pass a step); one more is answered 429 with Retry-After. With --gguf.
    #[arg(long, default_value_t = ServeConfig::default().max_waiting_generations as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_waiting_generations: u64,
    /// Key/value cache positions the running completions may reserve together (each its
    /// prompt and max_tokens; others wait until theirs fits): bounds the cache's memory, which
    /// /info gives in bytes. With --gguf.
    #[arg(long, default_value_t = ServeConfig::default().max_cached_tokens as u64,
          value_parser = clap::value_parser!(u64).range(2..))]
    max_cached_tokens: u64,
    /// Prompt tokens one decoding step runs at most: a longer prompt is prefilled in chunks of
    /// this size while the other completions go on decoding. With --gguf.
    #[arg(long, default_value_t = ServeConfig::default().max_prefill_tokens as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_prefill_tokens: u64,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0 for every interface).
    #[arg(long, default_value_t = ServeConfig::default().host)]
    host: IpAddr,
    /// Port to listen on; 0 picks a free one (printed on the first line of stdout).
    #[arg(long, default_value_t = ServeConfig::default().port)]
    port: u16,
    /// Most tokens in one forward pass of the batcher (a larger single request runs alone).
    #[arg(long, default_value_t = ServeConfig::default().max_batch_tokens as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_tokens: u64,
    /// Milliseconds the batcher waits for more requests after the first of a batch when none
    /// is queued. 0: a request runs as soon as the model is free, with every request queued
    /// behind it, and arrivals gather while the model is busy (TEI's continuous batching).
    #[arg(long, default_value_t = ServeConfig::default().max_wait.as_millis() as u64)]
    max_wait_ms: u64,
    /// Requests queued or running at once; one more is answered 429 with Retry-After.
    #[arg(long, default_value_t = ServeConfig::default().max_concurrent_requests as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_concurrent_requests: u64,
    /// Most inputs in one request.
    #[arg(long, default_value_t = ServeConfig::default().max_client_batch_size as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_client_batch_size: u64,
    /// Most tokens per input, `[CLS]` and `[SEP]` included; longer inputs are refused (413)
    /// unless the request sets "truncate": true [default: the model's max_position_embeddings]
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
    max_input_length: Option<u64>,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = ServeConfig::default().max_body_bytes as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_body_bytes: u64,
    /// Seconds a request may take, queueing included (504 beyond).
    #[arg(long, default_value_t = ServeConfig::default().request_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_s: u64,
    /// Seconds a SIGTERM or SIGINT waits for admitted requests before exiting.
    #[arg(long, default_value_t = ServeConfig::default().shutdown_timeout.as_secs())]
    shutdown_timeout_s: u64,
    /// Require 'Authorization: Bearer KEY' on every route but /health and the page (GET /,
    /// which asks for the key and sends it on each call).
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Allow this origin (e.g. `https://example.com`) by CORS; no CORS headers without it.
    #[arg(long, value_name = "ORIGIN")]
    cors_origin: Option<String>,
    /// Write the texts of each request in the access log (off: counts only).
    #[arg(long)]
    log_inputs: bool,
    /// Default pooling of /embed and /v1/embeddings.
    #[arg(long, value_enum, default_value = "mean")]
    pooling: PoolingArg,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

impl Args {
    /// The server's settings from the flags.
    fn config(&self) -> ServeConfig {
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        ServeConfig {
            host: self.host,
            port: self.port,
            max_batch_tokens: size(self.max_batch_tokens),
            max_wait: Duration::from_millis(self.max_wait_ms),
            max_concurrent_requests: size(self.max_concurrent_requests),
            max_client_batch_size: size(self.max_client_batch_size),
            max_input_length: self.max_input_length.map(size),
            max_body_bytes: size(self.max_body_bytes),
            request_timeout: Duration::from_secs(self.request_timeout_s),
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout_s),
            api_key: self.api_key.clone(),
            cors_origin: self.cors_origin.clone(),
            log_inputs: self.log_inputs,
            pooling: match self.pooling {
                PoolingArg::Mean => Pooling::Mean,
                PoolingArg::Cls => Pooling::Cls,
            },
            precision: self.precision.resolve(),
            max_tokens: size(self.max_tokens),
            max_waiting_generations: size(self.max_waiting_generations),
            max_cached_tokens: size(self.max_cached_tokens),
            max_prefill_tokens: size(self.max_prefill_tokens),
            max_image_pixels: self.max_image_pixels,
            ..ServeConfig::default()
        }
    }
}

/// Loads the models and serves them until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config();
    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let dir = default_model::model_dir(args.model.as_deref())?;
    let name = default_model::describe(args.model.as_deref());
    let generator = args.gguf.as_deref().map(LlamaModel::load).transpose()?;
    let encoder = Backend::load(name, &dir, tokenizer, config.precision)?;
    let vision = vision_backend(&args)?;
    let models = Models {
        encoder,
        generator,
        vision,
    };
    roformer_serve::run_blocking(config, models, access_log::stderr(), |addr| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    })?;
    Ok(())
}

/// The vision model of `--vision-model DIR`, or the built-in one with `--vision`; none
/// without either.
fn vision_backend(args: &Args) -> anyhow::Result<Option<VisionBackend>> {
    if !args.vision && args.vision_model.is_none() {
        return Ok(None);
    }
    let model = args.vision_model.as_deref();
    let dir = default_vision_model::model_dir(model)?;
    let processor = default_vision_model::processor(model)?;
    let name = default_vision_model::describe(model);
    Ok(Some(VisionBackend::load(name, &dir, processor)?))
}
