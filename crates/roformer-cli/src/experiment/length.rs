//! `experiment length`: the models `experiment convergence` pre-trained on 128-token blocks,
//! evaluated on validation blocks of other lengths (64 to 1024): does the MLM loss keep
//! falling with more context past the training length (rotary, sinusoidal), or break
//! (absolute: its untrained table rows up to 512, nothing past it)?
//!
//! Every model sees the same blocks and masks at a length (the validation documents packed
//! into blocks of that length, masks drawn from seed 0), about `--tokens` tokens per length.

use std::path::{Path, PathBuf};

use anyhow::Context;
use candle_core::Device;
use roformer::train::mlm::{prepare_mlm_data, MlmDataOptions, MlmTask};
use roformer::train::run::{read_trainer_state, Task};
use roformer::train::{build_trainable, Trainable};
use roformer::{
    HeadModel, ModelDir, PositionEmbeddingType, RoFormerForMaskedLM, RoFormerTokenizer,
};
use serde::Serialize;

use super::figure::{BandFigure, Point, Series, XScale};
use super::pretrain::{finished_runs, RunRecord};
use super::stats::Spread;
use super::{command_line, refuse_duplicates, write_json, write_section};
use crate::plot;

/// Arguments of `experiment length`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The output directory of `experiment convergence` (its runs are evaluated).
    #[arg(long, default_value = "experiments/convergence")]
    pub from: PathBuf,
    /// The corpus the runs were trained on (its validation documents are evaluated).
    #[arg(long, default_value = "data/chinese-poetry/poems")]
    pub corpus: PathBuf,
    /// The output directory.
    #[arg(long, default_value = "experiments/length")]
    pub out: PathBuf,
    /// Block lengths, [CLS] and [SEP] included.
    #[arg(long, value_delimiter = ',', default_value = "64,128,256,512,1024")]
    pub lengths: Vec<usize>,
    /// Tokens evaluated per length (whole blocks, at least one).
    #[arg(long, default_value_t = 65536)]
    pub tokens: usize,
}

/// One arm at one length.
#[derive(Debug, Serialize)]
pub struct Cell {
    /// The block length.
    pub length: usize,
    /// Validation loss over seeds (`None`: past the absolute table).
    pub loss: Option<Spread>,
    /// Validation accuracy over seeds.
    pub accuracy: Option<Spread>,
}

/// One arm's row.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The arm.
    pub arm: String,
    /// Its cells by length.
    pub cells: Vec<Cell>,
}

/// `results.json`.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command.
    pub command: String,
    /// The training length of the models.
    pub trained_at: Option<usize>,
    /// Rows by arm.
    pub rows: Vec<Row>,
}

/// A loaded model and what it needs to be evaluated.
struct Loaded {
    record: RunRecord,
    trainable: Trainable<RoFormerForMaskedLM>,
    tokenizer: RoFormerTokenizer,
}

/// Runs `experiment length`.
///
/// # Errors
/// Missing runs, unreadable checkpoints or corpus, file errors.
pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(!args.lengths.is_empty(), "--lengths is empty");
    anyhow::ensure!(
        args.lengths.iter().all(|&l| l >= 3),
        "every length needs at least 3 tokens ([CLS], a token, [SEP])"
    );
    refuse_duplicates("--lengths", &args.lengths)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let models = load_models(&args.from)?;
    let arms = arms_of(&models);
    let mut measured = vec![vec![Vec::new(); args.lengths.len()]; arms.len()];
    for (li, &length) in args.lengths.iter().enumerate() {
        for (m, loss) in evaluate_at(args, length, &models)? {
            let ai = arms.iter().position(|a| *a == m.record.arm).unwrap_or(0);
            measured[ai][li].push(loss);
        }
    }
    let results = Results {
        command: command_line(),
        trained_at: trained_at(&models[0]),
        rows: rows(args, &arms, &measured),
    };
    write_json(&args.out, "results.json", &results)?;
    let figure_path = args.out.join("length.png");
    plot::save(&figure(&results), &figure_path, (900, 560))?;
    let table = table(&results);
    let section = format!(
        "### 2. Inputs longer than trained on\n\n```sh\n{}\n```\n\n\
         The models of experiment 1 (trained on {}-token blocks), on the validation poems \
         packed into blocks of each length, about {} tokens per length, the same blocks and \
         masks for every model. Loss, mean ± std (min–max) over the seeds; `n/a`: past the \
         absolute table.\n\n{}\n![loss by length]({})\n",
        results.command,
        trained_at_text(results.trained_at),
        args.tokens,
        table,
        figure_path.display()
    );
    let section_path = write_section(&args.out, &section)?;
    println!("{table}");
    println!("section: {}", section_path.display());
    Ok(())
}

/// The model of every finished run of `experiment convergence` in `from`, with its tokenizer.
///
/// # Errors
/// No finished run, or a checkpoint that does not load.
fn load_models(from: &Path) -> anyhow::Result<Vec<Loaded>> {
    let mut models = Vec::new();
    for record in finished_runs(from)? {
        let dir = record.dir.join("checkpoint");
        let md = ModelDir::open(&dir)?;
        let trainable = build_trainable::<RoFormerForMaskedLM>(
            &md.config,
            Some(&md.checkpoint),
            0,
            &Device::Cpu,
        )?;
        let tokenizer = RoFormerTokenizer::from_dir(&dir)?;
        models.push(Loaded {
            record,
            trainable,
            tokenizer,
        });
    }
    Ok(models)
}

