//! `experiment long-docs`: the paper's CAIL2019-SCM comparison (512 against 1024 tokens) in
//! small: classification tasks whose evidence is spread over a long text, fine-tuned from the
//! models `experiment convergence` pre-trained at 128 tokens, at max lengths 128 and 512.
//!
//! Two tasks, built from the poems of the corpus (`data.rs` gives every choice):
//!
//! - `--task collection`: a document is ten consecutive poems by one poet, labelled with its
//!   collection: Tang shi, Song shi or Song ci. A single poem often does not tell Tang from
//!   Song shi; ten do better, so a model that reads more of the document should do better.
//! - `--task authorship`, closer to CAIL2019-SCM (which of two cases is like a third): given
//!   an anchor of three poems by poet X, which of two candidates of three poems each is X's
//!   (the other is by a poet Y of the same collection)? The input is
//!   `[CLS] anchor [SEP] first candidate [SEP] second candidate [SEP]` (token types 0, then
//!   1), each text cut to an equal share of the max length: at 128 tokens the model sees about
//!   40 characters of each (under one poem), at 512 about 170 (most of the three), so the
//!   evidence of style is spread over the texts and a longer input shows more of it.
//!
//! In both, poets are split between training and dev by a hash of their name (no poet on
//! both sides), and a dataset that cannot have the examples asked for is refused, saying
//! what it could have.
//!
//! Every arm is fine-tuned with `--seeds` seeds at every length; fine-tuning seed `s` starts
//! from the arm's pre-trained run number `s mod n` of its `n` (by seed), so 5 fine-tuning
//! seeds use 3 pre-trained seeds as 0, 1, 2, 0, 1 (with another head and data order). Dev is
//! evaluated every `--eval-every` steps and each run keeps its curve (loss, accuracy,
//! macro-F1, confusion matrix); a run whose predictions at the end use fewer labels than the
//! task has, or never recall a label, **collapsed** (the two-class solution of the collection
//! task), and the results count such runs.

mod baseline;
mod data;
mod report;
mod runs;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use roformer::tokenizer::TokenizerConfig;
use serde::{Deserialize, Serialize};

use super::pretrain::{arm_name, finished_runs};
use super::{command_line, refuse_duplicates, write_json, write_section};
use data::{
    authorship_dataset, collection_dataset, read_collections, write_dataset, Dataset, DatasetStats,
    Sizes,
};
use report::Results;
use roformer_runner::output::outln;
use roformer_runner::plot;
use roformer_runner::precision::PrecisionArg;
use roformer_runner::train::checks::check_numbers;
use roformer_runner::train::masked_lm::Position;
use runs::{arms_of, fine_tune_all, finished_records, plan, Settings};

/// `--task`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Ten-poem documents labelled Tang shi, Song shi or Song ci.
    Collection,
    /// Which of two candidates is by the anchor's poet.
    Authorship,
}

impl Task {
    /// `collection` or `authorship`.
    fn name(self) -> &'static str {
        match self {
            Task::Collection => "collection",
            Task::Authorship => "authorship",
        }
    }

    /// The figures' title.
    fn title(self) -> &'static str {
        match self {
            Task::Collection => "Collection task",
            Task::Authorship => "Authorship task",
        }
    }

    /// The section's heading.
    fn heading(self) -> &'static str {
        match self {
            Task::Collection => "3. Long documents: Tang shi, Song shi or Song ci",
            Task::Authorship => {
                "3b. Long documents: which of two candidates is by the anchor's poet"
            }
        }
    }

    /// Poems per document (collection) or per text (authorship) when not given.
    fn default_poems(self) -> usize {
        match self {
            Task::Collection => 10,
            Task::Authorship => 3,
        }
    }

    /// Most documents or anchors per poet when not given: authorship needs more poets'
    /// anchors to reach its training examples.
    fn default_max_per_poet(self) -> usize {
        match self {
            Task::Collection => 10,
            Task::Authorship => 20,
        }
    }

    /// Training examples per label when not given. Authorship's 8000 are one pass at the
    /// default 500 steps of 16: with 1000, every run learnt the training pairs by heart
    /// (training loss 0.005) and stayed at chance on dev.
    fn default_train_per_class(self) -> usize {
        match self {
            Task::Collection => 500,
            Task::Authorship => 4000,
        }
    }

    /// Dev examples per label when not given: at least 1000 in all.
    fn default_dev_per_class(self) -> usize {
        match self {
            Task::Collection => 350,
            Task::Authorship => 500,
        }
    }

    /// The shortest max length: room for `[CLS]`, `[SEP]` and a token per text.
    fn min_length(self) -> usize {
        match self {
            Task::Collection => 3,
            Task::Authorship => 7,
        }
    }

    /// Builds the task's dataset.
    fn build(self, collections: &[data::Collection], sizes: &Sizes) -> anyhow::Result<Dataset> {
        match self {
            Task::Collection => collection_dataset(collections, sizes),
            Task::Authorship => authorship_dataset(collections, sizes),
        }
    }
}

