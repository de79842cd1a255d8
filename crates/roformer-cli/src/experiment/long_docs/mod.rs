//! `experiment long-docs`: the paper's CAIL2019-SCM comparison (512 against 1024 tokens) in
//! small: a classification task whose evidence is spread over a long text, fine-tuned from the
//! models `experiment convergence` pre-trained at 128 tokens, at max length 128 and 512.
//!
//! The task: a document is ten consecutive poems by one poet from one collection, labelled
//! with the collection: Tang shi, Song shi or Song ci. A single poem often does not tell Tang
//! from Song shi; ten do better, so a model that reads more of the document should do better.
//! Poets are split between training and dev by a hash of their name (no poet on both sides),
//! at most `--max-per-poet` documents per poet, and the same number per class (chosen by a
//! hash of the text).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::Context;
use roformer::data::{is_validation, read_corpus, text_hash};
use roformer::optim::Decay;
use roformer::train::classify::ClassifyOptions;
use roformer::train::{ModelStart, TaskOptions, TrainOptions};
use roformer::Precision;
use serde::{Deserialize, Serialize};

use super::figure::{BandFigure, Point, Series, XScale};
use super::pretrain::{finished_runs, RunRecord};
use super::stats::Spread;
use super::{
    check_stopped, command_line, is_done, mark_done, read_done, refuse_duplicates, train_run,
    write_json, write_section,
};
use crate::plot;
use crate::train::checks::{check_numbers, check_vocab_fits};
use crate::train::classify::explain;
use crate::{json, output};

/// The classes: (label, folder of the corpus).
const CLASSES: [(&str, &str); 3] = [
    ("tang-shi", "tang"),
    ("song-shi", "song"),
    ("song-ci", "ci"),
];

/// Arguments of `experiment long-docs`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The output directory of `experiment convergence` (its checkpoints are fine-tuned).
    #[arg(long, default_value = "experiments/convergence")]
    pub from: PathBuf,
    /// The poems, with folders `tang`, `song` and `ci` (scripts/fetch_chinese_poetry.sh).
    #[arg(long, default_value = "data/chinese-poetry/poems")]
    pub corpus: PathBuf,
    /// The output directory.
    #[arg(long, default_value = "experiments/long-docs")]
    pub out: PathBuf,
    /// The arms fine-tuned (position types of the convergence runs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rotary,absolute,sinusoidal"
    )]
    pub arms: Vec<String>,
    /// Max lengths fine-tuned and evaluated at, [CLS] and [SEP] included.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    pub lengths: Vec<usize>,
    /// Poems per document.
    #[arg(long, default_value_t = 10)]
    pub poems_per_doc: usize,
    /// Most documents per poet.
    #[arg(long, default_value_t = 3)]
    pub max_per_poet: usize,
    /// Training documents per class.
    #[arg(long, default_value_t = 300)]
    pub train_per_class: usize,
    /// Dev documents per class.
    #[arg(long, default_value_t = 100)]
    pub dev_per_class: usize,
    /// Share of poets held out for dev (by hash of the name).
    #[arg(long, default_value_t = 0.25)]
    pub dev_poets: f64,
    /// Fine-tuning steps.
    #[arg(long, default_value_t = 120)]
    pub steps: u64,
    /// Documents per step.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Peak learning rate (warm-up a tenth of the steps, then linear decay).
    #[arg(long, default_value_t = 5e-4)]
    pub lr: f64,
}

/// A labelled document of the dataset.
#[derive(Debug, Serialize, Deserialize)]
struct LabelledDoc {
    text: String,
    label: String,
}

/// How the dataset came out.
#[derive(Debug, Serialize)]
pub struct DatasetStats {
    /// (label, training documents, dev documents).
    pub classes: Vec<(String, usize, usize)>,
    /// Mean characters per document.
    pub mean_chars: f64,
}

