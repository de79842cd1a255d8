//! `experiment length`: the models `experiment convergence` pre-trained on 128-token blocks,
//! evaluated on validation blocks of other lengths (64 to 4096): does the MLM loss keep
//! falling with more context past the training length, or break (absolute: its untrained
//! table rows up to 512, nothing past it)? Rotary models are evaluated as trained and under
//! each inference-time scaling of `roformer::rope_scaling` (position interpolation,
//! NTK-aware, dynamic NTK, YaRN) with the factor `s = max(length / trained length, 1)`
//! (dynamic NTK with factor 1: its base grows with the pass's length by itself). Every arm
//! found among the runs gets a row (ALiBi and T5 too, when `convergence` trained them).
//!
//! Every model sees the same blocks and masks at a length (the validation documents packed
//! into blocks of that length, masks drawn from one seed), about `--tokens` tokens per length.
//! The lengths, tokens, batch size and seed are `experiments/length/settings.json`'s.

mod report;

use std::path::{Path, PathBuf};

use super::pretrain::{finished_runs, RunRecord};
use super::settings::{set, Read, SettingsFile, SettingsFlag};
use super::stats::Spread;
use super::{command_line, refuse_duplicates, write_json, write_section};
use anyhow::Context;
use candle_core::Device;
use report::{Cell, Results, Row};
use roformer::rope_scaling::RopeScaling;
use roformer::train::mlm::{prepare_mlm_data, MlmData, MlmDataOptions, MlmTask};
use roformer::train::run::{read_trainer_state, Task};
use roformer::train::{build_trainable, Trainable};
use roformer::{
    Architecture, HeadModel, ModelDir, PositionEmbeddingType, RoFormerForMaskedLM,
    RoFormerTokenizer,
};
use roformer_runner::output::outln;
use roformer_runner::plot;
use rotary::scaling::Scaling;

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
    /// `--settings`.
    #[command(flatten)]
    pub settings: SettingsFlag,
    /// Block lengths, `[CLS]` and `[SEP]` included.
    #[arg(long, value_delimiter = ',')]
    pub lengths: Vec<usize>,
    /// Tokens evaluated per length (whole blocks, at least one).
    #[arg(long)]
    pub tokens: Option<usize>,
}

/// The settings of `experiment length` (`experiments/length/settings.json`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Block lengths, `[CLS]` and `[SEP]` included (also `--lengths`).
    pub lengths: Vec<usize>,
    /// Tokens evaluated per length (also `--tokens`).
    pub tokens: usize,
    /// Tokens per evaluation batch: `batch_tokens / length` blocks (at least one).
    pub batch_tokens: usize,
    /// The share of documents the pre-training held out for validation (convergence's
    /// `validation`): the documents evaluated.
    pub validation: f64,
    /// The seed of the masks.
    pub seed: u64,
}

/// The settings of `experiment length`.
const SETTINGS: SettingsFile = SettingsFile {
    path: "experiments/length/settings.json",
    built_in: include_str!("../../../../experiments/length/settings.json"),
};

impl Args {
    /// The settings, with the flags given applied, and how the section cites them.
    ///
    /// # Errors
    /// Unreadable settings.
    fn settings(&self) -> anyhow::Result<Read<Settings>> {
        let mut read: Read<Settings> = SETTINGS.read(&self.settings)?;
        if !self.lengths.is_empty() {
            read.settings.lengths.clone_from(&self.lengths);
        }
        set(&mut read.settings.tokens, self.tokens);
        Ok(read)
    }
}

/// A loaded model and what it needs to be evaluated.
struct Loaded {
    record: RunRecord,
    trainable: Trainable<RoFormerForMaskedLM>,
    tokenizer: RoFormerTokenizer,
}

impl Loaded {
    /// The model's position type.
    fn position_type(&self) -> PositionEmbeddingType {
        self.trainable
            .model
            .roformer()
            .config()
            .position_embedding_type
    }
}

/// What a row measures: the runs of `arm`, under the scheme `scaling` if any (an index into
/// [`RopeScaling::schemes`]).
#[derive(Debug, Clone, PartialEq)]
struct Variant {
    arm: String,
    scaling: Option<usize>,
}

