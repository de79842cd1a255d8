//! `roformer train classify`: fine-tunes a sequence classifier from a checkpoint on JSON-lines
//! examples, keeps the best model by dev macro-F1, and `--resume`s like `train mlm`.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::bail;
use roformer::train::checkpoint::SaveStep;
use roformer::train::classify::{labels_of, ClassifyOptions};
use roformer::train::{ModelStart, Resumable, TaskOptions, TrainOptions};
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

use super::args::{with_default, CommandFlags, RunArgs, DEFAULT_PLOT};
use super::resume::{resolve, Flags, Settings, VERSION};
use super::save_fault::FaultInSave;

/// Arguments of `roformer train classify`. A flag not given is `None` (or empty) here: a new
/// run takes the library's default, a resume the run's value ([`super::resume`]).
/// Deserialised from the flat `run.json` of earlier versions.
#[derive(Debug, Clone, clap::Args, Deserialize)]
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
    #[arg(long, help = with_default(
        "Most tokens per example (a pair is cut longest first).",
        ClassifyOptions::default().max_length
    ))]
    pub max_length: Option<usize>,
    /// Examples per micro-batch.
    #[arg(long, help = with_default("Examples per micro-batch.", ClassifyOptions::default().batch_size))]
    pub batch: Option<usize>,
    /// Optimisation steps (default: 3 epochs).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, value_parser = parse_lr, allow_negative_numbers = true, help = with_default(
        "Peak learning rate (a finite number above 0).",
        TrainOptions::FINE_TUNING.lr
    ))]
    pub lr: Option<f64>,
    /// Seed of the head's initialisation, example order and dropout.
    #[arg(long, help = with_default(
        "Seed of the head's initialisation, example order and dropout.",
        TrainOptions::FINE_TUNING.seed
    ))]
    pub seed: Option<u64>,
    // What every training command takes.
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
}

/// The checkpoint a `train classify` run fine-tunes, as its flags chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// `--init`.
    pub init: Option<PathBuf>,
}

impl Resumable for Model {
    /// None: a resume continues the run's own checkpoint.
    const MAY_CHANGE: &'static [&'static str] = &[];
}

/// The settings of a `train classify` run.
type ClassifySettings = Settings<Model, ClassifyOptions>;

impl Flags for Args {
    type Model = Model;
    type Data = ClassifyOptions;

    fn defaults(&self) -> ClassifySettings {
        Settings {
            version: VERSION,
            out: self.run.out.clone(),
            model: Model { init: None },
            data: ClassifyOptions::default(),
            train: TrainOptions::FINE_TUNING,
            plot: PathBuf::from(DEFAULT_PLOT),
        }
    }

    fn settings_over(&self, base: &ClassifySettings) -> ClassifySettings {
        let flags = CommandFlags {
            steps: self.steps,
            lr: self.lr,
            seed: self.seed,
        };
        let data = &base.data;
        Settings {
            version: base.version,
            out: base.out.clone(),
            model: Model {
                init: self.init.clone().or(base.model.init.clone()),
            },
            data: ClassifyOptions {
                train: self.train.clone().unwrap_or_else(|| data.train.clone()),
                eval: self.eval.clone().or(data.eval.clone()),
                labels: if self.labels.is_empty() {
                    data.labels.clone()
                } else {
                    self.labels.clone()
                },
                max_length: self.max_length.unwrap_or(data.max_length),
                batch_size: self.batch.unwrap_or(data.batch_size),
                seed: self.seed.unwrap_or(data.seed),
            },
            train: self.run.options_over(&base.train, flags),
            plot: self.run.plot_over(&base.plot),
        }
    }
}

/// Runs `roformer train classify`.
///
/// # Errors
/// Bad arguments or examples, a checkpoint that does not load, a non-finite loss, file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let out = args.run.out.clone();
    let (mut settings, recorded) = resolve(&args, &out, args.run.resume)?;
    check_settings(&settings)?;
    let (Some(init), false) = (
        &settings.model.init,
        settings.data.train.as_os_str().is_empty(),
    ) else {
        bail!("give --init DIR and --train FILE");
    };
    let paths = prepare_out(&args.run, &settings, init)?;
    let hook = FaultInSave::from_env()?.map(|f| f.hook(stop));
    let start = model_start(paths.weights.as_deref().unwrap_or(init))?;
    settings.data.labels = labels_for(&settings.data)?;
    let task = TaskOptions::Classify(settings.data.clone());
    let save_hook = hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep));
    let run = args.run.run(&start, task, &settings.train, save_hook);
    let record = |print: &Fingerprint| write_record(&out, &settings, print);
    let view = args
        .run
        .view("Classifier", &settings.plot, recorded, stop, &record);
    let result = train(&run, view, explain);
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
fn prepare_out(run: &RunArgs, s: &ClassifySettings, init: &Path) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = vec![("--init", init), ("--train", &s.data.train)];
    inputs.extend(s.data.eval.as_deref().map(|p| ("--eval", p)));
    open_out_dir(&OutRequest {
        out: &run.out,
        resume: run.resume,
        overwrite: run.overwrite,
        init: Some(init),
        inputs,
        plot: &s.plot,
    })
}

/// The checks of the settings that need no file.
///
/// # Errors
/// A count of 0, a number out of range, a plot name that leaves `--out`, a label given twice.
fn check_settings(s: &ClassifySettings) -> anyhow::Result<()> {
    let train = &s.train;
    if s.data.batch_size == 0 || train.grad_accum == 0 || train.steps == Some(0) {
        bail!("--batch, --grad-accum and --steps must be at least 1");
    }
    check_numbers(
        train.lr,
        train.weight_decay,
        train.max_grad_norm.unwrap_or(0.0),
    )?;
    check_plot_name(&s.plot)?;
    check_labels(&s.data.labels)
}

/// The label names: those given (or recorded), or those of the training examples; at least 2.
///
/// # Errors
/// Unreadable examples, and fewer than 2 labels.
fn labels_for(data: &ClassifyOptions) -> anyhow::Result<Vec<String>> {
    let labels = if data.labels.is_empty() {
        labels_of(&data.train)?
    } else {
        data.labels.clone()
    };
    if labels.len() < 2 {
        bail!("a classifier needs at least 2 labels, got {labels:?}");
    }
    Ok(labels)
}
