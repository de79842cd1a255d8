//! The arguments of `experiment long-docs`: the flags, over the task's settings file
//! (`experiments/long-docs-TASK/settings.json`).

use std::path::PathBuf;

use roformer_runner::precision::PrecisionArg;
use roformer_runner::train::masked_lm::Position;
use serde::Deserialize;

use super::task::Task;
use crate::settings::{set, Read, SettingsFile, SettingsFlag};

/// Arguments of `experiment long-docs`.
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// The output directory of `experiment convergence` (its checkpoints are fine-tuned; with
    /// a `--sweep`, each arm's runs at its best rate).
    #[arg(long, default_value = "experiments/convergence")]
    pub from: PathBuf,
    /// The poems, with folders `tang`, `song` and `ci` (scripts/fetch_chinese_poetry.sh).
    #[arg(long, default_value = "data/chinese-poetry/poems")]
    pub corpus: PathBuf,
    /// The output directory [default: experiments/long-docs-TASK].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The task: `collection` (which collection a ten-poem document is from) or `authorship`
    /// (which of two candidates is by the anchor's poet).
    #[arg(long, value_enum, default_value = "collection")]
    pub task: Task,
    /// `--settings`.
    #[command(flatten)]
    pub settings: SettingsFlag,
    /// The arms fine-tuned, comma-separated [default: the settings' arms that --from has runs
    /// of].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub arms: Vec<Position>,
    /// Fine-tuning seeds per arm and length (0, 1, ...); seed s starts from the arm's
    /// pre-trained run number s mod n of its n.
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Max lengths fine-tuned and evaluated at, `[CLS]` and `[SEP]` included.
    #[arg(long, value_delimiter = ',')]
    pub lengths: Vec<usize>,
    /// Poems per document (collection) or per anchor and candidate (authorship).
    #[arg(long)]
    pub poems_per_doc: Option<usize>,
    /// Most documents (collection) or anchors (authorship) per poet.
    #[arg(long)]
    pub max_per_poet: Option<usize>,
    /// Training examples per label.
    #[arg(long)]
    pub train_per_class: Option<usize>,
    /// Dev examples per label.
    #[arg(long)]
    pub dev_per_class: Option<usize>,
    /// Share of poets held out for dev (by hash of the name).
    #[arg(long)]
    pub dev_poets: Option<f64>,
    /// Fine-tuning steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Dev evaluation every this many steps, and at the end [default: the settings', where
    /// none is a tenth of the steps].
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Examples per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Peak learning rate (warm-up a tenth of the steps, then linear decay).
    #[arg(long)]
    pub lr: Option<f64>,
    /// The precision of the matrix products (master weights, optimiser, norms, softmax and
    /// the loss stay f32).
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: PrecisionArg,
    /// Write `results.json`, the figures and `section.md` from the runs finished so far, and
    /// train nothing (a look while another process trains them).
    #[arg(long)]
    pub report_only: bool,
}

/// The settings of a long-docs task (`experiments/long-docs-TASK/settings.json`); each field
/// is also a flag of the same name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Numbers {
    /// The arms fine-tuned when `--arms` is not given: those of them that the pre-training
    /// experiment trained.
    pub arms: Vec<String>,
    /// Fine-tuning seeds per arm and length.
    pub seeds: u64,
    /// Max lengths.
    pub lengths: Vec<usize>,
    /// Poems per document or per text.
    pub poems_per_doc: usize,
    /// Most documents or anchors per poet.
    pub max_per_poet: usize,
    /// Training examples per label.
    pub train_per_class: usize,
    /// Dev examples per label.
    pub dev_per_class: usize,
    /// Share of poets held out for dev.
    pub dev_poets: f64,
    /// Fine-tuning steps.
    pub steps: u64,
    /// Dev evaluation every this many steps (none: a tenth of the steps).
    pub eval_every: Option<u64>,
    /// Examples per step.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
}

/// The arguments of `experiment long-docs`: the flags over the task's settings.
#[derive(Debug, Clone)]
pub struct Args {
    /// `--from`.
    pub from: PathBuf,
    /// `--corpus`.
    pub corpus: PathBuf,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--task`.
    pub task: Task,
    /// `--arms` (none: the settings' arms that `--from` has).
    pub arms: Vec<Position>,
    /// The settings, with the flags given applied.
    pub numbers: Numbers,
    /// `--precision`.
    pub precision: PrecisionArg,
    /// `--report-only`.
    pub report_only: bool,
    /// The settings file, as the section cites it.
    pub cited: String,
}

/// The settings file of `task`.
fn settings_file(task: Task) -> SettingsFile {
    match task {
        Task::Collection => SettingsFile {
            path: "experiments/long-docs-collection/settings.json",
            built_in: include_str!("../../../../experiments/long-docs-collection/settings.json"),
        },
        Task::Authorship => SettingsFile {
            path: "experiments/long-docs-authorship/settings.json",
            built_in: include_str!("../../../../experiments/long-docs-authorship/settings.json"),
        },
    }
}

impl Flags {
    /// The arguments: the task's settings (or `--settings`) with the flags given applied.
    ///
    /// # Errors
    /// Unreadable settings.
    pub fn resolve(&self) -> anyhow::Result<Args> {
        let Read {
            settings: mut numbers,
            cited,
        } = settings_file(self.task).read::<Numbers>(&self.settings)?;
        let n = &mut numbers;
        set(&mut n.seeds, self.seeds);
        if !self.lengths.is_empty() {
            n.lengths.clone_from(&self.lengths);
        }
        set(&mut n.poems_per_doc, self.poems_per_doc);
        set(&mut n.max_per_poet, self.max_per_poet);
        set(&mut n.train_per_class, self.train_per_class);
        set(&mut n.dev_per_class, self.dev_per_class);
        set(&mut n.dev_poets, self.dev_poets);
        set(&mut n.steps, self.steps);
        if self.eval_every.is_some() {
            n.eval_every = self.eval_every;
        }
        set(&mut n.batch, self.batch);
        set(&mut n.lr, self.lr);
        Ok(Args {
            from: self.from.clone(),
            corpus: self.corpus.clone(),
            out: self.out.clone(),
            task: self.task,
            arms: self.arms.clone(),
            numbers,
            precision: self.precision,
            report_only: self.report_only,
            cited,
        })
    }
}
