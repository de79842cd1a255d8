//! `roformer train mlm`: masked-LM pre-training from a config and a vocabulary (or from a
//! checkpoint with `--init`), or `--resume` of an interrupted run.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::bail;
use clap::ValueEnum;
use roformer::data::CorpusFormat;
use roformer::train::checkpoint::SaveStep;
use roformer::train::dump::DumpOptions;
use roformer::train::mlm::MlmDataOptions;
use roformer::train::{ModelStart, TaskOptions};
use roformer::PositionEmbeddingType;
use serde::{Deserialize, Serialize};

use roformer::train::out_dir::{OutRequest, RunPaths, DUMP_DIR};
use roformer_runner::train::checks::{check_numbers, check_plot_name, check_vocab_fits, parse_lr};
use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::train::masked_lm::{check_position_table, explain, BlockFlags, Position};
use roformer_runner::train::observer::train;
use roformer_runner::train::out_dir::open_out_dir;
use roformer_runner::train::record::write_record;

use super::args::{CommandRun, RunArgs};
use super::resume::resolve;
use super::save_fault::FaultInSave;

/// The corpus format, or detection by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Format {
    /// `.jsonl` is JSON lines with a `text` field, `.json` the chinese-poetry layout, anything
    /// else a document per line.
    Auto,
    /// A document per non-empty line.
    Lines,
    /// Documents separated by blank lines.
    Paragraphs,
    /// JSON lines with the `--text-field` field.
    Jsonl,
    /// The chinese-poetry JSON layout.
    Poetry,
}

/// Arguments of `roformer train mlm`.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
#[command(mut_arg("json", |a| a.help(
    "JSON lines on stdout instead of the progress bar and table"
)))]
pub struct Args {
    /// The model's `config.json` (its `vocab_size` is set to the vocabulary's size).
    #[arg(long, required_unless_present_any = ["init", "resume"])]
    pub config: Option<PathBuf>,
    /// The vocabulary (`vocab.txt`; e.g. from `roformer vocab build`).
    #[arg(long, required_unless_present_any = ["init", "resume"])]
    pub vocab: Option<PathBuf>,
    /// Start from this checkpoint's weights, config and vocabulary (fresh optimiser).
    #[arg(long, conflicts_with_all = ["config", "vocab"])]
    pub init: Option<PathBuf>,
    /// Override the config's position type.
    #[arg(long, value_enum)]
    pub position: Option<Position>,
    /// Corpus files or directories.
    #[arg(long, num_args = 1.., required_unless_present = "resume")]
    pub corpus: Vec<PathBuf>,
    /// The corpus format.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: Format,
    /// The text field of JSON lines.
    #[arg(long, default_value = "text")]
    pub text_field: String,
    /// Tokens per block, `[CLS]` and `[SEP]` included.
    #[arg(long, default_value_t = 128)]
    pub seq_len: usize,
    /// One document per block (truncated, padded) instead of packed blocks.
    #[arg(long)]
    pub line_by_line: bool,
    /// Mask whole jieba words instead of single tokens.
    #[arg(long)]
    pub whole_word: bool,
    /// Also train on a simplified copy of every document with traditional characters
    /// (`fast2s`); a copy stays on its original's side of the validation split.
    #[arg(long)]
    #[serde(default)]
    pub also_simplified: bool,
    /// Also train on the lines of this share of the documents (chosen by hash) as documents
    /// without punctuation, so that the model sees texts that end on a character
    /// (`举头望明[MASK]`); after the simplified copies, on each side of the split.
    #[arg(long, default_value_t = 0.0)]
    #[serde(default)]
    pub also_lines: f64,
    /// With packed blocks, train this share of the documents (lines included; chosen by hash)
    /// one per block, padded, as a short text alone (as `fill-mask` sees it).
    #[arg(long, default_value_t = 0.0)]
    #[serde(default)]
    pub alone_share: f64,
    /// Share of documents held out for validation, by hash of the text.
    #[arg(long, default_value_t = 0.05)]
    pub validation: f64,
    /// Sequences per micro-batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Optimisation steps.
    #[arg(long, required_unless_present = "resume")]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, default_value_t = 5e-4, value_parser = parse_lr, allow_negative_numbers = true)]
    pub lr: f64,
    /// Seed of initialisation, data order, masks and dropout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Most validation batches per evaluation (0: all).
    #[arg(long, default_value_t = 50)]
    pub eval_batches: usize,
    /// Dump the first N steps to --out/trajectory for a step-by-step comparison with PyTorch
    /// (scripts/compare_trajectory.py): the initial weights (init/), each step's batch after
    /// masking (batches.safetensors), the losses and the optimiser's settings (run.json). The
    /// run goes on to --steps (the schedule is the run's); add --stop-after N to end it there.
    #[arg(long, conflicts_with = "resume")]
    #[serde(skip)]
    pub dump_steps: Option<u64>,
    // What every training command takes.
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
}

impl Args {
    fn corpus_format(&self) -> Option<CorpusFormat> {
        match self.format {
            Format::Auto => None,
            Format::Lines => Some(CorpusFormat::Lines),
            Format::Paragraphs => Some(CorpusFormat::Paragraphs),
            Format::Jsonl => Some(CorpusFormat::JsonLines {
                field: self.text_field.clone(),
            }),
            Format::Poetry => Some(CorpusFormat::ChinesePoetry),
        }
    }

