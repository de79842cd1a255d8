//! `roformer vision eval`: top-1 of an image classifier on Fashion-MNIST's 10,000 test images,
//! each resized to `--size` x `--size` (plain bilinear, half-pixel centres) and normalised by
//! the model's `preprocessor_config.json`, as the training's validation does.

use std::path::PathBuf;

use anyhow::{bail, Context};
use std::sync::atomic::AtomicBool;

use candle_core::{DType, Device};
use roformer::images::augment::Augmentation;
use roformer::images::batch::BatchBuilder;
use roformer::images::fashion_mnist::{self, Part};
use roformer::images::planes::Channels;
use roformer::train::score_split;
use serde::Serialize;

use crate::default_vision_model;
use crate::output::{outln, OutputArgs};

/// The largest `--size` taken: 224 x 224 (3136 patches of 4 x 4).
const MAX_SIDE: usize = 224;

/// Patch tokens one forward pass may hold: 250 images of 49 patches.
const TOKENS_PER_PASS: usize = 250 * 49;

/// Arguments of `roformer vision eval`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object: {\"model\", \"size\", \"images\", \"correct\", \"accuracy\", \"per_class\"}"
)))]
pub struct Args {
    /// A classifier directory (config.json, model.safetensors, preprocessor_config.json);
    /// the built-in Fashion-MNIST model when not given.
    #[arg(long)]
    model: Option<PathBuf>,
    /// The directory of Fashion-MNIST's gzipped IDX files (`scripts/fetch_fashion_mnist.sh`).
    #[arg(long)]
    data: PathBuf,
    /// The side the 28 x 28 test images are resized to before patching.
    #[arg(long, default_value_t = 28)]
    size: usize,
    /// Evaluate only the first this many test images.
    #[arg(long)]
    limit: Option<usize>,
    /// Images per forward pass.
    #[arg(long, default_value_t = 250)]
    batch_size: usize,
    #[command(flatten)]
    stdout: OutputArgs,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    size: usize,
    images: usize,
    correct: usize,
    accuracy: f64,
    per_class: Vec<(String, f64)>,
}

/// Runs `roformer vision eval`.
///
/// # Errors
/// Bad flags, the data's and the model's errors.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.size == 0 || args.size > MAX_SIDE || args.batch_size == 0 {
        bail!("--size must be in 1..={MAX_SIDE} and --batch-size at least 1");
    }
    let model_name = default_vision_model::describe(args.model.as_deref());
    let dir = default_vision_model::model_dir(args.model.as_deref())?;
    let model = dir
        .load_classifier(DType::F32, &Device::Cpu)
        .with_context(|| format!("loading the classifier of {model_name}"))?
        .model;
    let cfg = model.config();
    if cfg.num_labels != fashion_mnist::CLASS_NAMES.len() {
        bail!(
            "{model_name} has {} labels, Fashion-MNIST 10",
            cfg.num_labels
        );
    }
    let processor = default_vision_model::processor(args.model.as_deref())?;
    let (mean, std) = match &processor.normalize {
        Some(n) => (n.mean[0], n.std[0]),
        None => (0.0, 1.0),
    };
    let channels = match cfg.num_channels {
        1 => Channels::Grey,
        3 => Channels::Rgb,
        n => bail!("{model_name} takes {n} channels; Fashion-MNIST gives 1 (or 3, repeated)"),
    };
    let mut test = fashion_mnist::load_split(&args.data, Part::Test)
        .with_context(|| format!("reading the test images in {}", args.data.display()))?;
    if let Some(limit) = args.limit {
        test = test.select(&(0..limit.min(test.len())).collect::<Vec<_>>())?;
    }
    let builder = BatchBuilder::with_stats(Augmentation::none(args.size), channels, 0, mean, std)?;
    // Images per pass: --batch-size, fewer at large sides so that a pass holds about as many
    // patch tokens as 250 images at 28 x 28.
    let tokens = (args.size / cfg.patch_size.max(1)).max(1).pow(2);
    let per_pass = args.batch_size.min((TOKENS_PER_PASS / tokens).max(1));
    let never = AtomicBool::new(false);
    let scored = score_split(&model, &builder, &test, (args.size, per_pass), &never)?
        .context("the evaluation stopped")?;
    let per_label = scored.counts.per_label();
    let (images, right) = (scored.counts.items(), scored.counts.right());
    let report = Report {
        model: model_name,
        size: args.size,
        images,
        correct: right,
        accuracy: right as f64 / images.max(1) as f64,
        per_class: (per_label.iter().enumerate())
            .map(|(c, &(right, seen))| (cfg.label(c), right as f64 / seen.max(1) as f64))
            .collect(),
    };
    if args.stdout.json {
        outln!("{}", serde_json::to_string(&report)?)?;
        return Ok(());
    }
    outln!(
        "{}: top-1 {:.2} % ({} of {} test images at {} x {})",
        report.model,
        100.0 * report.accuracy,
        report.correct,
        report.images,
        report.size,
        report.size
    )?;
    for (label, acc) in &report.per_class {
        outln!("  {label:<12} {:.1} %", 100.0 * acc)?;
    }
    Ok(())
}
