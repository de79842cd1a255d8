//! `roformer train classify`: fine-tunes a sequence classifier from a checkpoint on JSON-lines
//! examples, keeps the best model by dev macro-F1, and `--resume`s like `train mlm`.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use candle_core::Device;
use roformer::optim::LrSchedule;
use roformer::shapes::ModelKind;
use roformer::train::budget::check_training_memory;
use roformer::train::checkpoint::SaveStep;
use roformer::train::classify::{
    best_score, labels_of, read_examples, ClassifyOptions, ClassifyTask,
};
use roformer::train::run::{LoopOptions, Trainer};
use roformer::train::{build_trainable, Trainable};
use roformer::{ModelDir, RoFormerConfig, RoFormerForSequenceClassification, RoFormerTokenizer};
use serde::{Deserialize, Serialize};

use crate::precision::PrecisionArg;

use super::checks::{
    check_labels, check_numbers, check_plot_name, check_vocab_fits, parse_lr, parse_max_grad_norm,
    parse_weight_decay,
};
use super::common::{
    finish_run, optimizer, prepare_out_dir, tokenizer_files, vocab_text, Decay, Display,
    OutRequest, RunPaths, Stop,
};
use super::fingerprint::{examples_source, Fingerprint};
use super::resume::{check_same_run, resolve, write_record};
use super::save_fault::FaultInSave;

/// Arguments of `roformer train classify`.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
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
    /// Micro-batches per optimisation step.
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    /// Optimisation steps (default: 3 epochs).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, default_value_t = 5e-5, value_parser = parse_lr, allow_negative_numbers = true)]
    pub lr: f64,
    /// Warm-up steps.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Decay after the warm-up.
    #[arg(long, value_enum, default_value = "linear")]
    pub decay: Decay,
    /// AdamW's decoupled weight decay (0 or more).
    #[arg(long, default_value_t = 0.01, value_parser = parse_weight_decay, allow_negative_numbers = true)]
    pub weight_decay: f64,
    /// Clip the global gradient norm (a finite number; 0: no clipping).
    #[arg(long, default_value_t = 1.0, value_parser = parse_max_grad_norm, allow_negative_numbers = true)]
    pub max_grad_norm: f64,
    /// Seed of the head's initialisation, example order and dropout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Evaluate every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// Save a checkpoint every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub save_every: u64,
    /// The output directory (checkpoint/, best/, metrics.jsonl, loss plot, run.json).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an output directory that holds another run.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Continue the run in --out from its checkpoint, with the arguments it recorded. --steps
    /// (not below the steps done), --precision, --save-every and --eval-every may change; any
    /// other flag must repeat the run's value. The config, vocabulary, examples and parameter
    /// shapes must be the run's.
    #[arg(long)]
    pub resume: bool,
    /// The loss plot's file name in --out (.png or .svg; a name, not a path: it is always
    /// written in --out).
    #[arg(long, default_value = "loss.png")]
    pub plot: PathBuf,
    /// Stop after this step as Ctrl-C would (checkpoint written, --resume continues).
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// The precision of the matrix products [default: f32; on --resume, the run's]. Master
    /// weights, optimiser state, norms, softmax and the loss stay f32; checkpoints are f32.
    #[arg(long, value_enum)]
    #[serde(default)]
    pub precision: Option<PrecisionArg>,
    /// JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `roformer train classify`.