/// Arguments of `experiment long-docs`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
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
    /// The arms fine-tuned, comma-separated [default: rotary, absolute, alibi, t5 and
    /// sinusoidal, those that --from has runs of].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub arms: Vec<Position>,
    /// Fine-tuning seeds per arm and length (0, 1, ...); seed s starts from the arm's
    /// pre-trained run number s mod n of its n.
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// Max lengths fine-tuned and evaluated at, `[CLS]` and `[SEP]` included.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    pub lengths: Vec<usize>,
    /// Poems per document (collection) or per anchor and candidate (authorship) [default: 10
    /// for collection, 3 for authorship].
    #[arg(long)]
    pub poems_per_doc: Option<usize>,
    /// Most documents (collection) or anchors (authorship) per poet [default: 10 for
    /// collection, 20 for authorship].
    #[arg(long)]
    pub max_per_poet: Option<usize>,
    /// Training examples per label [default: 500 for collection, 4000 for authorship (one
    /// pass at the default steps and batch)].
    #[arg(long)]
    pub train_per_class: Option<usize>,
    /// Dev examples per label [default: 350 for collection (1050 documents), 500 for
    /// authorship (1000 examples)].
    #[arg(long)]
    pub dev_per_class: Option<usize>,
    /// Share of poets held out for dev (by hash of the name).
    #[arg(long, default_value_t = 0.4)]
    pub dev_poets: f64,
    /// Fine-tuning steps.
    #[arg(long, default_value_t = 500)]
    pub steps: u64,
    /// Dev evaluation every this many steps, and at the end [default: a tenth of --steps].
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Examples per step.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Peak learning rate (warm-up a tenth of the steps, then linear decay).
    #[arg(long, default_value_t = 5e-4)]
    pub lr: f64,
    /// The precision of the matrix products (master weights, optimiser, norms, softmax and
    /// the loss stay f32).
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: PrecisionArg,
    /// Write `results.json`, the figures and `section.md` from the runs finished so far, and
    /// train nothing (a look while another process trains them).
    #[arg(long)]
    pub report_only: bool,
}

impl Args {
    /// `--out`, or `experiments/long-docs-TASK`.
    fn out_dir(&self) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("experiments/long-docs-{}", self.task.name())))
    }

    /// The settings every run shares, defaults filled in.
    fn settings(&self) -> Settings {
        Settings {
            task: self.task,
            sizes: Sizes {
                poems_per_doc: self
                    .poems_per_doc
                    .unwrap_or_else(|| self.task.default_poems()),
                max_per_poet: self
                    .max_per_poet
                    .unwrap_or_else(|| self.task.default_max_per_poet()),
                train_per_class: self
                    .train_per_class
                    .unwrap_or_else(|| self.task.default_train_per_class()),
                dev_per_class: self
                    .dev_per_class
                    .unwrap_or_else(|| self.task.default_dev_per_class()),
                dev_poets: self.dev_poets,
            },
            steps: self.steps,
            eval_every: self.eval_every.unwrap_or((self.steps / 10).max(1)),
            batch: self.batch,
            lr: self.lr,
            precision: self.precision,
        }
    }
}

