//! `roformer bench vision`: images/s of the vision transformer on the CPU, in two parts.
//!
//! - `--part forward`: [`VisionModel`] inference (no gradients) on a DINOv3 ViT-S/16 config
//!   (`vits16`: transformers' `DINOv3ViTConfig` defaults, hidden 384, 12 layers of 6 heads,
//!   intermediate 1536, patch 16, 3 channels, layer scale, axial RoPE on normalised patch
//!   centres, with the 4 registers of the released ViT-S/16) at 224 x 224. The weights are
//!   seeded fresh values ([`initialise`], seed 0) as plain tensors, as a loaded checkpoint
//!   holds them; the pixels are seeded normal values. Each batch size runs one untimed
//!   forward, then at least `--min-reps` timed forwards and more until `--seconds` have
//!   passed; images/s = `batch / median`. `--precision bf16` runs the products in bf16 (f32
//!   accumulation), as `torch.autocast(dtype=torch.bfloat16)` does.
//! - `--part train`: optimisation steps of the built-in Fashion-MNIST config (`fashion`:
//!   hidden 192, 6 layers, 28 x 28, patch 4, 4 registers, stochastic depth 0.1) at batch 128,
//!   each the step of `roformer vision train` ([`fit_vision`]'s loop): forward in training
//!   mode with the run's seeded dropout generator, the label-smoothed (0.1) cross entropy,
//!   its value read, `backward`, the gradients gathered from candle's store, clipped to
//!   global norm 1, and AdamW (lr 1e-3, weight decay 0.05 on the matrices only). The batch
//!   is fixed (seeded pixels and labels; the loop's augmentation is not timed), as in the
//!   PyTorch run set beside it (`scripts/train_vit_pytorch.py --bench-steps`). `--warmup`
//!   untimed steps, then at least `--min-reps` timed steps and more until `--seconds` have
//!   passed; images/s = `batch / median step`.
//!
//! `tiny` (hidden 32, 2 layers, 16 x 16) is a smoke test of either part. The command runs
//! under the warm allocator ([`crate::alloc`]) and, as every `roformer vision` command, with
//! candle's element-wise ops inline (`main`'s `inline_candle_elementwise`).
//!
//! [`fit_vision`]: roformer::train::fit_vision

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use roformer::optim::{AdamW, AdamWConfig, Gradients};
use roformer::train::vision::{build_model, smoothed_cross_entropy, vision_decays};
use roformer::train::Params;
use roformer::vision::init::initialise;
use roformer::vision::{RawVisionConfig, SizeField, VisionConfig, VisionKind, VisionModel};
use roformer::{Dropout, Mode, ParamGrads, Precision};
use serde_json::json;

use super::memory::cpu_seconds;
use super::model::set_threads;
use super::timing::{median, round_robin, Budget, Stats};
use crate::alloc;
use crate::json;
use crate::output::OutputArgs;
use crate::precision::PrecisionArg;

/// `roformer vision train`'s defaults: peak learning rate, weight decay, clipping norm and
/// label smoothing.
const LR: f64 = 1e-3;
const WEIGHT_DECAY: f64 = 0.05;
const MAX_GRAD_NORM: f64 = 1.0;
const LABEL_SMOOTHING: f64 = 0.1;

/// What to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Inference of the backbone (`VisionModel`), images/s per batch size.
    Forward,
    /// Training steps of the classifier, images/s.
    Train,
}

impl Part {
    /// The name on the command line.
    fn name(self) -> &'static str {
        match self {
            Part::Forward => "forward",
            Part::Train => "train",
        }
    }
}

/// A model config of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ConfigName {
    /// DINOv3 ViT-S/16 (transformers' defaults, 4 registers), 224 x 224, 3 channels.
    Vits16,
    /// The built-in Fashion-MNIST model's config: hidden 192, 6 layers, 28 x 28, patch 4.
    Fashion,
    /// Hidden 32, 2 layers of 4 heads, patch 4, 16 x 16, 2 registers: a smoke test.
    Tiny,
}

