//! MLM pre-training of the arms of an experiment: one small model config, one vocabulary, and
//! for every seed the same data order, masks and initial weights in every arm (the data and
//! masks are functions of the seed and the step, and each initial tensor is drawn from a
//! stream keyed by the seed and its name), so that the arms differ only in their positions
//! (and attention).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use roformer::data::{build_vocab, read_corpus, VocabOptions};
use serde::{Deserialize, Serialize};
use serde_json::json;

use roformer::optim::Decay;
use roformer::train::mlm::MlmDataOptions;
use roformer::train::{ModelStart, TaskOptions, TrainError, TrainOptions, TrainRun};

use super::done::{is_done, mark_done, read_done};
use super::settings::{set, Read, SettingsFile, SettingsFlag};
use super::{check_stopped, refuse_duplicates, start_of, train_run};
use roformer_runner::precision::PrecisionArg;
use roformer_runner::train::checks::{check_numbers, parse_lr};
use roformer_runner::train::masked_lm::{check_position_table, explain, BlockFlags, Position};
use roformer_runner::{json, output};

/// Arguments shared by the pre-training experiments (`convergence`, `linear`): the corpus,
/// the output, the settings file and the flags that override its settings.
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// The corpus (the chinese-poetry poems from `scripts/fetch_chinese_poetry.sh`).
    #[arg(long, default_value = "data/chinese-poetry/poems")]
    pub corpus: PathBuf,
    /// The output directory [default: experiments/NAME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `--settings`.
    #[command(flatten)]
    pub settings: SettingsFlag,
    /// The arms, comma-separated; the reference arm, absolute, must be among them.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub arms: Vec<Position>,
    /// Seeds per arm (0, 1, ...).
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Optimisation steps per run.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Sequences per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Tokens per packed block.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Peak learning rate (linear warm-up, then linear decay to 0).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Warm-up steps.
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Validation every this many steps.
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Validation batches per evaluation.
    #[arg(long)]
    pub eval_batches: Option<usize>,
    /// Hidden size of the model.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Layers of the model.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Attention heads.
    #[arg(long)]
    pub heads: Option<usize>,
    /// Vocabulary size (characters by frequency, `vocab build`).
    #[arg(long)]
    pub vocab_size: Option<usize>,
    /// The absolute position table's length (BERT's 512; rotary and sinusoidal need none).
    #[arg(long)]
    pub max_positions: Option<usize>,
    /// The precision of the matrix products (master weights, optimiser, norms, softmax and
    /// the loss stay f32).
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: PrecisionArg,
    /// Tune the learning rate per arm: these peak rates (comma-separated, at least 2) on seed
    /// 0, then every seed at each arm's best (lowest final validation loss); `--lr` is unused.
    #[arg(long, value_delimiter = ',', value_parser = parse_lr, allow_negative_numbers = true)]
    pub sweep: Vec<f64>,
}

/// The settings of a pre-training experiment (`experiments/NAME/settings.json`); each field
/// but the last three is also a flag of the same name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The arms (position types: rotary, absolute, sinusoidal, alibi, t5, none).
    pub arms: Vec<String>,
    /// Seeds per arm.
    pub seeds: u64,
    /// Optimisation steps per run.
    pub steps: u64,
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per packed block.
    pub seq_len: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// The peak rates of a sweep (none: no sweep, every arm at `lr`).
    pub sweep: Vec<f64>,
    /// Warm-up steps.
    pub warmup: u64,
    /// Validation every this many steps.
    pub eval_every: u64,
    /// Validation batches per evaluation.
    pub eval_batches: usize,
    /// Hidden size of the model (its intermediate size is four times this).
    pub hidden: usize,
    /// Layers of the model.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// The absolute position table's length.
    pub max_positions: usize,
    /// The share of documents held out for validation.
    pub validation: f64,
    /// AdamW's weight decay.
    pub weight_decay: f64,
    /// The gradient's largest norm (clipped above it).
    pub max_grad_norm: f64,
}

/// A pre-training experiment's arguments: the flags over the settings.
#[derive(Debug, Clone)]
pub struct Args {
    /// The corpus.
    pub corpus: PathBuf,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// The precision of the matrix products.
    pub precision: PrecisionArg,
    /// The arms.
    pub arms: Vec<Position>,
    /// The settings, with the flags given applied.
    pub settings: Settings,
    /// The settings file, as the section cites it.
    pub cited: String,
}

