//! `roformer bench serve`: a bounded loopback load generator for `roformer serve` (and, with
//! `--target peer`, for the FastAPI peer `scripts/serve_peer_fastapi.py`, with the same request
//! shapes; with `--target llama-cpp`, for llama-cpp-python's server on `/v1/completions`).
//!
//! Per route (`/embed`, `/fill-mask`, `/similarity` when asked, and `/v1/completions` with
//! `--gguf`; `--lines N` texts per `/embed` request) and per concurrency
//! level (default 1, 8, 64): `--warmup` untimed requests, then N client threads each send one
//! request at a time (HTTP/1.1 keep-alive) until `--requests` requests have been sent or
//! `--seconds` have passed. Every run is bounded: a count of at most 1,000,000 or a duration of
//! at most an hour, and a client timeout per request. Reported: successful requests per second
//! of wall time, p50/p95/p99 latency of the successful requests (nearest rank), the failures by
//! status, and for completions the generated tokens per second of wall time, with the prompt and
//! completion tokens the servers reported and how many answers fell short of `--max-tokens`.
//!
//! Completions are greedy and of a fixed length on both servers, so that tokens/s compares the
//! same work: ours is asked `"ignore_eos": true`, llama-cpp-python `"min_tokens": max_tokens`
//! (its way to hold back the end token) and `"repeat_penalty": 1.0` (its default is 1.1, which
//! would change the greedy choice).
//!
//! Without `--url` the benchmark starts `roformer serve` of this binary on 127.0.0.1, port 0,
//! with `--model`/`--gguf` when given (the built-in model otherwise), and stops it at the end.
//! Client and server share the machine's cores: loopback figures include the client's cost.

mod load;
mod report;
mod requests;
mod spawn;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use reqwest::blocking::Client;

use load::Stop;
use report::{Bound, Record, Report};
use requests::{Route, RouteLoad};

use crate::output::OutputArgs;

/// Most requests per route and level.
const MAX_REQUESTS: u64 = 1_000_000;
/// Longest run per route and level, seconds.
const MAX_SECONDS: f64 = 3600.0;

/// Whose server is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// `roformer serve`.
    Ours,
    /// The FastAPI + transformers peer (`scripts/serve_peer_fastapi.py`): /embed and /fill-mask.
    Peer,
    /// llama-cpp-python's server (`python -m llama_cpp.server`): /v1/completions.
    LlamaCpp,
}

impl Target {
    /// The name the report gives it.
    fn name(self) -> &'static str {
        match self {
            Target::Ours => "roformer serve",
            Target::Peer => "FastAPI peer",
            Target::LlamaCpp => "llama-cpp-python server",
        }
    }

    /// The route that answers 200 once the server is ready (llama-cpp-python's has no
    /// `/health`).
    fn ready_path(self) -> &'static str {
        match self {
            Target::Ours | Target::Peer => "/health",
            Target::LlamaCpp => "/v1/models",
        }
    }

    /// Whether it serves `route`.
    fn serves(self, route: Route) -> bool {
        match self {
            Target::Ours => true,
            Target::Peer => matches!(route, Route::Embed | Route::FillMask),
            Target::LlamaCpp => route == Route::Completions,
        }
    }
}

/// Arguments of `roformer bench serve`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "Print one JSON object: {\"target\", \"url\", \"cpu\", \"cores\", \"bound\", \
     \"records\": [{\"route\", \"concurrency\", \"requests\", \"ok\", \"errors\": {status: \
     count}, \"seconds\", \"req_s\", \"p50_ms\", \"p95_ms\", \"p99_ms\", and for \
     completions \"tokens_s\", \"prompt_tokens\", \"completion_tokens\", \
     \"short_answers\"}]}"
)))]
pub struct Args {
    /// A running server (`http://HOST:PORT`) [default: start `roformer serve` on port 0]
    #[arg(long)]
    url: Option<String>,
    /// Whose server `--url` is.
    #[arg(long, value_enum, default_value_t = Target::Ours, requires = "url")]
    target: Target,
    /// Checkpoint directory for the server this benchmark starts [default: the built-in model]
    #[arg(long, conflicts_with = "url")]
    model: Option<PathBuf>,
    /// GGUF file for the server this benchmark starts; adds /v1/completions to the routes.
    #[arg(long, conflicts_with = "url")]
    gguf: Option<PathBuf>,
    /// Routes to measure, comma-separated [default: embed,fill-mask, plus completions with
    /// --gguf; completions for --target llama-cpp]
    #[arg(long, value_enum, value_delimiter = ',')]
    routes: Vec<Route>,
    /// Concurrent clients, comma-separated levels (each 1 to 1024).
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 8, 64],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    concurrency: Vec<u32>,
    /// Requests per route and level (1 to 1,000,000) [default: 256 when --seconds is not given]
    #[arg(long, conflicts_with = "seconds",
          value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    requests: Option<u64>,
    /// Seconds per route and level instead of a count (above 0, at most 3600).
    #[arg(long)]
    seconds: Option<f64>,
    /// Untimed requests per route before its first level.
    #[arg(long, default_value_t = 8)]
    warmup: u64,
    /// Texts per /embed request (1 to 32), and sentences per /similarity request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=32))]
    lines: u32,
    /// Completion length of the /v1/completions requests: every answer is asked for exactly
    /// this many tokens (greedy, the end token held back).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_tokens: u32,
    /// Bearer key sent with every request (a server started with --api-key).
    #[arg(long)]
    api_key: Option<String>,
    /// Client timeout per request, seconds (above 0, at most 600); a timed-out request counts
    /// as a failure with status 0.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
}