/// Runs `experiment length`.
///
/// # Errors
/// Missing runs, unreadable checkpoints or corpus, file errors.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let Read { settings: s, cited } = args.settings()?;
    anyhow::ensure!(!s.lengths.is_empty(), "--lengths is empty");
    anyhow::ensure!(
        s.lengths.iter().all(|&l| l >= 3),
        "every length needs at least 3 tokens ([CLS], a token, [SEP])"
    );
    refuse_duplicates("--lengths", &s.lengths)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut models = load_models(&args.from)?;
    let trained_at = trained_at(&models[0]);
    let variants = variants_of(&models, trained_at);
    let mut measured = vec![vec![Vec::new(); s.lengths.len()]; variants.len()];
    for (li, &length) in s.lengths.iter().enumerate() {
        let blocks = validation_blocks(args, &s, length, &models[0].tokenizer)?;
        for (vi, loss) in evaluate_at(&blocks, length, &mut models, &variants, trained_at)? {
            measured[vi][li].push(loss);
        }
    }
    let results = Results {
        command: command_line(),
        trained_at,
        seeds: seeds_of(&models),
        rows: rows(&s.lengths, &variants, &measured, trained_at),
    };
    write_json(&args.out, "results.json", &results)?;
    let figure_path = args.out.join("length.png");
    plot::save(&report::figure(&results), &figure_path, (1000, 620))?;
    let section = report::section(&results, (s.tokens, &cited), &figure_path);
    let section_path = write_section(&args.out, &section)?;
    outln!("{}", report::table(&results))?;
    outln!("section: {}", section_path.display())?;
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

