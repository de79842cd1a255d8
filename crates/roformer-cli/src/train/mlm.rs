//! `roformer train mlm`: masked-LM pre-training from a config and a vocabulary (or from a
//! checkpoint with `--init`), or `--resume` of an interrupted run.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use candle_core::Device;
use clap::ValueEnum;
use roformer::data::CorpusFormat;
use roformer::optim::LrSchedule;
use roformer::shapes::ModelKind;
use roformer::train::budget::check_training_memory;
use roformer::train::checkpoint::SaveStep;
use roformer::train::mlm::{prepare_mlm_data, MlmData, MlmDataOptions, MlmTask};
use roformer::train::run::{LoopOptions, Trainer};
use roformer::train::{build_trainable, TrainError, Trainable};
use roformer::{PositionEmbeddingType, RoFormerConfig, RoFormerForMaskedLM, RoFormerTokenizer};
use serde::{Deserialize, Serialize};

use crate::precision::PrecisionArg;

use super::checks::{
    check_numbers, check_plot_name, check_vocab_fits, parse_lr, parse_max_grad_norm,
    parse_weight_decay,
};
use super::common::{
    finish_run, optimizer, prepare_out_dir, tokenizer_files, vocab_text, Decay, Display,
    OutRequest, RunPaths, Stop,
};
use super::fingerprint::{corpus_source, Fingerprint};
use super::resume::{check_same_run, resolve, write_record};
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
    /// Tokens per block, [CLS] and [SEP] included.
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
    /// Micro-batches per optimisation step.
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    /// Optimisation steps.
    #[arg(long, required_unless_present = "resume")]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, default_value_t = 5e-4, value_parser = parse_lr, allow_negative_numbers = true)]
    pub lr: f64,
    /// Warm-up steps (linear from 0 to the peak).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Decay after the warm-up.
    #[arg(long, value_enum, default_value = "linear")]
    pub decay: Decay,
    /// AdamW's decoupled weight decay (not on biases and norm weights; 0 or more).
    #[arg(long, default_value_t = 0.01, value_parser = parse_weight_decay, allow_negative_numbers = true)]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (a finite number; 0: no clipping).
    #[arg(long, default_value_t = 1.0, value_parser = parse_max_grad_norm, allow_negative_numbers = true)]
    pub max_grad_norm: f64,
    /// Seed of initialisation, data order, masks and dropout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Evaluate every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// Most validation batches per evaluation (0: all).
    #[arg(long, default_value_t = 50)]
    pub eval_batches: usize,
    /// Save a checkpoint every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub save_every: u64,
    /// The output directory (checkpoint/, metrics.jsonl, loss plot, run.json).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an output directory that holds another run.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Continue the run in --out from its checkpoint, with the arguments it recorded. --steps
    /// (not below the steps done), --precision, --save-every and --eval-every may change; any
    /// other flag must repeat the run's value. The config, vocabulary, corpus and parameter
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
    /// JSON lines on stdout instead of the progress bar and table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `--position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Position {
    /// RoPE (RoFormer).
    Rotary,
    /// Learned absolute positions (BERT).
    Absolute,
    /// Fixed sinusoidal positions added to the embeddings.
    Sinusoidal,
    /// No positions.
    None,
}

impl From<Position> for PositionEmbeddingType {
    fn from(p: Position) -> Self {
        match p {
            Position::Rotary => PositionEmbeddingType::Rotary,
            Position::Absolute => PositionEmbeddingType::Absolute,
            Position::Sinusoidal => PositionEmbeddingType::Sinusoidal,
            Position::None => PositionEmbeddingType::None,
        }
    }
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

    /// The loop's settings for a run of `steps` steps.
    fn loop_options(&self, steps: u64) -> LoopOptions {
        LoopOptions {
            steps,
            grad_accum: self.grad_accum,
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
            seed: self.seed,
            eval_every: self.eval_every,
            save_every: self.save_every,
        }
    }