impl Args {
    /// The bound of each run, validated.
    fn bound(&self) -> Result<Bound> {
        match (self.requests, self.seconds) {
            (_, Some(s)) if s.is_nan() || s <= 0.0 || s > MAX_SECONDS => {
                bail!("--seconds {s}: expected a duration above 0 and at most {MAX_SECONDS} (runs are bounded)")
            }
            (_, Some(s)) => Ok(Bound::Seconds(s)),
            (Some(n), None) => Ok(Bound::Requests(n)),
            (None, None) => Ok(Bound::Requests(256)),
        }
    }

    /// The routes to measure, validated against the target.
    fn routes(&self) -> Result<Vec<Route>> {
        let mut routes = self.routes.clone();
        if routes.is_empty() {
            routes = match self.target {
                Target::LlamaCpp => vec![Route::Completions],
                _ if self.gguf.is_some() => vec![Route::Embed, Route::FillMask, Route::Completions],
                _ => vec![Route::Embed, Route::FillMask],
            };
        }
        routes.dedup();
        if let Some(&route) = routes.iter().find(|&&r| !self.target.serves(r)) {
            let served = match self.target {
                Target::LlamaCpp => "completions",
                Target::Peer => "embed and fill-mask",
                Target::Ours => "every route",
            };
            let name = route
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_owned());
            bail!(
                "--routes {name}: the {} serves only {served}",
                self.target.name()
            );
        }
        if routes.contains(&Route::Completions) && self.url.is_none() && self.gguf.is_none() {
            bail!(
                "--routes completions needs --gguf FILE (or --url of a server started with --gguf)"
            );
        }
        Ok(routes)
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    let bound = args.bound()?;
    let routes = args.routes()?;
    if args.timeout.is_nan() || args.timeout <= 0.0 || args.timeout > 600.0 {
        bail!(
            "--timeout {}: expected seconds above 0 and at most 600",
            args.timeout
        );
    }
    let most = args.concurrency.iter().copied().max().unwrap_or(1);
    let client = Client::builder()
        .timeout(Duration::from_secs_f64(args.timeout))
        .pool_max_idle_per_host(most as usize)
        .build()
        .context("building the HTTP client")?;
    let (url, own) = match &args.url {
        Some(url) => (url.trim_end_matches('/').to_owned(), None),
        None => {
            let server = spawn::start(args.model.as_deref(), args.gguf.as_deref(), &client)?;
            (server.url.clone(), Some(server))
        }
    };
    spawn::wait_ready(&client, &url, args.target.ready_path())
        .with_context(|| format!("--url {url}"))?;
    let key = args.api_key.as_deref();
    let mut records = Vec::new();
    for route in routes {
        let work = RouteLoad::new(
            &url,
            route,
            args.target,
            args.max_tokens,
            args.lines as usize,
        );
        if args.warmup > 0 {
            load::run(&client, &work, 1, Stop::Requests(args.warmup), key);
        }
        for &concurrency in &args.concurrency {
            let stop = match bound {
                Bound::Requests(n) => Stop::Requests(n),
                Bound::Seconds(s) => Stop::Until(Instant::now() + Duration::from_secs_f64(s)),
            };
            let summary = load::run(&client, &work, concurrency, stop, key);
            eprintln!("{}", report::progress_line(route, &summary));
            records.push(Record { route, summary });
        }
    }
    let report = Report::new(args.target.name(), &url, bound, records);
    drop(own);
    report.print(args.stdout.json)
}
