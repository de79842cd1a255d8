//! `roformer vision train`: a ViT trained from scratch (or from `--init`) on Fashion-MNIST,
//! through the library's [`fit_vision`]; a step line now and then, an evaluation line at each
//! evaluation, `metrics.jsonl` in the run's directory, checkpoints as Hugging Face
//! directories, and the first Ctrl-C or SIGTERM saving a checkpoint before it exits.

use std::path::PathBuf;

use anyhow::{bail, Context};
use roformer::images::augment::Augmentation;
use roformer::train::run::Outcome;
use roformer::train::{fit_vision, TrainOptions, VisionTrainOptions};
use roformer::vision::VisionConfig;

use crate::output::outln;
use crate::precision::PrecisionArg;
use crate::train::args::Decay;
use roformer_runner::train::stop_flag;
use roformer_runner::train::vision::Printer;

/// The library's defaults of a vision run, which the flags take when not given.
const DEFAULTS: TrainOptions = TrainOptions::VISION;

/// `--steps` when not given: the library's (which names a number for a vision run).
const DEFAULT_STEPS: u64 = match DEFAULTS.steps {
    Some(steps) => steps,
    None => 0,
};

/// The largest `--batch-size` taken.
const MAX_BATCH: usize = 4096;

/// The largest `--eval-size` taken (56 is the largest training side).
const MAX_SIDE: usize = 224;

/// `roformer vision train --data DIR --config config.json --out RUN`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory of Fashion-MNIST's gzipped IDX files (`scripts/fetch_fashion_mnist.sh`
    /// puts them in data/fashion-mnist).
    #[arg(long)]
    data: PathBuf,
    /// The model's config.json (a DINOv3ViT config with `num_labels: 10`); with `--init`, the
    /// checkpoint's config is used when this is not given.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Start from this checkpoint's weights (a classifier, or a DINOv3 backbone with a new
    /// head).
    #[arg(long)]
    init: Option<PathBuf>,
    /// The run's directory (checkpoint/, best/, metrics.jsonl).
    #[arg(long)]
    out: PathBuf,
    /// Optimisation steps.
    #[arg(long, default_value_t = DEFAULT_STEPS)]
    steps: u64,
    /// Images per micro-batch.
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = DEFAULTS.grad_accum)]
    grad_accum: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = DEFAULTS.lr)]
    lr: f64,
    /// Warm-up steps.
    #[arg(long, default_value_t = DEFAULTS.warmup)]
    warmup: u64,
    /// Decay after the warm-up.
    #[arg(long, value_enum, default_value_t = DEFAULTS.decay.into())]
    decay: Decay,
    /// AdamW's weight decay (matrices only).
    #[arg(long, default_value_t = DEFAULTS.weight_decay)]
    weight_decay: f64,
    /// Clip the global gradient norm to this (0: no clipping).
    #[arg(long, default_value_t = DEFAULTS.max_grad_norm.unwrap_or(0.0))]
    max_grad_norm: f64,
    /// Label smoothing of the loss.
    #[arg(long, default_value_t = 0.1)]
    label_smoothing: f64,
    /// Train at 28 x 28 only, without augmentation (the experiment's setting); by default the
    /// sides 20 to 56 with crops, flips and erasing (`Augmentation::fashion_mnist`).
    #[arg(long)]
    no_augment: bool,
    /// The side of the validation images.
    #[arg(long, default_value_t = 28)]
    eval_size: usize,
    /// Evaluate every this many steps (0: at the end only).
    #[arg(long, default_value_t = DEFAULTS.eval_every)]
    eval_every: u64,
    /// Save a checkpoint every this many steps (0: at the end only).
    #[arg(long, default_value_t = DEFAULTS.save_every)]
    save_every: u64,
    /// Use only this many training images (a smoke run).
    #[arg(long)]
    train_limit: Option<usize>,
    /// Evaluate on at most this many of the 5,000 validation images.
    #[arg(long)]
    max_eval_images: Option<usize>,
    /// Seed of the weights, data order, augmentation and dropout.
    #[arg(long, default_value_t = DEFAULTS.seed)]
    seed: u64,
    /// The precision of the matrix products.
    #[arg(long, value_enum, default_value_t = DEFAULTS.precision.into())]
    precision: PrecisionArg,
    /// Continue the run in `--out` from its checkpoint.
    #[arg(long)]
    resume: bool,
    /// Print a step line every this many steps.
    #[arg(long, default_value_t = 50)]
    log_every: u64,
}