impl ConfigName {
    /// The name on the command line.
    fn name(self) -> &'static str {
        match self {
            ConfigName::Vits16 => "vits16",
            ConfigName::Fashion => "fashion",
            ConfigName::Tiny => "tiny",
        }
    }

    /// The validated config (10 labels: the train part's head).
    fn config(self) -> Result<VisionConfig> {
        let raw = match self {
            ConfigName::Vits16 => RawVisionConfig {
                num_register_tokens: 4,
                num_labels: Some(10),
                ..RawVisionConfig::default()
            },
            ConfigName::Fashion => {
                return Ok(VisionConfig::from_json_str(
                    roformer_builtin::fashion::CONFIG,
                )?)
            }
            ConfigName::Tiny => RawVisionConfig {
                patch_size: SizeField::Square(4),
                image_size: SizeField::Square(16),
                hidden_size: 32,
                intermediate_size: 64,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_register_tokens: 2,
                layerscale_value: 0.1,
                drop_path_rate: 0.1,
                num_labels: Some(10),
                ..RawVisionConfig::default()
            },
        };
        Ok(VisionConfig::try_from(raw)?)
    }
}

/// Arguments of `roformer bench vision`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per case and line: impl, part, config, size, batch, tokens, reps, \
     seconds (median per forward or step), p10_seconds, p90_seconds, images_per_s, cpu_s \
     (CPU seconds per call, all threads), params, threads, malloc_warm, precision; the train \
     part adds forward_s, backward_s, optimizer_s (medians), first_loss, last_loss"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// What to time: inference of the backbone, or training steps of the classifier.
    #[arg(long, value_enum, default_value = "forward")]
    part: Part,
    /// The model [default: vits16 for forward, fashion for train].
    #[arg(long, value_enum)]
    config: Option<ConfigName>,
    /// Side of the square images [default: the config's image_size: 224, 28 or 16].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    size: Option<u32>,
    /// Batch sizes, comma-separated [default: 1,8 for forward, 128 for train].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    batches: Vec<u32>,
    /// Keep timing a case until this many seconds have passed (after --min-reps).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Fewest timed forwards or steps per case.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    min_reps: u32,
    /// Untimed forwards or steps before timing.
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// Worker threads [default: one per core, or RAYON_NUM_THREADS]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// The precision of the matrix products (bf16: f32 where the CPU has no native bf16).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// What every line of a run reports beside its case.
#[derive(Debug, Clone, Copy)]
struct Setting {
    part: Part,
    config: ConfigName,
    size: usize,
    precision: Precision,
    threads: usize,
    malloc_warm: bool,
}

/// One measured case.
struct Record {
    batch: usize,
    /// Tokens per image: CLS, registers and patches.
    tokens: usize,
    stats: Stats,
    params: usize,
    /// CPU seconds (all threads) per forward or step, on average: the work a call costs,
    /// which a busy machine inflates less than the wall time.
    cpu_s: f64,
    /// The train part's phases and losses.
    train: Option<TrainRecord>,
}

/// What a training case adds to its record.
struct TrainRecord {
    forward_s: f64,
    backward_s: f64,
    optimizer_s: f64,
    first_loss: f32,
    last_loss: f32,
}

impl Record {
    fn images_per_s(&self) -> f64 {
        self.batch as f64 / self.stats.median
    }
}

/// Seeded pixels `[batch, channels, side, side]`, standard normal (normalised images).
fn pixels(batch: usize, channels: usize, side: usize) -> Result<Tensor> {
    let mut rng = StdRng::seed_from_u64(1);
    let n = batch * channels * side * side;
    let values: Vec<f32> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
    Ok(Tensor::from_vec(
        values,
        (batch, channels, side, side),
        &Device::Cpu,
    )?)
}