impl Flags {
    /// The arguments: the settings of `file` (or of `--settings`) with the flags given
    /// applied; the reference arm must be among the arms.
    ///
    /// # Errors
    /// Unreadable settings, an unknown arm, arms without the reference arm, an arm named twice.
    pub fn resolve(&self, file: &SettingsFile, reference: Position) -> anyhow::Result<Args> {
        let Read {
            mut settings,
            cited,
        } = file.read::<Settings>(&self.settings)?;
        let s = &mut settings;
        set(&mut s.seeds, self.seeds);
        set(&mut s.steps, self.steps);
        set(&mut s.batch, self.batch);
        set(&mut s.seq_len, self.seq_len);
        set(&mut s.lr, self.lr);
        set(&mut s.warmup, self.warmup);
        set(&mut s.eval_every, self.eval_every);
        set(&mut s.eval_batches, self.eval_batches);
        set(&mut s.hidden, self.hidden);
        set(&mut s.layers, self.layers);
        set(&mut s.heads, self.heads);
        set(&mut s.vocab_size, self.vocab_size);
        set(&mut s.max_positions, self.max_positions);
        if !self.sweep.is_empty() {
            s.sweep.clone_from(&self.sweep);
        }
        let arms = if self.arms.is_empty() {
            s.arms
                .iter()
                .map(|a| position(a))
                .collect::<anyhow::Result<_>>()?
        } else {
            self.arms.clone()
        };
        anyhow::ensure!(
            arms.contains(&reference),
            "--arms must include {} (the reference arm)",
            arm_name(reference)
        );
        let names: Vec<&str> = arms.iter().map(|&a| arm_name(a)).collect();
        refuse_duplicates("--arms", &names)?;
        Ok(Args {
            corpus: self.corpus.clone(),
            out: self.out.clone(),
            precision: self.precision,
            arms,
            settings,
            cited,
        })
    }
}

/// The position type an arm of the settings names.
///
/// # Errors
/// A name that is no arm.
fn position(name: &str) -> anyhow::Result<Position> {
    <Position as clap::ValueEnum>::from_str(name, false)
        .map_err(|_| anyhow::anyhow!("the settings name an unknown arm {name:?}"))
}

/// What a finished pre-training run recorded (`done.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// The arm (position type).
    pub arm: String,
    /// The seed.
    pub seed: u64,
    /// The run directory (its checkpoint is `checkpoint/`).
    pub dir: PathBuf,
    /// Validation evaluations: (step, loss, accuracy).
    pub evals: Vec<(u64, f64, f64)>,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// The peak learning rate (absent in records written before it was recorded).
    #[serde(default)]
    pub lr: Option<f64>,
    /// The step whose loss or gradient was not finite, when the run diverged (its `evals`
    /// end before it).
    #[serde(default)]
    pub diverged_at: Option<u64>,
}

impl RunRecord {
    /// The last validation evaluation, (step, loss, accuracy), unless the run diverged.
    pub fn final_eval(&self) -> Option<(u64, f64, f64)> {
        self.evals
            .last()
            .copied()
            .filter(|_| self.diverged_at.is_none())
    }
}

/// The name of a position arm.
pub fn arm_name(p: Position) -> &'static str {
    match p {
        Position::Rotary => "rotary",
        Position::Absolute => "absolute",
        Position::Sinusoidal => "sinusoidal",
        Position::Alibi => "alibi",
        Position::T5 => "t5",
        Position::None => "none",
    }
}

/// Builds (once) the vocabulary of the corpus in `out/vocab/vocab.txt`.
fn ensure_vocab(args: &Args, out: &Path) -> anyhow::Result<PathBuf> {
    let dir = out.join("vocab");
    let path = dir.join("vocab.txt");
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let documents = read_corpus(&args.corpus, None).with_context(|| {
        format!(
            "{}: fetch the corpus with scripts/fetch_chinese_poetry.sh",
            args.corpus.display()
        )
    })?;
    let options = VocabOptions::new(args.settings.vocab_size);
    let built = build_vocab(&documents, &options)?;
    let text = built.tokens.join("\n") + "\n";
    output::write(&path, text.as_bytes())?;
    output::write(
        &dir.join("tokenizer_config.json"),
        roformer::data::vocab_builder::tokenizer_config_json(&options.config).as_bytes(),
    )?;
    Ok(path)
}

