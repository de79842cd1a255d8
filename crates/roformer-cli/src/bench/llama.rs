//! `roformer bench llama`: prefill and decode tokens/s of the LLaMA decoder on a GGUF file
//! (SmolLM2-135M by default), and the share of a step that RoPE takes.
//!
//! The same measurement as the peer script `scripts/bench_llama_peers.py` (transformers on
//! PyTorch, llama.cpp through llama-cpp-python), so the figures can be set beside it:
//! - prefill: one forward pass over `--prompt-tokens` tokens from an empty cache;
//! - decode: `--new-tokens` greedy steps after it, one token each at the cache's offset,
//!   tokens/s = steps / time (the prefill excluded).
//!
//! One untimed warm-up, then `--repeats` timed runs; figures are medians.
//!
//! RoPE share: the rotations of one step (q and k of every layer, at that step's positions) are
//! timed on their own, with tensors of the step's shapes, and divided by the step's time.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use candle_core::{Device, Tensor};
use llama::{Llama, Logits};
use rotary::apply::Order;
use rotary::{apply_rope, Positions};
use serde_json::json;

use crate::json;
use crate::llama::ModelArgs;
use crate::output::OutputArgs;

use super::timing::median;
use crate::output::outln;

/// Arguments of `roformer bench llama`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help("Print one JSON object instead of a table")))]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt length of the prefill.
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Decode steps after the prefill.
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    /// Timed runs (after one warm-up); the figures are medians.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
}

/// The most memory the timings of `--repeats` runs may take (about 1.4 million runs).
const MAX_TIMING_BYTES: usize = 64 << 20;

/// Bytes of timings kept per repeat at the peak: the run's record, and one phase's times
/// collected and copied for its median.
const TIMING_BYTES_PER_REPEAT: usize = std::mem::size_of::<Run>() + 2 * std::mem::size_of::<f64>();

/// The times of one run.
struct Run {
    prefill: Duration,
    decode: Duration,
}

/// The medians of a benchmark's repeats, seconds.
struct Medians {
    prefill: f64,
    decode: f64,
    prefill_rope: f64,
    decode_rope: f64,
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    if args.prompt_tokens == 0 || args.new_tokens == 0 || args.repeats == 0 {
        bail!("--prompt-tokens, --new-tokens and --repeats must be at least 1");
    }
    check_repeats(args.repeats)?;
    let (_, model) = args.model.open()?;
    let context = model.config().context_length;
    if args.prompt_tokens.saturating_add(args.new_tokens) > context {
        bail!("--prompt-tokens + --new-tokens exceed the model's context of {context}");
    }
    let runs = time_runs(&model, &args)?;
    let medians = medians(&model, &runs, &args)?;
    if args.stdout.json {
        outln!(
            "{}",
            json::to_string_pretty(&report_json(&args, &medians)?)?
        )?;
    } else {
        print_report(&args, &medians)?;
    }
    Ok(())
}

/// `--repeats` timed runs after one untimed, each said on stderr.
fn time_runs(model: &Llama, args: &Args) -> Result<Vec<Run>> {
    let prompt = prompt_ids(model.config().vocab_size, args.prompt_tokens);
    let mut runs = Vec::with_capacity(args.repeats);
    for i in 0..=args.repeats {
        let run = time_run(model, &prompt, args.new_tokens)?;
        if i > 0 {
            eprintln!(
                "run {i}/{}: prefill {:.3} s, decode {:.3} s",
                args.repeats,
                run.prefill.as_secs_f64(),
                run.decode.as_secs_f64()
            );
            runs.push(run);
        }
    }
    Ok(runs)
}

/// The medians of the runs' phases, and of the rotation's time in each phase (measured
/// `--repeats` times on its own).
fn medians(model: &Llama, runs: &[Run], args: &Args) -> Result<Medians> {
    let of = |phase: fn(&Run) -> Duration| {
        median(
            &runs
                .iter()
                .map(|r| phase(r).as_secs_f64())
                .collect::<Vec<_>>(),
        )
    };
    let prefill_rope = (0..args.repeats)
        .map(|_| rope_time(model, args.prompt_tokens, 0))
        .collect::<Result<Vec<_>>>()?;
    let decode_rope = (0..args.repeats)
        .map(|_| decode_rope_time(model, args.prompt_tokens, args.new_tokens))
        .collect::<Result<Vec<_>>>()?;
    Ok(Medians {
        prefill: of(|r| r.prefill),
        decode: of(|r| r.decode),
        prefill_rope: median(&prefill_rope),
        decode_rope: median(&decode_rope),
    })
}

/// How the weights were used.
fn weights_kind(args: &Args) -> &'static str {
    if args.model.dequantize {
        "f32 (dequantized)"
    } else {
        "as stored (quantized)"
    }
}