/// The block length a run trained on, as its checkpoint records it.
fn trained_at(model: &Loaded) -> Option<usize> {
    read_trainer_state(&model.record.dir.join("checkpoint"))
        .ok()
        .and_then(|state| state.task["seq_len"].as_u64())
        .map(|l| l as usize)
}

/// A training length for the report (`?` when unknown).
fn trained_at_text(trained_at: Option<usize>) -> String {
    trained_at.map_or("?".into(), |t| t.to_string())
}

/// The arms of the models, in the order of experiment 1 (and its colours): rotary, absolute,
/// sinusoidal, none, then any other.
fn arms_of(models: &[Loaded]) -> Vec<String> {
    let mut arms: Vec<String> = Vec::new();
    for m in models {
        if !arms.contains(&m.record.arm) {
            arms.push(m.record.arm.clone());
        }
    }
    let rank = |arm: &str| {
        ["rotary", "absolute", "sinusoidal", "none"]
            .iter()
            .position(|a| *a == arm)
            .unwrap_or(usize::MAX)
    };
    arms.sort_by_key(|a| rank(a));
    arms
}

/// Every model that can read blocks of `length` tokens (an absolute table must be long
/// enough), with its validation (loss, accuracy) on the same blocks and masks: the
/// validation documents packed into blocks of that length, about `--tokens` tokens, masks from
/// seed 0.
///
/// # Errors
/// Another vocabulary than the first model's, no validation block, model errors.
fn evaluate_at<'a>(
    args: &Args,
    length: usize,
    models: &'a [Loaded],
) -> anyhow::Result<Vec<(&'a Loaded, (f64, f64))>> {
    let batch_size = (4096 / length).max(1);
    let batches = args.tokens.div_ceil(batch_size * length).max(1);
    let data_options = MlmDataOptions {
        corpus: vec![args.corpus.clone()],
        format: None,
        seq_len: length,
        packed: true,
        validation_fraction: 0.05,
        batch_size,
        seed: 0,
        whole_word: false,
        max_eval_batches: batches,
        also_simplified: false,
        line_share: 0.0,
        alone_share: 0.0,
    };
    let data = prepare_mlm_data(&models[0].tokenizer, &data_options)?;
    let mut measured = Vec::new();
    for m in models {
        anyhow::ensure!(
            m.tokenizer.vocab_size() == models[0].tokenizer.vocab_size(),
            "{}: another vocabulary than the other runs'",
            m.record.dir.display()
        );
        let cfg = m.trainable.model.roformer().config();
        if cfg.position_embedding_type == PositionEmbeddingType::Absolute
            && length > cfg.max_position_embeddings
        {
            continue;
        }
        eprintln!("length {length}: {}-s{}", m.record.arm, m.record.seed);
        let task = MlmTask {
            model: &m.trainable.model,
            params: &m.trainable.params,
            data: &data,
            max_eval_batches: batches,
            tokenizer_files: Vec::new(),
            precision: roformer::Precision::F32,
        };
        let Some(e) = task.evaluate(0)? else {
            anyhow::bail!("no validation block of {length} tokens");
        };
        measured.push((m, (e.loss, e.accuracy)));
    }
    Ok(measured)
}

/// A row per arm: its (loss, accuracy) spread over the seeds at each length.
fn rows(args: &Args, arms: &[String], measured: &[Vec<Vec<(f64, f64)>>]) -> Vec<Row> {
    arms.iter()
        .zip(measured)
        .map(|(arm, by_length)| Row {
            arm: arm.clone(),
            cells: args
                .lengths
                .iter()
                .zip(by_length)
                .map(|(&length, v)| Cell {
                    length,
                    loss: Spread::of(v.iter().map(|x| x.0).collect()),
                    accuracy: Spread::of(v.iter().map(|x| x.1).collect()),
                })
                .collect(),
        })
        .collect()
}

/// Loss against block length, one line per arm (lengths past an absolute table left out).
fn figure(results: &Results) -> BandFigure {
    BandFigure {
        title: format!(
            "Validation MLM loss by block length (trained at {})",
            trained_at_text(results.trained_at)
        ),
        x_desc: "block length (tokens)".into(),
        y_desc: "validation MLM loss".into(),
        x_scale: XScale::Log2,
        series: results
            .rows
            .iter()
            .map(|r| Series {
                name: r.arm.clone(),
                points: r
                    .cells
                    .iter()
                    .filter_map(|c| {
                        c.loss.as_ref().map(|l| Point {
                            x: c.length as f64,
                            mean: l.mean,
                            min: l.min,
                            max: l.max,
                        })
                    })
                    .collect(),
            })
            .collect(),
        reference: None,
        legend: plotters::prelude::SeriesLabelPosition::UpperRight,
    }
}

/// The Markdown table: arms by lengths.
fn table(results: &Results) -> String {
    let lengths: Vec<usize> = results
        .rows
        .first()
        .map(|r| r.cells.iter().map(|c| c.length).collect())
        .unwrap_or_default();
    let mut s = "| arm |".to_string();
    for l in &lengths {
        s += &format!(" {l} |");
    }
    s += "\n|---|";
    s += &"---|".repeat(lengths.len());
    s += "\n";
    for r in &results.rows {
        s += &format!("| {} |", r.arm);
        for c in &r.cells {
            s += &match &c.loss {
                Some(l) => format!(" {:.3} ± {:.3} |", l.mean, l.std),
                None => " n/a |".into(),
            };
        }
        s += "\n";
    }
    s
}