/// The backbone of `config` with seeded fresh weights held as plain tensors (no gradient
/// tracking, as a checkpoint loads them), and its number of parameters.
fn random_backbone(config: &VisionConfig) -> Result<(VisionModel, usize)> {
    let varmap = VarMap::new();
    initialise(
        &varmap,
        config,
        VisionKind::Model,
        0,
        DType::F32,
        &Device::Cpu,
    )?;
    let tensors: HashMap<String, Tensor> = varmap
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("the variable map's lock is poisoned"))?
        .iter()
        .map(|(name, var)| (name.clone(), var.as_tensor().detach()))
        .collect();
    let params = tensors.values().map(Tensor::elem_count).sum();
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    Ok((VisionModel::load(vb, config)?, params))
}

/// Times inference of the backbone at each batch size.
fn forward_cases(
    config: &VisionConfig,
    setting: Setting,
    batches: &[usize],
    budget: &Budget,
    mut emit: impl FnMut(&Record) -> Result<()>,
) -> Result<()> {
    let (model, params) = random_backbone(config)?;
    for &batch in batches {
        let x = pixels(batch, config.num_channels, setting.size)?;
        let plan = model
            .plan(Mode::Inference)
            .with_precision(setting.precision);
        let (mut tokens, mut calls) = (0, 0usize);
        let cpu_start = cpu_seconds()?;
        let stats = round_robin(1, budget, |_| -> Result<()> {
            let out = model.forward(&x, plan)?;
            tokens = out.last_hidden_state.dim(1)?;
            calls += 1;
            Ok(())
        })?;
        emit(&Record {
            batch,
            tokens,
            stats: stats[0],
            params,
            // Warm-up calls included: CPU time is read per process, not per call.
            cpu_s: (cpu_seconds()? - cpu_start) / calls.max(1) as f64,
            train: None,
        })?;
    }
    Ok(())
}

/// The seconds of each phase of one training step, and its loss.
struct StepTimes {
    forward: f64,
    backward: f64,
    optimizer: f64,
    total: f64,
    loss: f32,
}

/// The classifier, its optimiser and one fixed batch, stepped as `vision train` steps.
struct Trainer {
    model: roformer::vision::VisionForImageClassification,
    params: Params,
    optimizer: AdamW,
    precision: Precision,
    pixels: Tensor,
    labels: Vec<u32>,
    steps: u64,
}

impl Trainer {
    fn new(config: &VisionConfig, batch: usize, side: usize, precision: Precision) -> Result<Self> {
        let (varmap, model) = build_model(config, None, 0)?;
        let params = Params::from_varmap(&varmap);
        let optimizer = AdamW::with_decay_rule(
            params.vars().to_vec(),
            AdamWConfig {
                weight_decay: WEIGHT_DECAY,
                ..AdamWConfig::with_lr(LR)
            },
            vision_decays,
        )?;
        let mut rng = StdRng::seed_from_u64(2);
        let classes = config.num_labels as u32;
        let labels = (0..batch).map(|_| rng.random_range(0..classes)).collect();
        Ok(Trainer {
            model,
            params,
            optimizer,
            precision,
            pixels: pixels(batch, config.num_channels, side)?,
            labels,
            steps: 0,
        })
    }