/// Writes the experiment's model config (`attention`: "softmax" or "linear").
fn write_config(args: &Args, out: &Path, attention: &str) -> anyhow::Result<PathBuf> {
    let path = out.join(format!("config-{attention}.json"));
    let config = json!({
        "architectures": ["RoFormerForMaskedLM"],
        "model_type": "roformer",
        "vocab_size": args.settings.vocab_size,
        "embedding_size": args.settings.hidden,
        "hidden_size": args.settings.hidden,
        "num_hidden_layers": args.settings.layers,
        "num_attention_heads": args.settings.heads,
        "intermediate_size": 4 * args.settings.hidden,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": args.settings.max_positions,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "tie_word_embeddings": true,
        "attention_type": attention,
    });
    output::write(&path, (json::to_string_pretty(&config)? + "\n").as_bytes())?;
    Ok(path)
}

/// The validation evaluations in a run's `metrics.jsonl`: (step, loss, accuracy).
pub fn read_evals(dir: &Path) -> anyhow::Result<Vec<(u64, f64, f64)>> {
    let path = dir.join("metrics.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut evals = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}: not JSON lines", path.display()))?;
        if v["event"] == "eval" {
            if let (Some(s), Some(l), Some(a)) = (
                v["step"].as_u64(),
                v["loss"].as_f64(),
                v["accuracy"].as_f64(),
            ) {
                evals.push((s, l, a));
            }
        }
    }
    Ok(evals)
}

/// The finished pre-training runs in `from/runs/` (the output directory of `experiment
/// convergence`) that later experiments start from: each arm's runs at its best rate
/// ([`at_best_rates`]; all of them when the experiment ran one rate), in (seed, arm) order.
///
/// # Errors
/// No `runs/` directory, no finished run, or an unreadable record.
pub fn finished_runs(from: &Path) -> anyhow::Result<Vec<RunRecord>> {
    let runs = from.join("runs");
    let entries = std::fs::read_dir(&runs).with_context(|| {
        format!(
            "{}: run `roformer experiment convergence` first",
            runs.display()
        )
    })?;
    let mut records = Vec::new();
    for entry in entries {
        let dir = entry?.path();
        if is_done(&dir) {
            records.push(read_done::<RunRecord>(&dir)?);
        }
    }
    anyhow::ensure!(!records.is_empty(), "{}: no finished run", runs.display());
    let mut records = at_best_rates(records);
    records.sort_by(|a, b| (a.seed, &a.arm).cmp(&(b.seed, &b.arm)));
    Ok(records)
}

/// The records of `records` at their arm's best rate: the rate of the arm's lowest final
/// validation loss among its seed-0 runs that did not diverge (the choice `--sweep` makes),
/// without the runs that diverged. An arm with no such run keeps all its records.
pub fn at_best_rates(records: Vec<RunRecord>) -> Vec<RunRecord> {
    // Each arm's best (lr, loss) among its finished seed-0 runs.
    let mut best: BTreeMap<String, (Option<f64>, f64)> = BTreeMap::new();
    for r in records.iter().filter(|r| r.seed == 0) {
        if let Some((_, loss, _)) = r.final_eval() {
            let entry = best.entry(r.arm.clone()).or_insert((r.lr, loss));
            if loss < entry.1 {
                *entry = (r.lr, loss);
            }
        }
    }
    records
        .into_iter()
        .filter(|r| {
            best.get(&r.arm)
                .is_none_or(|&(lr, _)| r.lr == lr && r.diverged_at.is_none())
        })
        .collect()
}

/// What every run of an experiment shares: its output directory, model config, vocabulary and
/// attention.
pub struct Prepared {
    /// The experiment's output directory (runs in `runs/`).
    pub out: PathBuf,
    /// The model config (`config-ATTENTION.json`).
    pub config: PathBuf,
    /// The vocabulary (`vocab/vocab.txt`).
    pub vocab: PathBuf,
    /// `softmax` or `linear`.
    pub attention: &'static str,
}

/// Checks the arguments and writes (once) the experiment's vocabulary and model config.
///
/// # Errors
/// Bad arguments, an unreadable corpus, file errors.
pub fn prepare(args: &Args, out: &Path, attention: &'static str) -> anyhow::Result<Prepared> {
    check(args)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(Prepared {
        out: out.to_path_buf(),
        vocab: ensure_vocab(args, out)?,
        config: write_config(args, out, attention)?,
        attention,
    })
}

/// One pre-training run: its directory name in `runs/`, arm, seed and peak learning rate.
pub struct RunSpec {
    /// The directory name in `runs/`.
    pub name: String,
    /// The arm.
    pub arm: Position,
    /// The seed.
    pub seed: u64,
    /// The peak learning rate.
    pub lr: f64,
}

