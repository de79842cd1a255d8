//! `roformer bench train`: masked-LM training steps of [`RoFormerForMaskedLM`] (f32, CPU).
//!
//! One step, as a training loop runs it:
//! 1. forward in training mode (dropout as the config sets it, 0.1 by default, drawn from a
//!    seeded generator) and the MLM loss over the labelled tokens ([`mlm_loss`]);
//! 2. `loss.backward()`;
//! 3. the gradients gathered from candle's store ([`Gradients::from_store`]), clipped to global
//!    norm 1, and an AdamW step (lr 1e-4, weight decay 0.01, torch's betas and epsilon).
//!
//! The configs are those of `bench model` (`small` is the peer script's,
//! `shared/peers/roformer_train_bench.py`: transformers' `RoFormerForMaskedLM` with
//! `torch.optim.AdamW`); the model is freshly initialised as transformers initialises it
//! ([`build_trainable`], seed 0). Inputs as in the peer script: token ids uniform in
//! `5..vocab`, about 15% of the positions labelled with their own id, no padding.
//!
//! Every shape runs in a fresh child process (this binary re-executed with a hidden `--case`,
//! with the warm allocator settings of [`crate::alloc::WARM_ENV`]): it builds the model and
//! the optimiser, runs `--warmup` untimed steps, then timed steps (at least `--min-steps`, and
//! more until `--seconds` have passed). The figures are medians over the timed steps; tokens/s
//! = `batch * seq / median step`. Peak memory is the child's peak resident set (`VmHWM` of
//! `/proc/self/status`) at the end: model, gradients, optimiser state and the largest step,
//! as the peer script's `ru_maxrss`.

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roformer::optim::{AdamW, AdamWConfig, Gradients};
use roformer::train::{build_trainable, mlm_loss, BatchInputs, IGNORE};
use roformer::{Dropout, Mode, RoFormerForMaskedLM};
use serde::{Deserialize, Serialize};

use super::memory::{cpu_seconds, proc_status};
use super::model::{parse_shape, set_threads, ConfigName};
use super::timing::{median, Stats};
use crate::alloc::{self, WARM_ENV};
use crate::output::outln;
use crate::output::OutputArgs;
use crate::precision::PrecisionArg;

/// The fraction of positions labelled, as in the peer script.
const LABELLED: f64 = 0.15;

/// The learning rate and weight decay of the peer script's `torch.optim.AdamW`.
const LR: f64 = 1e-4;
const WEIGHT_DECAY: f64 = 0.01;

/// The global gradient norm the step clips to.
const MAX_GRAD_NORM: f64 = 1.0;

/// Arguments of `roformer bench train`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per shape and line: impl, config, batch, seq, labelled, steps, step_s \
     (median), p10_s, p90_s, forward_s, backward_s, optimizer_s (medians), tokens_per_s, \
     cpu_s (CPU seconds per step), peak_rss_bytes, params, threads, malloc_warm, precision, \
     first_loss, last_loss"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// Model size (tiny is a smoke test).
    #[arg(long, value_enum, default_value = "small")]
    config: ConfigName,
    /// Batch shapes as BATCHxSEQ, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, default_value = "8x128,8x512")]
    shapes: Vec<(usize, usize)>,
    /// Keep timing a shape until this many seconds of steps have passed (after --min-steps).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Fewest timed steps per shape.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    min_steps: u32,
    /// Untimed steps before timing.
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// Worker threads [default: one per core, or RAYON_NUM_THREADS]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// The precision of the matrix products (bf16: f32 where the CPU has no native bf16).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// Internal: run one shape (`BATCHxSEQ`) in this process and print its measurement.
    #[arg(long, hide = true)]
    case: Option<String>,
}

/// What a child process measures for one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measurement {
    batch: usize,
    seq: usize,
    /// Labelled (predicted) tokens in the batch.
    labelled: usize,
    /// Timed steps.
    steps: usize,
    /// Median seconds per step, and the 10th and 90th percentiles.
    step_s: f64,
    p10_s: f64,
    p90_s: f64,
    /// Median seconds of each phase: forward and loss, backward, clipping and optimiser.
    forward_s: f64,
    backward_s: f64,
    optimizer_s: f64,
    /// `batch * seq / step_s`.
    tokens_per_s: f64,
    /// CPU seconds (all threads) per timed step, on average: the work a step costs, which a
    /// busy machine inflates less than the wall time.
    cpu_s: f64,
    /// Peak resident set of the child process, bytes.
    peak_rss_bytes: u64,
    /// Trainable scalars.
    params: usize,
    threads: usize,
    malloc_warm: bool,
    /// The precision of the products that ran (`bf16` falls back to `f32` without native bf16).
    precision: String,
    /// The loss of the first step and of the last (the same batch every step: it falls).
    first_loss: f32,
    last_loss: f32,
}

