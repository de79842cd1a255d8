//! `roformer bench model`: forward throughput of [`RoFormerModel`] (f32, CPU, random weights).
//!
//! The configs are those of the peer benchmark (`shared/peers/roformer_bench.py`, transformers'
//! `RoFormerModel` on PyTorch), so the figures can be set beside it:
//! - `small`: hidden 384, 6 layers, 6 heads, intermediate 1536, vocab 50000;
//! - `base`: hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 50000;
//! - `tiny`: hidden 32, 2 layers, 4 heads, intermediate 64, vocab 97 (a smoke test).
//!
//! Weights are fresh, as a new training run draws them ([`build_trainable`], seed 0: normal
//! with the config's `initializer_range`, norm weights 1, biases 0): no file is read. Inputs, as in the peer script: token ids uniform in
//! `1..vocab` and an all-ones attention mask. Each case runs one untimed warm-up forward,
//! then at least `--min-reps` timed forwards and more until `--seconds` have passed; the
//! figure is the median, and tokens/s = `batch * seq / median`. The command runs
//! with glibc's mmap and trim thresholds raised (`main` replaces the process with a copy that
//! has them, [`crate::alloc`]), as the peer benchmarks run.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roformer::train::build_trainable;
use roformer::{RawConfig, RoFormerConfig, RoFormerModel};
use serde_json::json;

use crate::json;
use crate::output::OutputArgs;

use super::timing::{round_robin, Budget, Stats};
use crate::alloc;
use crate::precision::PrecisionArg;

/// A model size of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ConfigName {
    /// Hidden 32, 2 layers, 4 heads, intermediate 64, vocab 97: a smoke test.
    Tiny,
    /// The built-in poetry model's sizes: hidden 256, 4 layers, 4 heads, intermediate 1024,
    /// vocab 10000.
    Poetry,
    /// Hidden 384, 6 layers, 6 heads, intermediate 1536, vocab 50000.
    Small,
    /// Hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 50000.
    Base,
}

impl ConfigName {
    /// The name on the command line.
    pub(super) fn name(self) -> &'static str {
        match self {
            ConfigName::Tiny => "tiny",
            ConfigName::Poetry => "poetry",
            ConfigName::Small => "small",
            ConfigName::Base => "base",
        }
    }

    /// The validated config: transformers' defaults but for the sizes.
    pub(super) fn config(self) -> Result<RoFormerConfig> {
        let (vocab, hidden, layers, heads, intermediate) = match self {
            ConfigName::Tiny => (97, 32, 2, 4, 64),
            ConfigName::Poetry => (10000, 256, 4, 4, 1024),
            ConfigName::Small => (50000, 384, 6, 6, 1536),
            ConfigName::Base => (50000, 768, 12, 12, 3072),
        };
        let raw = RawConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            intermediate_size: intermediate,
            ..RawConfig::default()
        };
        Ok(RoFormerConfig::try_from(raw)?)
    }
}

/// Arguments of `roformer bench model`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per case and line: impl, config, batch, seq, seconds (median per \
     forward), tokens_per_s, p10/p90 seconds, reps, params, threads, malloc_warm"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// Model sizes, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "small,base")]
    configs: Vec<ConfigName>,
    /// Input shapes as BATCHxSEQ, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, default_value = "1x128,1x512,8x128,8x512")]
    shapes: Vec<(usize, usize)>,
    /// Keep timing a case until this many seconds have passed (after --min-reps forwards).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Fewest timed forwards per case.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    min_reps: u32,
    /// Worker threads [default: one per core, or RAYON_NUM_THREADS]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// Parses `BATCHxSEQ` (both at least 1).
pub(super) fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let parts: Vec<&str> = s.split('x').collect();
    let [b, t] = parts[..] else {
        return Err(format!("{s:?}: expected BATCHxSEQ"));
    };
    let parse = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
    match (parse(b)?, parse(t)?) {
        (b, t) if b > 0 && t > 0 => Ok((b, t)),
        _ => Err(format!("{s:?}: batch and seq must be at least 1")),
    }
}

/// A model of `config` with fresh weights (as a new training run starts, seed 0), and its
/// number of parameters.
fn random_model(config: &RoFormerConfig) -> Result<(RoFormerModel, usize)> {
    let fresh = build_trainable::<RoFormerModel>(config, None, 0, &Device::Cpu)?;
    Ok((fresh.model, fresh.params.element_count()))
}

/// One measured case.
struct Record {
    config: ConfigName,
    batch: usize,
    seq: usize,
    stats: Stats,
    params: usize,
}

impl Record {
    fn tokens_per_s(&self) -> f64 {
        (self.batch * self.seq) as f64 / self.stats.median
    }
}