    /// One optimisation step, as the training loop runs it (one micro-batch).
    fn step(&mut self) -> Result<StepTimes> {
        let dropout = Dropout::seeded(self.steps);
        let t0 = Instant::now();
        let delivered = ParamGrads::new();
        let plan = self.model.plan(Mode::Train {
            dropout: &dropout,
            precision: self.precision,
        });
        let logits = self
            .model
            .forward(&self.pixels, plan.with_param_grads(&delivered))?;
        let loss = smoothed_cross_entropy(&logits, &self.labels, LABEL_SMOOTHING)?;
        let value = loss.to_scalar::<f32>()?;
        let t1 = Instant::now();
        let store = delivered.backward(&loss)?;
        let t2 = Instant::now();
        let mut gradients = Gradients::from_store(&store, self.params.vars())?;
        drop(store);
        gradients.clip_global_norm(MAX_GRAD_NORM)?;
        self.optimizer.step(&gradients, LR)?;
        drop(gradients);
        drop((loss, logits));
        let t3 = Instant::now();
        self.steps += 1;
        if !value.is_finite() {
            bail!("step {}: loss {value}", self.steps);
        }
        Ok(StepTimes {
            forward: (t1 - t0).as_secs_f64(),
            backward: (t2 - t1).as_secs_f64(),
            optimizer: (t3 - t2).as_secs_f64(),
            total: (t3 - t0).as_secs_f64(),
            loss: value,
        })
    }
}

/// Times training steps at each batch size.
fn train_cases(
    config: &VisionConfig,
    setting: Setting,
    batches: &[usize],
    args: &Args,
    mut emit: impl FnMut(&Record) -> Result<()>,
) -> Result<()> {
    for &batch in batches {
        let mut trainer = Trainer::new(config, batch, setting.size, setting.precision)?;
        let mut first_loss = None;
        for _ in 0..args.warmup {
            first_loss.get_or_insert(trainer.step()?.loss);
        }
        let mut phases: [Vec<f64>; 4] = Default::default();
        let mut last_loss = f32::NAN;
        let cpu_start = cpu_seconds()?;
        let start = Instant::now();
        while phases[0].len() < args.min_reps as usize
            || start.elapsed().as_secs_f64() < args.seconds
        {
            let s = trainer.step()?;
            first_loss.get_or_insert(s.loss);
            last_loss = s.loss;
            for (times, t) in phases
                .iter_mut()
                .zip([s.total, s.forward, s.backward, s.optimizer])
            {
                times.push(t);
            }
        }
        let cpu_s = (cpu_seconds()? - cpu_start) / phases[0].len() as f64;
        let grid = trainer.model.model().grid(setting.size, setting.size)?;
        let tokens = config.prefix_tokens() + grid.patches();
        emit(&Record {
            batch,
            tokens,
            stats: Stats::from_samples(phases[0].clone(), 1),
            params: trainer.params.element_count(),
            cpu_s,
            train: Some(TrainRecord {
                forward_s: median(&phases[1]),
                backward_s: median(&phases[2]),
                optimizer_s: median(&phases[3]),
                first_loss: first_loss.unwrap_or(f32::NAN),
                last_loss,
            }),
        })?;
    }
    Ok(())
}

/// Runs `roformer bench vision`.
///
/// # Errors
/// Bad options, or a failing forward or step.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    set_threads(args.threads)?;
    let config_name = args.config.unwrap_or(match args.part {
        Part::Forward => ConfigName::Vits16,
        Part::Train => ConfigName::Fashion,
    });
    let config = config_name.config()?;
    let size = match args.size {
        Some(s) => s as usize,
        None => config.image_size[0],
    };
    let batches: Vec<usize> = match (&args.batches[..], args.part) {
        ([], Part::Forward) => vec![1, 8],
        ([], Part::Train) => vec![128],
        (given, _) => given.iter().map(|&b| b as usize).collect(),
    };
    let setting = Setting {
        part: args.part,
        config: config_name,
        size,
        precision: args.precision.resolve(),
        threads: rayon::current_num_threads(),
        malloc_warm: alloc::is_warm(),
    };
    // The grid is checked once, before any model is built.
    roformer::vision::PatchGrid::of_image(size, size, config.patch_size)?;
    let mut out = std::io::stdout().lock();
    if !args.stdout.json {
        write_header(&mut out, setting)?;
    }
    let mut emit = |record: &Record| -> Result<()> {
        if args.stdout.json {
            writeln!(out, "{}", record_json(record, setting)?)?;
        } else {
            write_row(&mut out, record)?;
        }
        out.flush()?;
        Ok(())
    };
    match args.part {
        Part::Forward => {
            let budget = Budget {
                warmup: args.warmup as usize,
                min_rounds: args.min_reps as usize,
                max_rounds: 100_000,
                seconds: args.seconds,
                sample: Duration::ZERO,
            };
            forward_cases(&config, setting, &batches, &budget, &mut emit)
        }
        Part::Train => train_cases(&config, setting, &batches, &args, &mut emit),
    }
}