/// Builds the dataset into `out/data/{train,dev}.jsonl` (once).
fn build_dataset(args: &Args, out: &Path) -> anyhow::Result<(PathBuf, PathBuf, DatasetStats)> {
    let dir = out.join("data");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (train_path, dev_path) = (dir.join("train.jsonl"), dir.join("dev.jsonl"));
    let mut train = Vec::new();
    let mut dev = Vec::new();
    let mut classes = Vec::new();
    for (label, folder) in CLASSES {
        let path = args.corpus.join(folder);
        let documents = read_corpus(&path, None).with_context(|| {
            format!(
                "{}: fetch the corpus with scripts/fetch_chinese_poetry.sh",
                path.display()
            )
        })?;
        let mut by_poet: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in documents {
            if let Some(author) = d.author.filter(|a| !a.trim().is_empty()) {
                by_poet.entry(author).or_default().push(d.text);
            }
        }
        let (mut tr, mut dv) = (Vec::new(), Vec::new());
        for (poet, poems) in &by_poet {
            let side = if is_validation(poet, args.dev_poets) {
                &mut dv
            } else {
                &mut tr
            };
            for group in poems
                .chunks_exact(args.poems_per_doc)
                .take(args.max_per_poet)
            {
                side.push(group.concat());
            }
        }
        for (side, want) in [
            (&mut tr, args.train_per_class),
            (&mut dv, args.dev_per_class),
        ] {
            side.sort_by_key(|t| text_hash(t));
            side.truncate(want);
        }
        classes.push((label.to_string(), tr.len(), dv.len()));
        train.extend(tr.into_iter().map(|text| LabelledDoc {
            text,
            label: label.into(),
        }));
        dev.extend(dv.into_iter().map(|text| LabelledDoc {
            text,
            label: label.into(),
        }));
    }
    // Classes interleaved by a hash, not in blocks.
    train.sort_by_key(|d| text_hash(&d.text));
    dev.sort_by_key(|d| text_hash(&d.text));
    let chars: usize = train
        .iter()
        .chain(&dev)
        .map(|d| d.text.chars().count())
        .sum();
    let stats = DatasetStats {
        classes,
        mean_chars: chars as f64 / (train.len() + dev.len()).max(1) as f64,
    };
    for (path, docs) in [(&train_path, &train), (&dev_path, &dev)] {
        anyhow::ensure!(
            !docs.is_empty(),
            "no document of {} poems for {}",
            args.poems_per_doc,
            path.display()
        );
        let mut text = String::new();
        for d in docs {
            text.push_str(&json::to_string(d)?);
            text.push('\n');
        }
        output::write(path, text.as_bytes())?;
    }
    Ok((train_path, dev_path, stats))
}

/// What a finished fine-tuning run recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FineTuneRecord {
    /// The arm.
    pub arm: String,
    /// The max length.
    pub length: usize,
    /// The seed (of pre-training and fine-tuning).
    pub seed: u64,
    /// Dev accuracy at the end.
    pub accuracy: f64,
    /// Dev macro-F1 at the end.
    pub macro_f1: f64,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// One arm at one length.
#[derive(Debug, Serialize)]
pub struct Cell {
    /// The arm.
    pub arm: String,
    /// The max length.
    pub length: usize,
    /// Dev accuracy over seeds.
    pub accuracy: Spread,
    /// Dev macro-F1 over seeds.
    pub macro_f1: Spread,
}

/// `results.json`.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command.
    pub command: String,
    /// The dataset.
    pub dataset: DatasetStats,
    /// Arms by lengths.
    pub cells: Vec<Cell>,
    /// The runs.
    pub runs: Vec<FineTuneRecord>,
}