/// The random batch of a shape: ids uniform in `5..vocab`, about [`LABELLED`] of the positions
/// labelled with their id (at least one), the rest [`IGNORE`].
fn batch_data(batch: usize, seq: usize, vocab: usize) -> Result<(Tensor, Vec<i64>)> {
    ensure!(vocab > 5, "the vocabulary is too small for ids from 5");
    let mut rng = StdRng::seed_from_u64(((batch as u64) << 32) ^ seq as u64);
    let ids: Vec<u32> = (0..batch * seq)
        .map(|_| rng.random_range(5..vocab as u32))
        .collect();
    let mut labels: Vec<i64> = ids
        .iter()
        .map(|&id| {
            if rng.random_bool(LABELLED) {
                i64::from(id)
            } else {
                IGNORE
            }
        })
        .collect();
    if labels.iter().all(|&l| l == IGNORE) {
        labels[0] = i64::from(ids[0]);
    }
    Ok((Tensor::from_vec(ids, (batch, seq), &Device::Cpu)?, labels))
}

/// The model, its optimiser and one batch, ready to step.
struct Trainer {
    model: RoFormerForMaskedLM,
    params: roformer::train::Params,
    optimizer: AdamW,
    dropout: Dropout,
    precision: roformer::Precision,
    ids: Tensor,
    labels: Vec<i64>,
}

/// The seconds of each phase of one step, and its loss.
struct StepTimes {
    forward: f64,
    backward: f64,
    optimizer: f64,
    total: f64,
    loss: f32,
}

impl Trainer {
    fn new(
        config: ConfigName,
        batch: usize,
        seq: usize,
        precision: roformer::Precision,
    ) -> Result<Trainer> {
        let cfg = config.config()?;
        let built = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 0, &Device::Cpu)?;
        let (ids, labels) = batch_data(batch, seq, cfg.vocab_size)?;
        let optimizer = AdamW::new(
            built.params.vars().to_vec(),
            AdamWConfig {
                lr: LR,
                weight_decay: WEIGHT_DECAY,
                ..AdamWConfig::default()
            },
        )?;
        Ok(Trainer {
            model: built.model,
            params: built.params,
            optimizer,
            dropout: Dropout::seeded(0),
            precision,
            ids,
            labels,
        })
    }

    /// One training step.
    fn step(&mut self) -> Result<StepTimes> {
        let t0 = Instant::now();
        let out = mlm_loss(
            &self.model,
            BatchInputs {
                input_ids: &self.ids,
                token_type_ids: None,
                attention_mask: None,
            },
            &self.labels,
            Mode::Train {
                dropout: &self.dropout,
                precision: self.precision,
            },
        )?;
        let t1 = Instant::now();
        let grads = out.loss.backward()?;
        let t2 = Instant::now();
        let mut gradients = Gradients::from_store(&grads, self.params.vars())?;
        drop(grads);
        gradients.clip_global_norm(MAX_GRAD_NORM)?;
        self.optimizer.step(&gradients, LR)?;
        drop(gradients);
        let t3 = Instant::now();
        let loss = out.loss.to_scalar::<f32>()?;
        drop(out);
        let t4 = Instant::now();
        Ok(StepTimes {
            forward: (t1 - t0).as_secs_f64(),
            backward: (t2 - t1).as_secs_f64(),
            optimizer: (t3 - t2).as_secs_f64(),
            total: (t4 - t0).as_secs_f64(),
            loss,
        })
    }
}