/// The `--json` report.
///
/// # Errors
/// A rate that is not finite.
fn report_json(args: &Args, m: &Medians) -> Result<serde_json::Value> {
    let prefill_tps = args.prompt_tokens as f64 / m.prefill;
    let decode_tps = args.new_tokens as f64 / m.decode;
    Ok(json!({
        "gguf": args.model.gguf.display().to_string(),
        "weights": weights_kind(args),
        "layout": format!("{:?}", args.model.layout).to_lowercase(),
        "threads": rayon::current_num_threads(),
        "prefill_tokens": args.prompt_tokens,
        "decode_tokens": args.new_tokens,
        "prefill_tok_s": json::finite("prefill_tok_s", prefill_tps)?,
        "decode_tok_s": json::finite("decode_tok_s", decode_tps)?,
        "rope_share_prefill": json::finite("rope_share_prefill", m.prefill_rope / m.prefill)?,
        "rope_share_decode": json::finite("rope_share_decode", m.decode_rope / m.decode)?,
    }))
}

/// The report as a table.
fn print_report(args: &Args, m: &Medians) -> std::io::Result<()> {
    outln!(
        "{} ({}, {} threads)",
        args.model.gguf.display(),
        weights_kind(args),
        rayon::current_num_threads()
    )?;
    outln!("phase    tokens  tokens/s  RoPE share")?;
    outln!(
        "prefill  {:>6}  {:>8.1}  {:>9.2}%",
        args.prompt_tokens,
        args.prompt_tokens as f64 / m.prefill,
        100.0 * m.prefill_rope / m.prefill
    )?;
    outln!(
        "decode   {:>6}  {:>8.1}  {:>9.2}%",
        args.new_tokens,
        args.new_tokens as f64 / m.decode,
        100.0 * m.decode_rope / m.decode
    )
}

/// Refuses a `--repeats` whose timings alone would take more than [`MAX_TIMING_BYTES`], before
/// anything is allocated, saying how much it would need.
fn check_repeats(repeats: usize) -> Result<()> {
    let needed = repeats as u128 * TIMING_BYTES_PER_REPEAT as u128;
    if needed > MAX_TIMING_BYTES as u128 {
        bail!(
            "--repeats {repeats} would need {needed} bytes ({:.1} GiB) to hold its timings \
             ({TIMING_BYTES_PER_REPEAT} bytes a run); at most {} repeats ({} MiB) are allowed",
            needed as f64 / (1u64 << 30) as f64,
            MAX_TIMING_BYTES / TIMING_BYTES_PER_REPEAT,
            MAX_TIMING_BYTES >> 20
        );
    }
    Ok(())
}

/// A fixed prompt: ids cycling through a stretch of ordinary vocabulary.
fn prompt_ids(vocab: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (1000 + 37 * i) as u32 % vocab as u32)
        .collect()
}

/// One prefill and `new_tokens` greedy decode steps from an empty cache.
fn time_run(model: &Llama, prompt: &[u32], new_tokens: usize) -> Result<Run> {
    let mut cache = model.cache(1, prompt.len() + new_tokens);
    let ids = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    let start = Instant::now();
    let logits = model.forward(&ids, &mut cache, Logits::Last)?;
    let mut token = llama::generate::argmax(&logits.squeeze(0)?.to_vec1::<f32>()?);
    let prefill = start.elapsed();
    let start = Instant::now();
    for _ in 0..new_tokens {
        let ids = Tensor::new(&[token], model.device())?.unsqueeze(0)?;
        let logits = model.forward(&ids, &mut cache, Logits::Last)?;
        token = llama::generate::argmax(&logits.squeeze(0)?.to_vec1::<f32>()?);
    }
    Ok(Run {
        prefill,
        decode: start.elapsed(),
    })
}

/// Seconds the rotations of one forward pass of `t` tokens at `offset` take: q and k of every
/// layer, in the token-major layout the model rotates them in.
fn rope_time(model: &Llama, t: usize, offset: usize) -> Result<f64> {
    let c = model.config();
    let q = Tensor::ones(
        (1, t, c.heads, c.head_dim),
        candle_core::DType::F32,
        &Device::Cpu,
    )?;
    let k = Tensor::ones(
        (1, t, c.kv_heads, c.head_dim),
        candle_core::DType::F32,
        &Device::Cpu,
    )?;
    let at = Positions::Range { offset };
    let start = Instant::now();
    for _ in 0..c.layers {
        apply_rope(&q, model.rope(), at, Order::TokenMajor)?;
        apply_rope(&k, model.rope(), at, Order::TokenMajor)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Seconds the rotations of `steps` decode steps after a prompt of `prompt` tokens take.
fn decode_rope_time(model: &Llama, prompt: usize, steps: usize) -> Result<f64> {
    let mut total = 0.0;
    for step in 0..steps {
        total += rope_time(model, 1, prompt + step)?;
    }
    Ok(total)
}