/// The most runs any arm has.
fn seeds_of(models: &[Loaded]) -> usize {
    models
        .iter()
        .map(|m| {
            models
                .iter()
                .filter(|o| o.record.arm == m.record.arm)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The arms of the models, in the order of experiment 1 (and its colours): rotary, absolute,
/// sinusoidal, none, then ALiBi and T5, then any other in the order found.
fn arms_of(models: &[Loaded]) -> Vec<String> {
    let mut arms: Vec<String> = Vec::new();
    for m in models {
        if !arms.contains(&m.record.arm) {
            arms.push(m.record.arm.clone());
        }
    }
    let known = [
        "rotary",
        "absolute",
        "sinusoidal",
        "none",
        "alibi",
        "t5",
        "t5_relative",
    ];
    let rank = |arm: &str| known.iter().position(|a| *a == arm).unwrap_or(known.len());
    arms.sort_by_key(|a| rank(a));
    arms
}

/// The rows to measure: every arm as trained, and each rotary arm under every scaling right
/// after it (when the training length is known, which the scalings need).
fn variants_of(models: &[Loaded], trained_at: Option<usize>) -> Vec<Variant> {
    if trained_at.is_none() {
        eprintln!("no training length recorded in the checkpoints: no scaling rows");
    }
    let mut variants = Vec::new();
    for arm in arms_of(models) {
        let rotary = models
            .iter()
            .any(|m| m.record.arm == arm && m.position_type() == PositionEmbeddingType::Rotary);
        variants.push(Variant {
            arm: arm.clone(),
            scaling: None,
        });
        if rotary && trained_at.is_some() {
            let schemes = RopeScaling::schemes(1.0, 1).len();
            variants.extend((0..schemes).map(|k| Variant {
                arm: arm.clone(),
                scaling: Some(k),
            }));
        }
    }
    variants
}

/// Scheme `k` of [`RopeScaling::schemes`] at `length` for models trained at `trained_at`: its
/// factor `length / trained_at` (at least 1), or 1 for dynamic NTK, whose base follows the
/// pass's length by itself.
fn scheme_at(k: usize, length: usize, trained_at: usize) -> RopeScaling {
    let stretch = (length as f64 / trained_at as f64).max(1.0);
    let unit = RopeScaling::schemes(1.0, trained_at)[k].clone();
    if matches!(unit.0, Scaling::Dynamic { .. }) {
        return unit;
    }
    RopeScaling::schemes(stretch, trained_at)[k].clone()
}

/// The validation blocks of one length, and how many batches of them are evaluated.
struct Blocks {
    data: MlmData,
    batches: usize,
}

/// The validation documents packed into blocks of `length` tokens, about `--tokens` of them,
/// masks from the settings' seed.
///
/// # Errors
/// An unreadable corpus.
fn validation_blocks(
    args: &Args,
    s: &Settings,
    length: usize,
    tokenizer: &RoFormerTokenizer,
) -> anyhow::Result<Blocks> {
    let batch_size = (s.batch_tokens / length).max(1);
    let batches = s.tokens.div_ceil(batch_size * length).max(1);
    let data_options = MlmDataOptions {
        corpus: vec![args.corpus.clone()],
        format: None,
        seq_len: length,
        packed: true,
        validation_fraction: s.validation,
        batch_size,
        seed: s.seed,
        whole_word: false,
        max_eval_batches: batches,
        also_simplified: false,
        line_share: 0.0,
        alone_share: 0.0,
    };
    Ok(Blocks {
        data: prepare_mlm_data(tokenizer, &data_options)?,
        batches,
    })
}

/// Every model that can read blocks of `length` tokens (an absolute table must be long
/// enough) under each of its arm's variants: (variant index, (loss, accuracy)) on the same
/// blocks and masks. A model's scaling is reset to none afterwards.
///
/// # Errors
/// Another vocabulary than the first model's, no validation block, model errors.
fn evaluate_at(
    blocks: &Blocks,
    length: usize,
    models: &mut [Loaded],
    variants: &[Variant],
    trained_at: Option<usize>,
) -> anyhow::Result<Vec<(usize, (f64, f64))>> {
    let vocab = models[0].tokenizer.vocab_size();
    let mut measured = Vec::new();
    for m in models.iter_mut() {
        anyhow::ensure!(
            m.tokenizer.vocab_size() == vocab,
            "{}: another vocabulary than the other runs'",
            m.record.dir.display()
        );
        let cfg = m.trainable.model.roformer().config();
        if cfg.position_embedding_type == PositionEmbeddingType::Absolute
            && length > cfg.max_position_embeddings
        {
            continue;
        }
        for (vi, v) in variants.iter().enumerate() {
            if v.arm != m.record.arm {
                continue;
            }
            let scaling = match (v.scaling, trained_at) {
                (Some(k), Some(l)) => Some(scheme_at(k, length, l)),
                _ => None,
            };
            measured.push((vi, evaluate_one(m, blocks, length, scaling)?));
        }
        set_scaling(m, None)?;
    }
    Ok(measured)
}

/// Sets the rotary scaling of `m`'s encoder.
///
/// # Errors
/// A scaling the model refuses.
fn set_scaling(m: &mut Loaded, scaling: Option<RopeScaling>) -> anyhow::Result<()> {
    if m.position_type() == PositionEmbeddingType::Rotary {
        m.trainable
            .model
            .roformer_mut()
            .encoder_mut()
            .set_rope_scaling(scaling)
            .with_context(|| format!("{}: RoPE scaling", m.record.dir.display()))?;
    }
    Ok(())
}

/// `m`'s validation (loss, accuracy) on `data` under `scaling`.
///
/// # Errors
/// No validation block, model errors.
fn evaluate_one(
    m: &mut Loaded,
    blocks: &Blocks,
    length: usize,
    scaling: Option<RopeScaling>,
) -> anyhow::Result<(f64, f64)> {
    let name = scaling.as_ref().map_or(String::new(), |s| {
        format!("+{} (s = {:.3})", s.name(), s.factor())
    });
    set_scaling(m, scaling)?;
    eprintln!("length {length}: {}-s{}{name}", m.record.arm, m.record.seed);
    let task = MlmTask {
        model: &m.trainable.model,
        params: &m.trainable.params,
        data: &blocks.data,
        max_eval_batches: blocks.batches,
        tokenizer_files: Vec::new(),
        precision: roformer::Precision::F32,
    };
    // This experiment has no stop request: a flag never set.
    let never = std::sync::atomic::AtomicBool::new(false);
    let roformer::train::run::Evaluation::Done(e) = task.evaluate(0, &never)? else {
        anyhow::bail!("no validation block of {length} tokens");
    };
    Ok((e.loss, e.accuracy))
}

/// A row per variant: its (loss, accuracy) spread over the seeds at each length.
fn rows(
    lengths: &[usize],
    variants: &[Variant],
    measured: &[Vec<Vec<(f64, f64)>>],
    trained_at: Option<usize>,
) -> Vec<Row> {
    variants
        .iter()
        .zip(measured)
        .map(|(v, by_length)| Row {
            arm: v.arm.clone(),
            scaling: v
                .scaling
                .map(|k| RopeScaling::schemes(1.0, 1)[k].name().to_string()),
            cells: lengths
                .iter()
                .zip(by_length)
                .map(|(&length, m)| Cell {
                    length,
                    factor: v
                        .scaling
                        .zip(trained_at)
                        .map(|(k, l)| scheme_at(k, length, l).factor()),
                    loss: Spread::of(m.iter().map(|x| x.0).collect()),
                    accuracy: Spread::of(m.iter().map(|x| x.1).collect()),
                })
                .collect(),
        })
        .collect()
}