    /// The checks that need no file (again for arguments read back from `run.json`).
    fn validate(&self) -> anyhow::Result<()> {
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if self.grad_accum == 0 {
            bail!("--grad-accum must be at least 1");
        }
        if self.steps == Some(0) {
            bail!("--steps must be at least 1");
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
        check_numbers(self.lr, self.weight_decay, self.max_grad_norm)?;
        check_plot_name(&self.plot)
    }
}

/// The config, tokenizer and starting weights of a fresh or `--init` run.
fn model_and_tokenizer(
    args: &Args,
    paths: &RunPaths,
) -> anyhow::Result<(
    RoFormerConfig,
    RoFormerTokenizer,
    Option<roformer::Checkpoint>,
)> {
    if let Some(dir) = &paths.weights {
        let md = roformer::ModelDir::open(dir)?;
        let tokenizer = RoFormerTokenizer::from_dir(dir)?;
        let cfg = md.config.clone();
        if let Some(p) = args.position {
            if PositionEmbeddingType::from(p) != cfg.position_embedding_type {
                bail!("--position cannot change the position type of a checkpoint");
            }
        }
        check_vocab_fits(dir, tokenizer.vocab_size(), cfg.vocab_size)?;
        return Ok((cfg, tokenizer, Some(md.checkpoint)));
    }
    let (Some(config), Some(vocab)) = (&args.config, &args.vocab) else {
        bail!("give --config and --vocab, or --init DIR");
    };
    let mut cfg = RoFormerConfig::from_file(config)?;
    let tokenizer = RoFormerTokenizer::new(
        roformer::tokenizer::Vocab::from_file(vocab)?,
        roformer::tokenizer::TokenizerConfig::default(),
    )?;
    cfg.vocab_size = tokenizer.vocab_size();
    if let Some(p) = args.position {
        cfg.position_embedding_type = p.into();
    }
    Ok((cfg, tokenizer, None))
}

/// Runs `roformer train mlm`.
///
/// # Errors
/// Bad arguments, unreadable inputs, a resume that is not the run in --out, a non-finite loss
/// (the last good checkpoint stays), and file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let (out, resume) = (args.out.clone(), args.resume);
    let (args, recorded) = resolve(args, &out, resume, "mlm")?;
    args.validate()?;
    let paths = prepare_out(&args)?;
    let fault = FaultInSave::from_env()?;
    let save_hook = fault.map(|f| f.hook(stop));
    let (cfg, tokenizer, checkpoint) = model_and_tokenizer(&args, &paths)?;
    check_fits(&cfg, &args)?;
    let Trainable {
        model,
        params,
        initialised,
        ..
    } = build_trainable::<RoFormerForMaskedLM>(&cfg, checkpoint.as_ref(), args.seed, &Device::Cpu)?;
    if checkpoint.is_some() && !initialised.is_empty() && !args.json {
        eprintln!(
            "initialised (not in the checkpoint): {}",
            initialised.join(", ")
        );
    }
    let data_options = args.data_options();
    let data = prepare_data(&tokenizer, &data_options, &args)?;
    if !args.json && !args.resume {
        announce(&data, args.seq_len, params.element_count());
    }
    let tokenizer_files = tokenizer_files(&tokenizer, &cfg)?;
    let print = Fingerprint::new(
        &cfg,
        &params,
        vocab_text(&tokenizer_files),
        data.sources.iter().map(corpus_source).collect(),
    )?;
    if let Some(recorded) = &recorded {
        check_same_run(&args.out, recorded.fingerprint.as_ref(), &print)?;
    }
    let steps = args.steps.unwrap_or(1);
    let resume_state = paths.resume_state.as_deref();
    let (optimizer, done) = optimizer(&params, args.lr, args.weight_decay, resume_state, steps)?;
    let task = MlmTask {
        model: &model,
        params: &params,
        data: &data,
        max_eval_batches: args.eval_batches,
        tokenizer_files,
        precision: args.precision.unwrap_or_default().resolve(),
    };
    write_record(&args.out, &args, &print)?;
    let mut trainer = Trainer {
        task,
        params: &params,
        optimizer,
        schedule: LrSchedule::new(args.lr, args.warmup, steps, args.decay.into())?,
        options: args.loop_options(steps),
        out: args.out.clone(),
        step: done,
        task_record: crate::json::to_value(&data_options)?,
        last_eval: None,
        save_hook: save_hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep)),
    };
    let display = Display {
        json: args.json,
        quiet: args.quiet,
        unigram_entropy: Some(data.unigram_entropy),
    };
    let stop = Stop {
        flag: stop,
        after: args.stop_after,
    };
    let result = finish_run(&mut trainer, &args.out, &args.plot, display, stop, "MLM");
    // The lock on --out is held until here, the run's last write.
    drop(paths.lock);
    result
}