/// The record of run `spec` if it finished, otherwise runs it (announced as number `index`
/// of `total` on stderr) and records it; a run whose loss or gradient turns non-finite is
/// recorded as diverged, not failed.
///
/// # Errors
/// A run's other errors, a stop by Ctrl-C, file errors.
pub fn run_one(
    args: &Args,
    prepared: &Prepared,
    spec: &RunSpec,
    (index, total): (usize, usize),
    stop: &AtomicBool,
) -> anyhow::Result<RunRecord> {
    let dir = prepared.out.join("runs").join(&spec.name);
    if is_done(&dir) {
        return read_done(&dir);
    }
    eprintln!(
        "[{index}/{total}] pre-training {} ({} attention, {} steps, lr {}, {})",
        spec.name,
        prepared.attention,
        args.settings.steps,
        spec.lr,
        args.precision.name()
    );
    let started = Instant::now();
    let (seconds, diverged_at) = match pretrain(args, prepared, spec, &dir, stop) {
        Ok(seconds) => (seconds, None),
        Err(e) => match e.downcast_ref::<TrainError>() {
            Some(&TrainError::NonFinite { step, .. }) if !stop.load(Ordering::SeqCst) => {
                eprintln!("{}: diverged at step {step}", spec.name);
                (started.elapsed().as_secs_f64(), Some(step))
            }
            _ => return Err(e),
        },
    };
    check_stopped(stop)?;
    let record = RunRecord {
        arm: arm_name(spec.arm).into(),
        seed: spec.seed,
        evals: read_evals(&dir)?,
        dir: dir.clone(),
        seconds,
        lr: Some(spec.lr),
        diverged_at,
    };
    mark_done(&dir, &record)?;
    Ok(record)
}

/// Pre-trains every arm for every seed at `--lr` (seed by seed, so that a stopped experiment
/// has whole seeds), skipping finished runs; returns their records in (seed, arm) order.
///
/// # Errors
/// A run's errors, a stop by Ctrl-C, file errors.
pub fn run_arms(
    args: &Args,
    out: &Path,
    attention: &'static str,
    arms: &[Position],
    stop: &AtomicBool,
) -> anyhow::Result<Vec<RunRecord>> {
    let prepared = prepare(args, out, attention)?;
    let total = args.settings.seeds as usize * arms.len();
    let mut records = Vec::new();
    for seed in 0..args.settings.seeds {
        for &arm in arms {
            let spec = RunSpec {
                name: format!("{}-s{seed}", arm_name(arm)),
                arm,
                seed,
                lr: args.settings.lr,
            };
            records.push(run_one(
                args,
                &prepared,
                &spec,
                (records.len() + 1, total),
                stop,
            )?);
        }
    }
    Ok(records)
}

/// What an experiment's pre-training run records in its `run.json`.
#[derive(Debug, Serialize)]
struct PretrainRecord<'a> {
    /// The experiment's attention ("softmax" or "linear").
    attention: &'a str,
    /// The arm.
    arm: &'static str,
    /// The seed.
    seed: u64,
    /// The peak learning rate.
    lr: f64,
    /// The precision of the matrix products.
    precision: &'static str,
    /// Steps, sequences per step, tokens per sequence, warm-up steps, evaluation interval and
    /// batches per evaluation: with the above, what an interrupted run must share with the
    /// command that continues it (the model and data are in its fingerprint).
    steps: u64,
    batch: usize,
    seq_len: usize,
    warmup: u64,
    eval_every: u64,
    eval_batches: usize,
    /// The loss plot's file name.
    plot: &'static str,
}

/// Checks the numbers of the arguments.
///
/// # Errors
/// A count of 0, a block without room for a token, a learning rate that is not a finite
/// number above 0, a sweep of a single rate or naming a rate twice.
fn check(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.settings.sweep.len() != 1,
        "--sweep {} is a single rate; give at least 2 (e.g. 1e-3,3e-3)",
        args.settings.sweep[0]
    );
    refuse_duplicates("--sweep", &args.settings.sweep)?;
    anyhow::ensure!(
        args.settings.steps >= 1 && args.settings.batch >= 1,
        "--steps and --batch must be at least 1"
    );
    anyhow::ensure!(
        args.settings.seq_len >= 3,
        "--seq-len must be at least 3 ([CLS], a token, [SEP])"
    );
    check_numbers(
        args.settings.lr,
        args.settings.weight_decay,
        args.settings.max_grad_norm,
    )
}