///
/// # Errors
/// Bad arguments or examples, a checkpoint that does not load, a non-finite loss, file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let (out, resume) = (args.out.clone(), args.resume);
    let (args, recorded) = resolve(args, &out, resume, "classify")?;
    check_args(&args)?;
    let (Some(init), Some(train_path)) = (&args.init, &args.train) else {
        bail!("give --init DIR and --train FILE");
    };
    let paths = prepare_out(&args, init, train_path)?;
    let fault = FaultInSave::from_env()?;
    let save_hook = fault.map(|f| f.hook(stop));
    let weights = paths.weights.clone().unwrap_or_else(|| init.clone());
    let md = ModelDir::open(&weights)?;
    let tokenizer = RoFormerTokenizer::from_dir(&weights)?;
    check_vocab_fits(&weights, tokenizer.vocab_size(), md.config.vocab_size)?;
    let labels = labels_for(&args, train_path)?;
    let cfg = classifier_config(&md.config, &labels, &args)?;
    let train = read_examples(train_path, &tokenizer, &labels, args.max_length)?;
    let eval = match &args.eval {
        Some(p) => read_examples(p, &tokenizer, &labels, args.max_length)?,
        None => Vec::new(),
    };
    let Trainable {
        model,
        params,
        initialised,
        unused,
    } = build_trainable::<RoFormerForSequenceClassification>(
        &cfg,
        Some(&md.checkpoint),
        args.seed,
        &Device::Cpu,
    )?;
    if !args.json && !args.resume {
        announce(train.len(), eval.len(), &labels, &initialised, unused.len());
    }
    let tokenizer_files = tokenizer_files(&tokenizer, &cfg)?;
    let mut sources = vec![examples_source("--train", train_path, &train)];
    if let Some(path) = &args.eval {
        sources.push(examples_source("--eval", path, &eval));
    }
    let print = Fingerprint::new(&cfg, &params, vocab_text(&tokenizer_files), sources)?;
    if let Some(recorded) = &recorded {
        check_same_run(&args.out, recorded.fingerprint.as_ref(), &print)?;
    }
    let steps = args
        .steps
        .unwrap_or_else(|| (3 * train.len()).div_ceil(args.batch * args.grad_accum) as u64);
    let resume_state = paths.resume_state.as_deref();
    let (optimizer, done) = optimizer(&params, args.lr, args.weight_decay, resume_state, steps)?;
    let options = ClassifyOptions {
        train: train_path.clone(),
        eval: args.eval.clone(),
        labels,
        max_length: args.max_length,
        batch_size: args.batch,
        seed: args.seed,
    };
    let best_dir = args.out.join("best");
    let task = ClassifyTask {
        model: &model,
        params: &params,
        train,
        eval,
        options: options.clone(),
        pad: cfg.pad_token_id.unwrap_or(0),
        tokenizer_files,
        precision: args.precision.unwrap_or_default().resolve(),
        best: args.resume.then(|| best_score(&best_dir)).flatten(),
        best_dir: Some(best_dir),
    };
    write_record(&args.out, &args, &print)?;
    let mut trainer = Trainer {
        task,
        params: &params,
        optimizer,
        schedule: LrSchedule::new(args.lr, args.warmup, steps, args.decay.into())?,
        options: LoopOptions {
            steps,
            grad_accum: args.grad_accum,
            max_grad_norm: (args.max_grad_norm > 0.0).then_some(args.max_grad_norm),
            seed: args.seed,
            eval_every: args.eval_every,
            save_every: args.save_every,
        },
        out: args.out.clone(),
        step: done,
        task_record: crate::json::to_value(&options)?,
        last_eval: None,
        save_hook: save_hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep)),
    };
    let display = Display {
        json: args.json,
        quiet: args.quiet,
        unigram_entropy: None,
    };
    let stop = Stop {
        flag: stop,
        after: args.stop_after,
    };
    finish_run(
        &mut trainer,
        &args.out,
        &args.plot,
        display,
        stop,
        "Classifier",
    )?;
    if !args.json && trainer.task.best.is_some() {
        println!("best dev model: {}", args.out.join("best").display());
    }
    // The lock on --out is held until here, after the run's last write.
    drop(paths.lock);
    Ok(())
}

/// Checks and prepares `--out` (the inputs `--init`, `--train` and `--eval` may not be in what
/// it replaces), and takes its lock.
///
/// # Errors
/// As [`prepare_out_dir`].
fn prepare_out(args: &Args, init: &Path, train: &Path) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = vec![("--init", init), ("--train", train)];
    inputs.extend(args.eval.as_deref().map(|p| ("--eval", p)));
    prepare_out_dir(&OutRequest {
        out: &args.out,
        resume: args.resume,
        overwrite: args.overwrite,
        init: Some(init),
        inputs,
        plot: &args.plot,
    })
}

/// The checkpoint's config with the classifier's labels, checked to fit in memory at
/// `--batch` and `--max-length`.
///
/// # Errors
/// A run that does not fit in memory.
fn classifier_config(
    config: &RoFormerConfig,
    labels: &[String],
    args: &Args,
) -> anyhow::Result<RoFormerConfig> {
    let mut cfg = config.clone();
    cfg.num_labels = labels.len();
    cfg.id2label = labels.iter().cloned().enumerate().collect();
    let kind = ModelKind::SequenceClassification;
    check_training_memory(&cfg, kind, args.batch, args.max_length).context(
        "the run does not fit in memory: lower --batch or --max-length, or use a smaller model",
    )?;
    Ok(cfg)
}

/// Says on stderr what a fresh run trains on and what its model took from the checkpoint.
fn announce(train: usize, eval: usize, labels: &[String], initialised: &[String], unused: usize) {
    let initialised = match initialised.is_empty() {
        true => "none".into(),
        false => initialised.join(", "),
    };
    eprintln!(
        "{train} training and {eval} dev examples, labels {labels:?}; initialised: \
         {initialised}; unused from the checkpoint: {unused}",
    );
}

/// The checks of the arguments that need no file.
///
/// # Errors
/// A count of 0, a number out of range, a plot name that leaves `--out`, a label given twice.
fn check_args(args: &Args) -> anyhow::Result<()> {
    if args.batch == 0 || args.grad_accum == 0 || args.steps == Some(0) {
        bail!("--batch, --grad-accum and --steps must be at least 1");
    }
    check_numbers(args.lr, args.weight_decay, args.max_grad_norm)?;
    check_plot_name(&args.plot)?;
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