/// Times the forward pass of `model` on one random batch.
fn time_case(model: &RoFormerModel, batch: usize, seq: usize, budget: &Budget) -> Result<Stats> {
    let vocab = model.config().vocab_size as u32;
    let mut rng = StdRng::seed_from_u64(1);
    let ids: Vec<u32> = (0..batch * seq)
        .map(|_| rng.random_range(1..vocab.max(2)))
        .collect();
    let ids = Tensor::from_vec(ids, (batch, seq), &Device::Cpu)?;
    let mask = Tensor::ones((batch, seq), DType::U32, &Device::Cpu)?;
    let stats = round_robin(1, budget, |_| {
        model.forward(&ids, None, Some(&mask), None).map(drop)
    })?;
    Ok(stats[0])
}

/// What every line of a run reports beside its case.
#[derive(Debug, Clone, Copy)]
struct Setting {
    precision: roformer::Precision,
    threads: usize,
    malloc_warm: bool,
}

/// Runs the benchmark.
///
/// # Errors
/// Bad options, or a failing forward pass.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    set_threads(args.threads)?;
    let setting = Setting {
        precision: args.precision.resolve(),
        threads: rayon::current_num_threads(),
        malloc_warm: alloc::is_warm(),
    };
    let budget = Budget {
        warmup: 1,
        min_rounds: args.min_reps as usize,
        max_rounds: 10_000,
        seconds: args.seconds,
        sample: Duration::ZERO,
    };
    let mut out = std::io::stdout().lock();
    if !args.stdout.json {
        write_header(&mut out, setting)?;
    }
    for &config_name in &args.configs {
        let config = config_name.config()?;
        let (mut model, params) = random_model(&config)?;
        model.encoder_mut().set_precision(setting.precision)?;
        for &(batch, seq) in &args.shapes {
            let stats = time_case(&model, batch, seq, &budget)?;
            let record = Record {
                config: config_name,
                batch,
                seq,
                stats,
                params,
            };
            if args.stdout.json {
                writeln!(out, "{}", record_json(&record, setting)?)?;
            } else {
                write_row(&mut out, &record)?;
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// `--threads`: sizes candle's matrix products (by `RAYON_NUM_THREADS`) and rayon's pool
/// (`bench model`, `bench train` and `bench vision`).
///
/// # Errors
/// A pool already built.
pub(super) fn set_threads(threads: Option<u32>) -> Result<()> {
    if let Some(n) = threads {
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        rayon::ThreadPoolBuilder::new()
            .num_threads(n as usize)
            .build_global()
            .context("sizing the thread pool")?;
    }
    Ok(())
}

/// The table's title and header.
fn write_header(out: &mut impl Write, setting: Setting) -> Result<()> {
    writeln!(
        out,
        "RoFormerModel forward, {}, {} thread(s), warm allocator: {}",
        setting.precision,
        setting.threads,
        if setting.malloc_warm { "yes" } else { "no" }
    )?;
    writeln!(
        out,
        "{:<6} {:>8} {:>5} {:>5} {:>5} {:>11} {:>21} {:>10}",
        "config", "params_M", "batch", "seq", "reps", "median_ms", "p10..p90_ms", "tokens/s"
    )?;
    out.flush()?;
    Ok(())
}

/// A case's `--json` line.
///
/// # Errors
/// A time that is not finite.
fn record_json(record: &Record, setting: Setting) -> Result<serde_json::Value> {
    let stats = record.stats;
    Ok(json!({
        "impl": "roformer-rs",
        "config": record.config.name(),
        "batch": record.batch,
        "seq": record.seq,
        "seconds": json::finite("seconds", stats.median)?,
        "tokens_per_s": json::finite("tokens_per_s", record.tokens_per_s())?,
        "p10_seconds": json::finite("p10_seconds", stats.p10)?,
        "p90_seconds": json::finite("p90_seconds", stats.p90)?,
        "reps": stats.samples,
        "params": record.params,
        "threads": setting.threads,
        "malloc_warm": setting.malloc_warm,
        "precision": setting.precision.name(),
    }))
}

/// A case's row of the table.
fn write_row(out: &mut impl Write, record: &Record) -> Result<()> {
    let stats = record.stats;
    writeln!(
        out,
        "{:<6} {:>8.1} {:>5} {:>5} {:>5} {:>11.1} {:>21} {:>10.0}",
        record.config.name(),
        record.params as f64 / 1e6,
        record.batch,
        record.seq,
        stats.samples,
        stats.median * 1e3,
        format!("{:.1}..{:.1}", stats.p10 * 1e3, stats.p90 * 1e3),
        record.tokens_per_s()
    )?;
    Ok(())
}