/// The child's side: measures one shape and prints it as one JSON line.
fn run_child(spec: &str, args: &Args) -> Result<()> {
    let (batch, seq) = parse_shape(spec).map_err(anyhow::Error::msg)?;
    set_threads(args.threads)?;
    let mut trainer = Trainer::new(args.config, batch, seq, args.precision.resolve())?;
    let mut first_loss = None;
    for _ in 0..args.warmup {
        let s = trainer.step()?;
        first_loss.get_or_insert(s.loss);
    }
    let (mut total, mut forward, mut backward, mut optimizer) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut last_loss = f32::NAN;
    let cpu_start = cpu_seconds()?;
    let start = Instant::now();
    while total.len() < args.min_steps as usize || start.elapsed().as_secs_f64() < args.seconds {
        let s = trainer.step()?;
        first_loss.get_or_insert(s.loss);
        last_loss = s.loss;
        total.push(s.total);
        forward.push(s.forward);
        backward.push(s.backward);
        optimizer.push(s.optimizer);
    }
    let cpu_s = (cpu_seconds()? - cpu_start) / total.len() as f64;
    let stats = Stats::from_samples(total, 1);
    let m = Measurement {
        batch,
        seq,
        labelled: trainer.labels.iter().filter(|&&l| l != IGNORE).count(),
        steps: stats.samples,
        step_s: stats.median,
        p10_s: stats.p10,
        p90_s: stats.p90,
        forward_s: median(&forward),
        backward_s: median(&backward),
        optimizer_s: median(&optimizer),
        tokens_per_s: (batch * seq) as f64 / stats.median,
        cpu_s,
        peak_rss_bytes: proc_status("VmHWM:")?,
        params: trainer.params.element_count(),
        threads: rayon::current_num_threads(),
        malloc_warm: alloc::is_warm(),
        precision: trainer.precision.name().to_owned(),
        first_loss: first_loss.unwrap_or(f32::NAN),
        last_loss,
    };
    // --min-steps is at least 1, so both losses are set; a NaN loss is an error here.
    outln!("{}", crate::json::to_string(&m)?)?;
    Ok(())
}

/// Runs one shape in a child process.
fn measure(batch: usize, seq: usize, args: &Args) -> Result<Measurement> {
    let exe = std::env::current_exe().context("locating the roformer executable")?;
    let mut command = Command::new(&exe);
    command
        .args(["bench", "train", "--case", &format!("{batch}x{seq}")])
        .args(["--config", args.config.name()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--min-steps", &args.min_steps.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--precision", args.precision.name()])
        .envs(WARM_ENV);
    if let Some(n) = args.threads {
        command.args(["--threads", &n.to_string()]);
    }
    let output = command
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        bail!(
            "the {batch}x{seq} case failed ({}): {}",
            output.status,
            tail.join(" / ")
        );
    }
    let line = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(line.trim())
        .with_context(|| format!("parsing the child's measurement {line:?}"))
}

/// Runs `roformer bench train`.
///
/// # Errors
/// Bad options, or a failing case.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    if let Some(spec) = &args.case {
        return run_child(spec, &args);
    }
    // Resolved here, once, in either output mode: the children's stderr is not shown, so a
    // fallback to f32 is said by this process.
    let precision = args.precision.resolve();
    let mut out = std::io::stdout().lock();
    if !args.stdout.json {
        writeln!(
            out,
            "RoFormerForMaskedLM training steps ({} config), products in {}, {} thread(s), warm \
             allocator, child process per shape",
            args.config.name(),
            precision.name(),
            args.threads
                .map_or_else(rayon::current_num_threads, |n| n as usize)
        )?;
        writeln!(
            out,
            "{:>5} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>11}",
            "batch",
            "seq",
            "labelled",
            "steps",
            "step_ms",
            "fwd_ms",
            "bwd_ms",
            "optim_ms",
            "cpu_s",
            "tokens/s",
            "peak_MiB",
            "loss"
        )?;
        out.flush()?;
    }
    for &(batch, seq) in &args.shapes {
        let m = measure(batch, seq, &args)?;
        if args.stdout.json {
            let mut line = crate::json::to_value(&m)?;
            if let serde_json::Value::Object(fields) = &mut line {
                fields.insert("impl".into(), "roformer-rs".into());
                fields.insert("config".into(), args.config.name().into());
            }
            writeln!(out, "{line}")?;
        } else {
            writeln!(
                out,
                "{:>5} {:>5} {:>8} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.2} {:>9.0} {:>9.0} {:>11}",
                batch,
                seq,
                m.labelled,
                m.steps,
                m.step_s * 1e3,
                m.forward_s * 1e3,
                m.backward_s * 1e3,
                m.optimizer_s * 1e3,
                m.cpu_s,
                m.tokens_per_s,
                m.peak_rss_bytes as f64 / f64::from(1 << 20),
                format!("{:.2}->{:.2}", m.first_loss, m.last_loss)
            )?;
        }
        out.flush()?;
    }
    Ok(())
}