/// Runs `experiment long-docs`.
///
/// # Errors
/// Missing pre-training runs, unreadable corpus, the runs' errors, file errors.
pub fn run(args: &Args, stop: &AtomicBool) -> anyhow::Result<()> {
    check(args)?;
    let (train, dev, dataset) = build_dataset(args, &args.out)?;
    let pretrained = finished_runs(&args.from)?;
    let records = fine_tune_all(args, &pretrained, (&train, &dev), stop)?;
    let cells = cells(args, &records);
    let results = Results {
        command: command_line(),
        dataset,
        cells,
        runs: records,
    };
    write_json(&args.out, "results.json", &results)?;
    let figure_path = args.out.join("long-docs.png");
    plot::save(&figure(args, &results), &figure_path, (900, 560))?;
    let table = table(&results);
    let classes: Vec<String> = results
        .dataset
        .classes
        .iter()
        .map(|(l, t, d)| format!("{l} {t}/{d}"))
        .collect();
    // The share of an average document that fits at each length ([CLS] and [SEP] aside; one
    // token per character).
    let shares: Vec<String> = args
        .lengths
        .iter()
        .map(|&l| {
            let share = (l.saturating_sub(2) as f64 / results.dataset.mean_chars).min(1.0);
            format!("{l} tokens hold {:.0} % of one", 100.0 * share)
        })
        .collect();
    let section = format!(
        "### 3. Long documents: 128 against 512 tokens\n\n```sh\n{}\n```\n\n\
         Documents of {} consecutive poems by one poet, labelled Tang shi, Song shi or Song ci \
         (training/dev documents per class: {}; poets split by a hash of the name; {:.0} \
         characters per document on average: {}). Each \
         pre-trained model of experiment 1 is fine-tuned with its own seed: {} steps of {} \
         documents, AdamW lr {} (warm-up a tenth, linear decay), evaluated on dev at the end.\n\n\
         {}\n![dev accuracy]({})\n",
        results.command,
        args.poems_per_doc,
        classes.join(", "),
        results.dataset.mean_chars,
        shares.join(", "),
        args.steps,
        args.batch,
        args.lr,
        table,
        figure_path.display()
    );
    let section_path = write_section(&args.out, &section)?;
    println!("{table}");
    println!("section: {}", section_path.display());
    Ok(())
}

/// The checks of the arguments, before anything is read.
///
/// # Errors
/// A count of 0, a learning rate that is not a finite number above 0, an arm or a length
/// named twice.
fn check(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.poems_per_doc >= 1,
        "--poems-per-doc must be at least 1"
    );
    anyhow::ensure!(
        args.steps >= 1 && args.batch >= 1,
        "--steps and --batch must be at least 1"
    );
    check_numbers(args.lr, 0.01, 1.0)?;
    refuse_duplicates("--arms", &args.arms)?;
    refuse_duplicates("--lengths", &args.lengths)
}

/// Fine-tunes every pre-trained seed's arms at every length (seed by seed), skipping
/// finished runs: their records, in that order.
///
/// # Errors
/// An arm without a finished pre-training run of a seed, the runs' errors, a stop by Ctrl-C.
fn fine_tune_all(
    args: &Args,
    pretrained: &[RunRecord],
    (train, dev): (&Path, &Path),
    stop: &AtomicBool,
) -> anyhow::Result<Vec<FineTuneRecord>> {
    let mut seeds: Vec<u64> = pretrained.iter().map(|r| r.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    let total = seeds.len() * args.arms.len() * args.lengths.len();
    let mut records = Vec::new();
    for &seed in &seeds {
        for arm in &args.arms {
            let Some(base) = pretrained.iter().find(|r| r.seed == seed && &r.arm == arm) else {
                anyhow::bail!(
                    "no finished {arm} run of seed {seed} in {}",
                    args.from.display()
                );
            };
            for &length in &args.lengths {
                let dir = args
                    .out
                    .join("runs")
                    .join(format!("{arm}-L{length}-s{seed}"));
                if is_done(&dir) {
                    records.push(read_done::<FineTuneRecord>(&dir)?);
                    continue;
                }
                eprintln!(
                    "[{}/{total}] fine-tuning {arm} at {length} tokens, seed {seed}",
                    records.len() + 1
                );
                let started = Instant::now();
                let run = (base.dir.as_path(), arm.as_str());
                let (accuracy, macro_f1) =
                    fine_tune(args, run, (train, dev), (length, seed), &dir, stop)?;
                check_stopped(stop)?;
                let record = FineTuneRecord {
                    arm: arm.clone(),
                    length,
                    seed,
                    accuracy,
                    macro_f1,
                    seconds: started.elapsed().as_secs_f64(),
                };
                mark_done(&dir, &record)?;
                records.push(record);
            }
        }
    }
    Ok(records)
}

/// Each arm at each length: its dev accuracy and macro-F1 over the seeds.
fn cells(args: &Args, records: &[FineTuneRecord]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for arm in &args.arms {
        for &length in &args.lengths {
            let of = |f: fn(&FineTuneRecord) -> f64| {
                Spread::of(
                    records
                        .iter()
                        .filter(|r| &r.arm == arm && r.length == length)
                        .map(f)
                        .collect(),
                )
            };
            if let (Some(accuracy), Some(macro_f1)) = (of(|r| r.accuracy), of(|r| r.macro_f1)) {
                cells.push(Cell {
                    arm: arm.clone(),
                    length,
                    accuracy,
                    macro_f1,
                });
            }
        }
    }
    cells
}

/// What an experiment's fine-tuning run records in its `run.json`.
#[derive(Debug, Serialize)]
struct FineTuneRun<'a> {
    /// The arm.
    arm: &'a str,
    /// The max length.
    length: usize,
    /// The seed.
    seed: u64,
    /// The loss plot's file name.
    plot: &'static str,
}