/// Runs `experiment long-docs`.
///
/// # Errors
/// Bad arguments, missing pre-training runs, an unreadable corpus or one without the examples
/// asked for, the runs' errors, file errors.
pub fn run(args: &Args, stop: &AtomicBool) -> anyhow::Result<()> {
    check(args)?;
    let (out, settings) = (args.out_dir(), args.settings());
    let pretrained = finished_runs(&args.from)?;
    let asked: Vec<String> = args.arms.iter().map(|&a| arm_name(a).into()).collect();
    let arms = arms_of(&asked, &pretrained, &args.from)?;
    let plan = plan(&arms, &args.lengths, args.seeds, &pretrained);
    let first = plan.first().context("no run to do")?;
    // The runs share the experiment's vocabulary, and so its [SEP].
    let tokenizer = TokenizerConfig::from_dir(&first.base.dir.join("checkpoint"))?;
    let collections = read_collections(&args.corpus)?;
    let dataset = args.task.build(&collections, &settings.sizes)?;
    drop(collections);
    // The files the runs read (none for a report).
    let mut files = Vec::new();
    let to_write: &[usize] = if args.report_only { &[] } else { &args.lengths };
    for &length in to_write {
        let written = write_dataset(&dataset, length, &tokenizer.sep_token, &out.join("data"))?;
        files.push((length, written));
    }
    let data = |length: usize| {
        (files.iter())
            .find(|(l, _)| *l == length)
            .map(|(_, f)| f.clone())
    };
    let stats = DatasetStats::of(&dataset);
    let chance = report::Chance::of(&stats.labels.iter().map(|l| l.2).collect::<Vec<_>>());
    let baselines = baseline::baselines(args.task, &dataset, &args.lengths);
    // The command that trains these runs: a report names it, not itself.
    let command = command_line().replace(" --report-only", "");
    let results = |records: &[runs::FineTuneRecord]| {
        let cells = report::cells(&arms, &args.lengths, records);
        Results {
            command: command.clone(),
            verdicts: report::verdicts(&cells, records, &args.lengths, chance),
            chance,
            cells,
            baselines: baselines.clone(),
            settings: settings.clone(),
            seeds: args.seeds,
            labels: dataset.labels.clone(),
            dataset: stats.clone(),
            pending: plan.len().saturating_sub(records.len()),
            runs: records.to_vec(),
        }
    };
    // Reported after every run, so that a long experiment shows its finished runs.
    let partial = |records: &[runs::FineTuneRecord]| {
        write_report(args, &arms, &results(records), &out).map(|_| ())
    };
    let labels = &dataset.labels;
    let records = if args.report_only {
        finished_records(&plan, &settings, &out)?
    } else {
        fine_tune_all(&plan, &data, &settings, (&out, labels), stop, &partial)?
    };
    let results = results(&records);
    let section = write_report(args, &arms, &results, &out)?;
    outln!("{}", report::table(&results))?;
    for v in &results.verdicts {
        outln!("{}", v.text)?;
    }
    outln!("section: {}", section.display())?;
    Ok(())
}

/// Writes `results.json`, the figures and `section.md` into `out`: the section's path.
fn write_report(
    args: &Args,
    arms: &[String],
    results: &Results,
    out: &Path,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    write_json(out, "results.json", results)?;
    let size = (900, 560);
    let by_length = out.join("long-docs.png");
    plot::save(
        &report::by_length_figure(results, args.task, arms),
        &by_length,
        size,
    )?;
    let mut figures = vec![by_length];
    for &length in &args.lengths {
        let path = out.join(format!("long-docs-curves-L{length}.png"));
        plot::save(
            &report::curves_figure(results, args.task, arms, length),
            &path,
            size,
        )?;
        figures.push(path);
    }
    let section = report::section(results, args.task, &args.lengths, &figures);
    write_section(out, &section)
}

/// The checks of the arguments, before anything is read.
///
/// # Errors
/// A count of 0, a share of poets outside (0, 1), a length too short for the task, a
/// learning rate that is not a finite number above 0, an arm or a length named twice.
fn check(args: &Args) -> anyhow::Result<()> {
    let s = args.settings();
    let counts: [(&str, u64); 8] = [
        ("--seeds", args.seeds),
        ("--steps", s.steps),
        ("--eval-every", s.eval_every),
        ("--batch", s.batch as u64),
        ("--poems-per-doc", s.sizes.poems_per_doc as u64),
        ("--max-per-poet", s.sizes.max_per_poet as u64),
        ("--train-per-class", s.sizes.train_per_class as u64),
        ("--dev-per-class", s.sizes.dev_per_class as u64),
    ];
    for (flag, value) in counts {
        anyhow::ensure!(value >= 1, "{flag} must be at least 1");
    }
    anyhow::ensure!(
        s.sizes.dev_poets > 0.0 && s.sizes.dev_poets < 1.0,
        "--dev-poets {} must be above 0 and below 1 (the share of poets held out for dev)",
        s.sizes.dev_poets
    );
    let min = args.task.min_length();
    if let Some(&short) = args.lengths.iter().find(|&&l| l < min) {
        anyhow::bail!(
            "--lengths {short} is too short for --task {}: at least {min} ([CLS], [SEP] and a              token per text)",
            args.task.name()
        );
    }
    anyhow::ensure!(!args.lengths.is_empty(), "--lengths names no length");
    check_numbers(args.lr, 0.01, 1.0)?;
    let arms: Vec<&str> = args.arms.iter().map(|&a| arm_name(a)).collect();
    refuse_duplicates("--arms", &arms)?;
    refuse_duplicates("--lengths", &args.lengths)
}