/// The config of the run: `--config`, else `--init`'s.
fn config_of(args: &Args) -> anyhow::Result<VisionConfig> {
    let path = match (&args.config, &args.init) {
        (Some(path), _) => path.clone(),
        (None, Some(init)) => init.join("config.json"),
        (None, None) => bail!("give --config config.json (or --init DIR to take its config)"),
    };
    VisionConfig::from_file(&path).with_context(|| format!("reading {}", path.display()))
}

/// The library's options of these flags, for the model `config`.
fn train_options(args: &Args, config: VisionConfig) -> VisionTrainOptions {
    VisionTrainOptions {
        out: args.out.clone(),
        config,
        init: args.init.clone(),
        data: args.data.clone(),
        train_limit: args.train_limit,
        max_eval_images: args.max_eval_images,
        batch_size: args.batch_size,
        augmentation: if args.no_augment {
            Augmentation::none(args.eval_size)
        } else {
            Augmentation::fashion_mnist()
        },
        eval_side: args.eval_size,
        label_smoothing: args.label_smoothing,
        train: TrainOptions {
            steps: Some(args.steps),
            grad_accum: args.grad_accum,
            lr: args.lr,
            warmup: args.warmup,
            decay: args.decay.into(),
            weight_decay: args.weight_decay,
            max_grad_norm: (args.max_grad_norm > 0.0).then_some(args.max_grad_norm),
            seed: args.seed,
            eval_every: args.eval_every,
            save_every: args.save_every,
            precision: args.precision.resolve(),
        },
        resume: args.resume,
    }
}

/// Runs `roformer vision train`.
///
/// # Errors
/// Bad flags, the data's, the model's and the loop's errors.
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = config_of(&args)?;
    if config.num_labels != 10 {
        bail!(
            "Fashion-MNIST has 10 classes; the config has num_labels {}",
            config.num_labels
        );
    }
    if args.batch_size == 0 || args.grad_accum == 0 || args.eval_size == 0 {
        bail!("--batch-size, --grad-accum and --eval-size must be at least 1");
    }
    // Activations grow with the batch: past this a run would not fit a machine's memory, and
    // is refused before anything is read or allocated.
    if args.batch_size > MAX_BATCH || args.eval_size > MAX_SIDE {
        bail!("--batch-size is at most {MAX_BATCH} and --eval-size at most {MAX_SIDE}");
    }
    if !(0.0..1.0).contains(&args.label_smoothing) {
        bail!("--label-smoothing must be in [0, 1)");
    }
    let checkpoint = args.out.join("checkpoint");
    if args.resume != checkpoint.exists() {
        if args.resume {
            bail!("--resume: {} holds no checkpoint", args.out.display());
        }
        bail!(
            "{} already holds a run: continue it with --resume, or choose another --out",
            args.out.display()
        );
    }
    let mut printer = Printer::open(&args.out, args.log_every, args.steps)?;
    let options = train_options(&args, config);
    let stop = stop_flag();
    let finished = fit_vision(&options, &mut printer, &stop)?;
    let last = finished.last_eval.map(|m| m.accuracy);
    match finished.outcome {
        Outcome::Finished => outln!(
            "finished {} steps; validation top-1 {}; checkpoint in {}",
            finished.steps,
            last.map_or("-".into(), |a| format!("{:.2} %", 100.0 * a)),
            checkpoint.display()
        )?,
        Outcome::Stopped(step) => outln!(
            "stopped after step {step}; checkpoint in {} (continue with --resume)",
            checkpoint.display()
        )?,
    }
    if let Some(best) = finished.best {
        outln!("best model by validation top-1 in {}", best.display())?;
    }
    Ok(())
}