/// Fine-tunes the pre-trained run `base` to classify the documents of `data` (training, dev)
/// at max length `length` with seed `seed`, into `dir`: the dev (accuracy, macro-F1) at the
/// end.
///
/// # Errors
/// The run's errors, and a run without a dev evaluation.
fn fine_tune(
    args: &Args,
    (base, arm): (&Path, &str),
    data: (&Path, &Path),
    (length, seed): (usize, u64),
    dir: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<(f64, f64)> {
    let init = base.join("checkpoint");
    let start = ModelStart::from_checkpoint(&init)?;
    check_vocab_fits(&init, start.tokenizer.vocab_size(), start.config.vocab_size)?;
    let task = ClassifyOptions {
        train: data.0.to_path_buf(),
        eval: Some(data.1.to_path_buf()),
        labels: CLASSES.iter().map(|(l, _)| l.to_string()).collect(),
        max_length: length,
        batch_size: args.batch,
        seed,
    };
    let options = TrainOptions {
        out: dir.to_path_buf(),
        model: &start,
        task: TaskOptions::Classify(task),
        steps: Some(args.steps),
        grad_accum: 1,
        lr: args.lr,
        warmup: args.steps / 10,
        decay: Decay::Linear,
        weight_decay: 0.01,
        max_grad_norm: Some(1.0),
        seed,
        eval_every: 0,
        save_every: 0,
        precision: Precision::F32,
        resume: false,
        save_hook: None,
        dump: None,
    };
    let inputs = vec![
        ("--init", init.as_path()),
        ("--train", data.0),
        ("--eval", data.1),
    ];
    let record = FineTuneRun {
        arm,
        length,
        seed,
        plot: "loss.png",
    };
    let finished = train_run(&options, inputs, &record, "Classifier", stop, explain)?;
    let eval = finished.last_eval.filter(|e| e.macro_f1.is_some());
    let eval = eval.with_context(|| format!("{}: no dev evaluation", dir.display()))?;
    Ok((eval.accuracy, eval.macro_f1.unwrap_or(0.0)))
}

/// Dev accuracy against max length, one line per arm.
fn figure(args: &Args, results: &Results) -> BandFigure {
    BandFigure {
        title: "Ten-poem documents: dev accuracy by max length".into(),
        x_desc: "max length (tokens)".into(),
        y_desc: "dev accuracy".into(),
        x_scale: XScale::Log2,
        series: args
            .arms
            .iter()
            .map(|arm| Series {
                name: arm.clone(),
                points: results
                    .cells
                    .iter()
                    .filter(|c| &c.arm == arm)
                    .map(|c| Point {
                        x: c.length as f64,
                        mean: c.accuracy.mean,
                        min: c.accuracy.min,
                        max: c.accuracy.max,
                    })
                    .collect(),
            })
            .collect(),
        reference: Some((1.0 / CLASSES.len() as f64, "chance".into())),
        legend: plotters::prelude::SeriesLabelPosition::MiddleRight,
    }
}

/// The Markdown table: a row per arm and length.
fn table(results: &Results) -> String {
    let mut s = "| arm | max length | dev accuracy, mean ± std (min–max) | dev macro-F1 |\n\
                 |---|---:|---|---|\n"
        .to_string();
    for c in &results.cells {
        s += &format!(
            "| {} | {} | {} | {} |\n",
            c.arm,
            c.length,
            c.accuracy.show(3),
            c.macro_f1.show(3)
        );
    }
    s
}