/// The table's title and header.
fn write_header(out: &mut impl Write, setting: Setting) -> Result<()> {
    let what = match setting.part {
        Part::Forward => "VisionModel forward (no gradients)",
        Part::Train => "VisionForImageClassification training steps",
    };
    writeln!(
        out,
        "{what}, {} config at {size}x{size}, products in {}, {} thread(s), warm allocator: {}",
        setting.config.name(),
        setting.precision.name(),
        setting.threads,
        if setting.malloc_warm { "yes" } else { "no" },
        size = setting.size,
    )?;
    writeln!(
        out,
        "{:>5} {:>6} {:>5} {:>11} {:>21} {:>10} {:>8}",
        "batch", "tokens", "reps", "median_ms", "p10..p90_ms", "images/s", "params_M"
    )?;
    out.flush()?;
    Ok(())
}

/// A case's row of the table (training cases add their phases and losses).
fn write_row(out: &mut impl Write, record: &Record) -> Result<()> {
    let stats = record.stats;
    write!(
        out,
        "{:>5} {:>6} {:>5} {:>11.1} {:>21} {:>10.1} {:>7.2} {:>8.2}",
        record.batch,
        record.tokens,
        stats.samples,
        stats.median * 1e3,
        format!("{:.1}..{:.1}", stats.p10 * 1e3, stats.p90 * 1e3),
        record.images_per_s(),
        record.cpu_s,
        record.params as f64 / 1e6,
    )?;
    if let Some(t) = &record.train {
        write!(
            out,
            "  forward {:.1} ms, backward {:.1} ms, optimizer {:.1} ms, loss {:.3} -> {:.3}",
            t.forward_s * 1e3,
            t.backward_s * 1e3,
            t.optimizer_s * 1e3,
            t.first_loss,
            t.last_loss
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// A case's `--json` line.
///
/// # Errors
/// A time or loss that is not finite.
fn record_json(record: &Record, setting: Setting) -> Result<serde_json::Value> {
    let stats = record.stats;
    let mut line = json!({
        "impl": "roformer-rs",
        "part": setting.part.name(),
        "config": setting.config.name(),
        "size": setting.size,
        "batch": record.batch,
        "tokens": record.tokens,
        "reps": stats.samples,
        "seconds": json::finite("seconds", stats.median)?,
        "p10_seconds": json::finite("p10_seconds", stats.p10)?,
        "p90_seconds": json::finite("p90_seconds", stats.p90)?,
        "images_per_s": json::finite("images_per_s", record.images_per_s())?,
        "cpu_s": json::finite("cpu_s", record.cpu_s)?,
        "params": record.params,
        "threads": setting.threads,
        "malloc_warm": setting.malloc_warm,
        "precision": setting.precision.name(),
    });
    if let (Some(t), serde_json::Value::Object(fields)) = (&record.train, &mut line) {
        let extra = json!({
            "forward_s": json::finite("forward_s", t.forward_s)?,
            "backward_s": json::finite("backward_s", t.backward_s)?,
            "optimizer_s": json::finite("optimizer_s", t.optimizer_s)?,
            "first_loss": json::finite("first_loss", f64::from(t.first_loss))?,
            "last_loss": json::finite("last_loss", f64::from(t.last_loss))?,
        });
        if let serde_json::Value::Object(more) = extra {
            fields.extend(more);
        }
    }
    Ok(line)
}