    /// How the corpus becomes batches.
    fn data_options(&self) -> MlmDataOptions {
        MlmDataOptions {
            corpus: self.corpus.clone(),
            format: self.corpus_format(),
            seq_len: self.seq_len,
            packed: !self.line_by_line,
            validation_fraction: self.validation,
            batch_size: self.batch,
            seed: self.seed,
            whole_word: self.whole_word,
            max_eval_batches: self.eval_batches,
            also_simplified: self.also_simplified,
            line_share: self.also_lines,
            alone_share: self.alone_share,
        }
    }

    /// The checks that need no file (again for arguments read back from `run.json`).
    fn validate(&self) -> anyhow::Result<()> {
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if self.run.grad_accum == 0 {
            bail!("--grad-accum must be at least 1");
        }
        if self.steps == Some(0) {
            bail!("--steps must be at least 1");
        }
        if self.dump_steps == Some(0) {
            bail!("--dump-steps must be at least 1");
        }
        if self.dump_steps.is_some() && self.run.grad_accum != 1 {
            bail!(
                "--dump-steps dumps one batch a step: give --grad-accum 1, not {}",
                self.run.grad_accum
            );
        }
        if self.seq_len < 3 {
            bail!("--seq-len must be at least 3 ([CLS], a token, [SEP])");
        }
        if !(0.0..=1.0).contains(&self.also_lines) {
            bail!("--also-lines must be a share in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.alone_share) {
            bail!("--alone-share must be a share in [0, 1]");
        }
        if self.alone_share > 0.0 && self.line_by_line {
            bail!("--alone-share mixes one-document blocks into packed ones: drop --line-by-line");
        }
        if !(0.0..1.0).contains(&self.validation) {
            bail!("--validation must be in [0, 1)");
        }
        check_numbers(self.lr, self.run.weight_decay, self.run.max_grad_norm)?;
        check_plot_name(&self.run.plot)
    }
}

/// The config, tokenizer and weights a run starts from: the checkpoint of `--init` or of the
/// run resumed, or `--config` and `--vocab` (with `--position`).
///
/// # Errors
/// Unreadable inputs; `--position` other than a checkpoint's; a vocabulary larger than the
/// checkpoint's config.
fn model_start(args: &Args, paths: &RunPaths) -> anyhow::Result<ModelStart> {
    if let Some(dir) = &paths.weights {
        let start = ModelStart::from_checkpoint(dir)?;
        let cfg = &start.config;
        if let Some(p) = args.position {
            if PositionEmbeddingType::from(p) != cfg.position_embedding_type {
                bail!("--position cannot change the position type of a checkpoint");
            }
        }
        check_vocab_fits(dir, start.tokenizer.vocab_size(), cfg.vocab_size)?;
        return Ok(start);
    }
    let (Some(config), Some(vocab)) = (&args.config, &args.vocab) else {
        bail!("give --config and --vocab, or --init DIR");
    };
    Ok(ModelStart::fresh(
        config,
        vocab,
        args.position.map(Into::into),
    )?)
}

/// Runs `roformer train mlm`.
///
/// # Errors
/// Bad arguments, unreadable inputs, a resume that is not the run in --out, a non-finite loss
/// (the last good checkpoint stays), and file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let (out, resume) = (args.run.out.clone(), args.run.resume);
    let (args, recorded) = resolve(args, &out, resume, "mlm")?;
    args.validate()?;
    let paths = prepare_out(&args)?;
    let hook = FaultInSave::from_env()?.map(|f| f.hook(stop));
    let start = model_start(&args, &paths)?;
    check_position_table(&start.config, args.seq_len)?;
    let mut options = args.run.options(CommandRun {
        model: &start,
        task: TaskOptions::MaskedLm(args.data_options()),
        steps: args.steps,
        lr: args.lr,
        seed: args.seed,
        save_hook: hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep)),
    });
    options.dump = args.dump_steps.map(|steps| DumpOptions {
        dir: out.join(DUMP_DIR),
        steps,
    });
    let record = |print: &Fingerprint| write_record(&out, &args, print);
    let view = args.run.view("MLM", recorded, stop, &record);
    let result = train(&options, view, |e| explain(e, &args.explained()));
    // The lock on --out is held until here, the run's last write.
    drop(paths.lock);
    result.map(drop)
}

impl Args {
    /// The flags that shape the blocks, for [`explain`].
    fn explained(&self) -> BlockFlags {
        BlockFlags {
            seq_len: self.seq_len,
            validation: self.validation,
            line_by_line: self.line_by_line,
        }
    }
}

/// Checks and prepares `--out` (the inputs `--config`, `--vocab`, `--init` and `--corpus` may
/// not be in what it replaces), and takes its lock.
///
/// # Errors
/// As [`open_out_dir`].
fn prepare_out(args: &Args) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    inputs.extend(args.config.as_deref().map(|p| ("--config", p)));
    inputs.extend(args.vocab.as_deref().map(|p| ("--vocab", p)));
    inputs.extend(args.init.as_deref().map(|p| ("--init", p)));
    inputs.extend(args.corpus.iter().map(|p| ("--corpus", p.as_path())));
    open_out_dir(&OutRequest {
        out: &args.run.out,
        resume: args.run.resume,
        overwrite: args.run.overwrite,
        init: args.init.as_deref(),
        inputs,
        plot: &args.run.plot,
    })
}
