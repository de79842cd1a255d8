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

mod args;
mod baseline;
mod data;
mod report;
mod runs;
mod task;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use roformer::tokenizer::TokenizerConfig;

use super::pretrain::{arm_name, finished_runs};
use super::{command_line, refuse_duplicates, write_json, write_section};
use data::{read_collections, write_dataset, DatasetStats, Sizes};
use report::Results;
use roformer_runner::output::outln;
use roformer_runner::plot;
use roformer_runner::train::checks::check_numbers;
use runs::{arms_of, fine_tune_all, finished_records, plan, Settings};

use args::Args;
pub use args::Flags;

impl Args {
    /// `--out`, or `experiments/long-docs-TASK`.
    fn out_dir(&self) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("experiments/long-docs-{}", self.task.name())))
    }

    /// The settings every run shares, defaults filled in.
    fn settings(&self) -> Settings {
        let n = &self.numbers;
        Settings {
            task: self.task,
            sizes: Sizes {
                poems_per_doc: n.poems_per_doc,
                max_per_poet: n.max_per_poet,
                train_per_class: n.train_per_class,
                dev_per_class: n.dev_per_class,
                dev_poets: n.dev_poets,
            },
            steps: n.steps,
            eval_every: n.eval_every.unwrap_or((n.steps / 10).max(1)),
            batch: n.batch,
            lr: n.lr,
            precision: self.precision,
        }
    }
}

/// Runs `experiment long-docs`.
///
/// # Errors
/// Bad arguments, missing pre-training runs, an unreadable corpus or one without the examples
/// asked for, the runs' errors, file errors.
pub fn run(flags: &Flags, stop: &AtomicBool) -> anyhow::Result<()> {
    let args = &flags.resolve()?;
    check(args)?;
    let (out, settings) = (args.out_dir(), args.settings());
    let pretrained = finished_runs(&args.from)?;
    let asked: Vec<String> = args.arms.iter().map(|&a| arm_name(a).into()).collect();
    let arms = arms_of((&asked, &args.numbers.arms), &pretrained, &args.from)?;
    let plan = plan(
        &arms,
        &args.numbers.lengths,
        args.numbers.seeds,
        &pretrained,
    );
    let first = plan.first().context("no run to do")?;
    // The runs share the experiment's vocabulary, and so its [SEP].
    let tokenizer = TokenizerConfig::from_dir(&first.base.dir.join("checkpoint"))?;
    let collections = read_collections(&args.corpus)?;
    let dataset = args.task.build(&collections, &settings.sizes)?;
    drop(collections);
    // The files the runs read (none for a report).
    let mut files = Vec::new();
    let to_write: &[usize] = if args.report_only {
        &[]
    } else {
        &args.numbers.lengths
    };
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
    let baselines = baseline::baselines(args.task, &dataset, &args.numbers.lengths);
    // The command that trains these runs: a report names it, not itself.
    let command = command_line().replace(" --report-only", "");
    let results = |records: &[runs::FineTuneRecord]| {
        let cells = report::cells(&arms, &args.numbers.lengths, records);
        Results {
            command: command.clone(),
            verdicts: report::verdicts(&cells, records, &args.numbers.lengths, chance),
            chance,
            cells,
            baselines: baselines.clone(),
            settings: settings.clone(),
            seeds: args.numbers.seeds,
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
    for &length in &args.numbers.lengths {
        let path = out.join(format!("long-docs-curves-L{length}.png"));
        plot::save(
            &report::curves_figure(results, args.task, arms, length),
            &path,
            size,
        )?;
        figures.push(path);
    }
    let section = report::section(
        results,
        (args.task, &args.cited),
        &args.numbers.lengths,
        &figures,
    );
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
        ("--seeds", args.numbers.seeds),
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
    if let Some(&short) = args.numbers.lengths.iter().find(|&&l| l < min) {
        anyhow::bail!(
            "--lengths {short} is too short for --task {}: at least {min} ([CLS], [SEP] and a              token per text)",
            args.task.name()
        );
    }
    anyhow::ensure!(
        !args.numbers.lengths.is_empty(),
        "--lengths names no length"
    );
    check_numbers(args.numbers.lr, 0.01, 1.0)?;
    let arms: Vec<&str> = args.arms.iter().map(|&a| arm_name(a)).collect();
    refuse_duplicates("--arms", &arms)?;
    refuse_duplicates("--lengths", &args.numbers.lengths)
}