/// Says on stderr what a fresh run trains on: documents, blocks, parameters and the unigram
/// entropy of the training tokens.
fn announce(data: &MlmData, seq_len: usize, parameters: usize) {
    eprintln!(
        "{} documents: {} training blocks of {} tokens ({} tokens), {} validation blocks; \
             {} parameters; unigram entropy {:.3} nats",
        data.documents,
        data.blocks.0,
        seq_len,
        data.train_tokens,
        data.blocks.1,
        parameters,
        data.unigram_entropy
    );
}

/// Checks and prepares `--out` (the inputs `--config`, `--vocab`, `--init` and `--corpus` may
/// not be in what it replaces), and takes its lock.
///
/// # Errors
/// As [`prepare_out_dir`].
fn prepare_out(args: &Args) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    inputs.extend(args.config.as_deref().map(|p| ("--config", p)));
    inputs.extend(args.vocab.as_deref().map(|p| ("--vocab", p)));
    inputs.extend(args.init.as_deref().map(|p| ("--init", p)));
    inputs.extend(args.corpus.iter().map(|p| ("--corpus", p.as_path())));
    prepare_out_dir(&OutRequest {
        out: &args.out,
        resume: args.resume,
        overwrite: args.overwrite,
        init: args.init.as_deref(),
        inputs,
        plot: &args.plot,
    })
}

/// Checks that `--seq-len` fits an absolute position table and the run fits in memory.
///
/// # Errors
/// Either does not.
fn check_fits(cfg: &RoFormerConfig, args: &Args) -> anyhow::Result<()> {
    if cfg.position_embedding_type == PositionEmbeddingType::Absolute
        && args.seq_len > cfg.max_position_embeddings
    {
        bail!(
            "--seq-len {} is past the absolute position table (max_position_embeddings = {})",
            args.seq_len,
            cfg.max_position_embeddings
        );
    }
    check_training_memory(cfg, ModelKind::MaskedLm, args.batch, args.seq_len).context(
        "the run does not fit in memory: lower --batch or --seq-len, or use a smaller model",
    )?;
    Ok(())
}

/// The training and validation blocks of the corpus; a corpus too short for one block names
/// the flags that set the block.
///
/// # Errors
/// As [`prepare_mlm_data`].
fn prepare_data(
    tokenizer: &RoFormerTokenizer,
    options: &MlmDataOptions,
    args: &Args,
) -> anyhow::Result<MlmData> {
    prepare_mlm_data(tokenizer, options).map_err(|e| match e {
        e @ TrainError::NoTrainingBlock { .. } => {
            let line_by_line = if args.line_by_line {
                ", --line-by-line"
            } else {
                ""
            };
            let flags = format!(
                "--seq-len {}, --validation {}{line_by_line}",
                args.seq_len, args.validation
            );
            anyhow::Error::new(e).context(flags)
        }
        e => e.into(),
    })
}