/// Pre-trains the prepared model with the arm, seed and learning rate of `spec` into `dir`
/// (or continues the run a stop interrupted there): the run's wall seconds, all its parts.
///
/// # Errors
/// The run's errors.
fn pretrain(
    args: &Args,
    prepared: &Prepared,
    spec: &RunSpec,
    dir: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<f64> {
    let (config, vocab) = (prepared.config.as_path(), prepared.vocab.as_path());
    let (arm, seed) = (spec.arm, spec.seed);
    let record = PretrainRecord {
        attention: prepared.attention,
        arm: arm_name(arm),
        seed,
        lr: spec.lr,
        precision: args.precision.name(),
        steps: args.settings.steps,
        batch: args.settings.batch,
        seq_len: args.settings.seq_len,
        warmup: args.settings.warmup,
        eval_every: args.settings.eval_every,
        eval_batches: args.settings.eval_batches,
        plot: "loss.png",
    };
    let (start, interrupted) = start_of(dir, &record, || {
        Ok(ModelStart::fresh(config, vocab, Some(arm.into()))?)
    })?;
    check_position_table(&start.config, args.settings.seq_len)?;
    let data = MlmDataOptions {
        corpus: vec![args.corpus.clone()],
        format: None,
        seq_len: args.settings.seq_len,
        packed: true,
        validation_fraction: args.settings.validation,
        batch_size: args.settings.batch,
        seed,
        whole_word: false,
        max_eval_batches: args.settings.eval_batches,
        also_simplified: false,
        line_share: 0.0,
        alone_share: 0.0,
    };
    let options = TrainRun {
        options: TrainOptions {
            steps: Some(args.settings.steps),
            lr: spec.lr,
            warmup: args.settings.warmup,
            decay: Decay::Linear,
            weight_decay: args.settings.weight_decay,
            max_grad_norm: Some(args.settings.max_grad_norm),
            seed,
            eval_every: args.settings.eval_every,
            save_every: 0,
            precision: args.precision.resolve(),
            ..TrainOptions::PRETRAINING
        },
        resume: interrupted.is_some(),
        ..TrainRun::new(dir, &start, TaskOptions::MaskedLm(data))
    };
    let inputs = vec![
        ("--config", config),
        ("--vocab", vocab),
        ("--corpus", args.corpus.as_path()),
    ];
    let flags = BlockFlags {
        seq_len: args.settings.seq_len,
        validation: args.settings.validation,
        line_by_line: false,
    };
    let run = (inputs, interrupted.as_ref());
    train_run(&options, run, &record, "MLM", stop, |e| explain(e, &flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(arm: &str, seed: u64, lr: f64, loss: f64, diverged_at: Option<u64>) -> RunRecord {
        RunRecord {
            arm: arm.into(),
            seed,
            dir: PathBuf::from(format!("{arm}-{lr}-{seed}")),
            evals: vec![(500, loss, 0.1)],
            seconds: 1.0,
            lr: Some(lr),
            diverged_at,
        }
    }

    fn kept(records: Vec<RunRecord>) -> Vec<(String, u64, f64)> {
        at_best_rates(records)
            .into_iter()
            .map(|r| (r.arm, r.seed, r.lr.unwrap_or(f64::NAN)))
            .collect()
    }

    #[test]
    fn best_rates_keep_each_arms_best_seed_zero_rate() {
        let records = vec![
            record("rotary", 0, 1e-3, 6.3, None),
            record("rotary", 0, 3e-3, 5.9, None),
            // Lower loss, but diverged: never the best.
            record("rotary", 0, 1e-2, 1.0, Some(40)),
            record("rotary", 1, 3e-3, 6.0, None),
            record("rotary", 1, 1e-3, 5.0, None),
            record("absolute", 0, 1e-3, 6.7, None),
            record("absolute", 0, 3e-3, 7.1, None),
            record("absolute", 2, 1e-3, 6.8, None),
        ];
        assert_eq!(
            kept(records),
            vec![
                ("rotary".into(), 0, 3e-3),
                ("rotary".into(), 1, 3e-3),
                ("absolute".into(), 0, 1e-3),
                ("absolute".into(), 2, 1e-3),
            ]
        );
    }

    #[test]
    fn one_rate_keeps_everything_and_an_arm_without_seed_zero_is_kept_whole() {
        let records = vec![
            record("rotary", 0, 3e-3, 5.9, None),
            record("rotary", 1, 3e-3, 6.0, None),
            record("t5", 1, 1e-3, 6.5, None),
            record("t5", 2, 3e-3, 6.4, None),
        ];
        assert_eq!(kept(records).len(), 4);
    }
}
