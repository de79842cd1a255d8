//! `roformer train classify`: fine-tunes a sequence classifier from a checkpoint on JSON-lines
//! examples, keeps the best model by dev macro-F1, and `--resume`s like `train mlm`.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::bail;
use roformer::train::checkpoint::SaveStep;
use roformer::train::classify::{labels_of, ClassifyOptions};
use roformer::train::{ModelStart, TaskOptions};
use serde::{Deserialize, Serialize};

use roformer::train::out_dir::{OutRequest, RunPaths};
use roformer_runner::train::checks::{
    check_labels, check_numbers, check_plot_name, check_vocab_fits, parse_lr,
};
use roformer_runner::train::classify::explain;
use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::train::observer::train;
use roformer_runner::train::out_dir::open_out_dir;
use roformer_runner::train::record::write_record;

use super::args::{CommandRun, RunArgs};
use super::resume::resolve;
use super::save_fault::FaultInSave;

/// Arguments of `roformer train classify`.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
#[command(mut_arg("json", |a| a.help("JSON lines on stdout")))]
pub struct Args {
    /// The checkpoint to fine-tune (a pre-trained MLM or a classifier).
    #[arg(long, required_unless_present = "resume")]
    pub init: Option<PathBuf>,
    /// Training examples: JSON lines `{"text": ..., ["text_pair": ...,] "label": ...}`.
    #[arg(long, required_unless_present = "resume")]
    pub train: Option<PathBuf>,
    /// Dev examples (same format), for accuracy, macro-F1 and the best checkpoint.
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// The label names in index order, comma-separated, each once (default: the names in
    /// order of first appearance in --train, or its numbers in ascending order). A number in
    /// the examples is a label's name, never an index.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Most tokens per example (a pair is cut longest first).
    #[arg(long, default_value_t = 128)]
    pub max_length: usize,
    /// Examples per micro-batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Optimisation steps (default: 3 epochs).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, default_value_t = 5e-5, value_parser = parse_lr, allow_negative_numbers = true)]
    pub lr: f64,
    /// Seed of the head's initialisation, example order and dropout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    // What every training command takes.
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
}

/// Runs `roformer train classify`.
///
/// # Errors
/// Bad arguments or examples, a checkpoint that does not load, a non-finite loss, file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let (out, resume) = (args.run.out.clone(), args.run.resume);
    let (args, recorded) = resolve(args, &out, resume, "classify")?;
    check_args(&args)?;
    let (Some(init), Some(train_path)) = (&args.init, &args.train) else {
        bail!("give --init DIR and --train FILE");
    };
    let paths = prepare_out(&args, init, train_path)?;
    let hook = FaultInSave::from_env()?.map(|f| f.hook(stop));
    let start = model_start(paths.weights.as_deref().unwrap_or(init))?;
    let task = ClassifyOptions {
        train: train_path.clone(),
        eval: args.eval.clone(),
        labels: labels_for(&args, train_path)?,
        max_length: args.max_length,
        batch_size: args.batch,
        seed: args.seed,
    };
    let options = args.run.options(CommandRun {
        model: &start,
        task: TaskOptions::Classify(task),
        steps: args.steps,
        lr: args.lr,
        seed: args.seed,
        save_hook: hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep)),
    });
    let record = |print: &Fingerprint| write_record(&out, &args, print);
    let view = args.run.view("Classifier", recorded, stop, &record);
    let result = train(&options, view, explain);
    // The lock on --out is held until here, after the run's last write.
    drop(paths.lock);
    result.map(drop)
}

/// The checkpoint a run fine-tunes (`--init`, or the run's own on `--resume`), with a
/// vocabulary that fits its config.
///
/// # Errors
/// A checkpoint that does not load, or a vocabulary larger than its config.
fn model_start(weights: &Path) -> anyhow::Result<ModelStart> {
    let start = ModelStart::from_checkpoint(weights)?;
    check_vocab_fits(
        weights,
        start.tokenizer.vocab_size(),
        start.config.vocab_size,
    )?;
    Ok(start)
}

/// Checks and prepares `--out` (the inputs `--init`, `--train` and `--eval` may not be in what
/// it replaces), and takes its lock.
///
/// # Errors
/// As [`open_out_dir`].
fn prepare_out(args: &Args, init: &Path, train: &Path) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = vec![("--init", init), ("--train", train)];
    inputs.extend(args.eval.as_deref().map(|p| ("--eval", p)));
    open_out_dir(&OutRequest {
        out: &args.run.out,
        resume: args.run.resume,
        overwrite: args.run.overwrite,
        init: Some(init),
        inputs,
        plot: &args.run.plot,
    })
}

/// The checks of the arguments that need no file.
///
/// # Errors
/// A count of 0, a number out of range, a plot name that leaves `--out`, a label given twice.
fn check_args(args: &Args) -> anyhow::Result<()> {
    if args.batch == 0 || args.run.grad_accum == 0 || args.steps == Some(0) {
        bail!("--batch, --grad-accum and --steps must be at least 1");
    }
    check_numbers(args.lr, args.run.weight_decay, args.run.max_grad_norm)?;
    check_plot_name(&args.run.plot)?;
    check_labels(&args.labels)
}

/// The label names: `--labels`, or those of the training examples; at least 2.
///
/// # Errors
/// Unreadable examples, and fewer than 2 labels.
fn labels_for(args: &Args, train: &Path) -> anyhow::Result<Vec<String>> {
    let labels = if args.labels.is_empty() {
        labels_of(train)?
    } else {
        args.labels.clone()
    };
    if labels.len() < 2 {
        bail!("a classifier needs at least 2 labels, got {labels:?}");
    }
    Ok(labels)
}
