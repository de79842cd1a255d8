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
use roformer::train::{ModelStart, Resumable, TaskOptions, TrainOptions};
use roformer::PositionEmbeddingType;
use serde::{Deserialize, Serialize};

use roformer::train::out_dir::{OutRequest, RunPaths, DUMP_DIR};
use roformer_runner::train::checks::{check_numbers, check_plot_name, check_vocab_fits, parse_lr};
use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::train::masked_lm::{check_position_table, explain, BlockFlags, Position};
use roformer_runner::train::observer::train;
use roformer_runner::train::out_dir::open_out_dir;
use roformer_runner::train::record::write_record;

use super::args::{with_default, CommandFlags, RunArgs, DEFAULT_PLOT};
use super::resume::{resolve, Flags, Settings, VERSION};
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

impl Format {
    /// The flag's value for a recorded format (`None`: detected per file, `auto`).
    pub fn of(format: Option<&CorpusFormat>) -> Format {
        match format {
            None => Format::Auto,
            Some(CorpusFormat::Lines) => Format::Lines,
            Some(CorpusFormat::Paragraphs) => Format::Paragraphs,
            Some(CorpusFormat::JsonLines { .. }) => Format::Jsonl,
            Some(CorpusFormat::ChinesePoetry) => Format::Poetry,
        }
    }
}

/// The value name clap parses to `value`.
fn value_name(value: impl ValueEnum) -> Option<String> {
    Some(value.to_possible_value()?.get_name().to_owned())
}

/// The library's defaults of the data flags not given.
fn data_defaults() -> MlmDataOptions {
    MlmDataOptions::default()
}

/// Arguments of `roformer train mlm`. A flag not given is `None` (or empty, or false) here:
/// a new run takes the library's default, a resume the run's value ([`super::resume`]).
/// Deserialised from the flat `run.json` of earlier versions.
#[derive(Debug, Clone, clap::Args, Deserialize)]
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
    /// The corpus format [default: auto].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The text field of JSON lines [default: text].
    #[arg(long)]
    pub text_field: Option<String>,
    /// Tokens per block, `[CLS]` and `[SEP]` included.
    #[arg(long, help = with_default(
        "Tokens per block, [CLS] and [SEP] included.",
        data_defaults().seq_len
    ))]
    pub seq_len: Option<usize>,
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
    #[arg(long, help = with_default(
        "Also train on the lines of this share of the documents (chosen by hash) as \
         documents without punctuation, so that the model sees texts that end on a character \
         (举头望明[MASK]); after the simplified copies, on each side of the split.",
        data_defaults().line_share
    ))]
    #[serde(default)]
    pub also_lines: Option<f64>,
    /// With packed blocks, train this share of the documents (lines included; chosen by hash)
    /// one per block, padded, as a short text alone (as `fill-mask` sees it).
    #[arg(long, help = with_default(
        "With packed blocks, train this share of the documents (lines included; chosen by \
         hash) one per block, padded, as a short text alone (as fill-mask sees it).",
        data_defaults().alone_share
    ))]
    #[serde(default)]
    pub alone_share: Option<f64>,
    /// Share of documents held out for validation, by hash of the text.
    #[arg(long, help = with_default(
        "Share of documents held out for validation, by hash of the text.",
        data_defaults().validation_fraction
    ))]
    pub validation: Option<f64>,
    /// Sequences per micro-batch.
    #[arg(long, help = with_default("Sequences per micro-batch.", data_defaults().batch_size))]
    pub batch: Option<usize>,
    /// Optimisation steps.
    #[arg(long, required_unless_present = "resume")]
    pub steps: Option<u64>,
    /// Peak learning rate (a finite number above 0).
    #[arg(long, value_parser = parse_lr, allow_negative_numbers = true, help = with_default(
        "Peak learning rate (a finite number above 0).",
        TrainOptions::PRETRAINING.lr
    ))]
    pub lr: Option<f64>,
    /// Seed of initialisation, data order, masks and dropout.
    #[arg(long, help = with_default(
        "Seed of initialisation, data order, masks and dropout.",
        TrainOptions::PRETRAINING.seed
    ))]
    pub seed: Option<u64>,
    /// Most validation batches per evaluation (0: all).
    #[arg(long, help = with_default(
        "Most validation batches per evaluation (0: all).",
        data_defaults().max_eval_batches
    ))]
    pub eval_batches: Option<usize>,
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

/// What the model of a `train mlm` run starts from, as its flags chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--vocab`.
    pub vocab: Option<PathBuf>,
    /// `--init`.
    pub init: Option<PathBuf>,
    /// `--position`.
    pub position: Option<Position>,
}

impl Resumable for Model {
    /// None: a resume continues the run's own checkpoint.
    const MAY_CHANGE: &'static [&'static str] = &[];
}

impl Args {
    /// `base` with `--format` and `--text-field` laid over it (`None`: detected per file).
    fn format_over(&self, base: &Option<CorpusFormat>) -> Option<CorpusFormat> {
        if self.format.is_none() && self.text_field.is_none() {
            return base.clone();
        }
        let base_field = match base {
            Some(CorpusFormat::JsonLines { field }) => Some(field.clone()),
            _ => None,
        };
        let field = || {
            (self.text_field.clone())
                .or(base_field.clone())
                .unwrap_or_else(|| "text".into())
        };
        let format = self.format.unwrap_or(Format::of(base.as_ref()));
        match format {
            Format::Auto => None,
            Format::Lines => Some(CorpusFormat::Lines),
            Format::Paragraphs => Some(CorpusFormat::Paragraphs),
            Format::Jsonl => Some(CorpusFormat::JsonLines { field: field() }),
            Format::Poetry => Some(CorpusFormat::ChinesePoetry),
        }
    }

    /// `base` with the data flags given laid over it.
    fn data_over(&self, base: &MlmDataOptions) -> MlmDataOptions {
        MlmDataOptions {
            corpus: if self.corpus.is_empty() {
                base.corpus.clone()
            } else {
                self.corpus.clone()
            },
            format: self.format_over(&base.format),
            seq_len: self.seq_len.unwrap_or(base.seq_len),
            packed: base.packed && !self.line_by_line,
            validation_fraction: self.validation.unwrap_or(base.validation_fraction),
            batch_size: self.batch.unwrap_or(base.batch_size),
            seed: self.seed.unwrap_or(base.seed),
            whole_word: base.whole_word || self.whole_word,
            max_eval_batches: self.eval_batches.unwrap_or(base.max_eval_batches),
            also_simplified: base.also_simplified || self.also_simplified,
            line_share: self.also_lines.unwrap_or(base.line_share),
            alone_share: self.alone_share.unwrap_or(base.alone_share),
        }
    }
}

impl Flags for Args {
    type Model = Model;
    type Data = MlmDataOptions;

    /// `--position` (`alibi`, not serde's `Alibi`) and `--format` (`jsonl --text-field body`,
    /// `auto` for none).
    fn flag_value(field: &str, value: &serde_json::Value) -> Option<String> {
        let value = value.clone();
        match field {
            "position" => value_name(serde_json::from_value::<Position>(value).ok()?),
            "format" => {
                let format: Option<CorpusFormat> = serde_json::from_value(value).ok()?;
                let name = value_name(Format::of(format.as_ref()))?;
                Some(match format {
                    Some(CorpusFormat::JsonLines { field }) => {
                        format!("{name} --text-field {field}")
                    }
                    _ => name,
                })
            }
            _ => None,
        }
    }

    fn defaults(&self) -> Settings<Model, MlmDataOptions> {
        Settings {
            version: VERSION,
            out: self.run.out.clone(),
            model: Model {
                config: None,
                vocab: None,
                init: None,
                position: None,
            },
            data: data_defaults(),
            train: TrainOptions::PRETRAINING,
            plot: PathBuf::from(DEFAULT_PLOT),
        }
    }

    fn settings_over(
        &self,
        base: &Settings<Model, MlmDataOptions>,
    ) -> Settings<Model, MlmDataOptions> {
        let flags = CommandFlags {
            steps: self.steps,
            lr: self.lr,
            seed: self.seed,
        };
        Settings {
            version: base.version,
            out: base.out.clone(),
            model: Model {
                config: self.config.clone().or(base.model.config.clone()),
                vocab: self.vocab.clone().or(base.model.vocab.clone()),
                init: self.init.clone().or(base.model.init.clone()),
                position: self.position.or(base.model.position),
            },
            data: self.data_over(&base.data),
            train: self.run.options_over(&base.train, flags),
            plot: self.run.plot_over(&base.plot),
        }
    }
}

/// The settings of a `train mlm` run.
type MlmSettings = Settings<Model, MlmDataOptions>;

/// The checks that need no file (again for settings read back from `run.json`).
///
/// # Errors
/// The first setting out of range, named by its flag.
fn validate(s: &MlmSettings, dump_steps: Option<u64>) -> anyhow::Result<()> {
    let (data, train) = (&s.data, &s.train);
    if data.corpus.is_empty() {
        bail!("give --corpus (files or directories)");
    }
    if data.batch_size == 0 {
        bail!("--batch must be at least 1");
    }
    if train.grad_accum == 0 {
        bail!("--grad-accum must be at least 1");
    }
    if train.steps == Some(0) {
        bail!("--steps must be at least 1");
    }
    if dump_steps == Some(0) {
        bail!("--dump-steps must be at least 1");
    }
    if dump_steps.is_some() && train.grad_accum != 1 {
        bail!(
            "--dump-steps dumps one batch a step: give --grad-accum 1, not {}",
            train.grad_accum
        );
    }
    if data.seq_len < 3 {
        bail!("--seq-len must be at least 3 ([CLS], a token, [SEP])");
    }
    if !(0.0..=1.0).contains(&data.line_share) {
        bail!("--also-lines must be a share in [0, 1]");
    }
    if !(0.0..=1.0).contains(&data.alone_share) {
        bail!("--alone-share must be a share in [0, 1]");
    }
    if data.alone_share > 0.0 && !data.packed {
        bail!("--alone-share mixes one-document blocks into packed ones: drop --line-by-line");
    }
    if !(0.0..1.0).contains(&data.validation_fraction) {
        bail!("--validation must be in [0, 1)");
    }
    let max_grad_norm = train.max_grad_norm.unwrap_or(0.0);
    check_numbers(train.lr, train.weight_decay, max_grad_norm)?;
    check_plot_name(&s.plot)
}

/// The config, tokenizer and weights a run starts from: the checkpoint of `--init` or of the
/// run resumed, or `--config` and `--vocab` (with `--position`).
///
/// # Errors
/// Unreadable inputs; `--position` other than a checkpoint's; a vocabulary larger than the
/// checkpoint's config.
fn model_start(model: &Model, paths: &RunPaths) -> anyhow::Result<ModelStart> {
    if let Some(dir) = &paths.weights {
        let start = ModelStart::from_checkpoint(dir)?;
        let cfg = &start.config;
        if let Some(p) = model.position {
            if PositionEmbeddingType::from(p) != cfg.position_embedding_type {
                bail!("--position cannot change the position type of a checkpoint");
            }
        }
        check_vocab_fits(dir, start.tokenizer.vocab_size(), cfg.vocab_size)?;
        return Ok(start);
    }
    let (Some(config), Some(vocab)) = (&model.config, &model.vocab) else {
        bail!("give --config and --vocab, or --init DIR");
    };
    Ok(ModelStart::fresh(
        config,
        vocab,
        model.position.map(Into::into),
    )?)
}

/// Runs `roformer train mlm`.
///
/// # Errors
/// Bad arguments, unreadable inputs, a resume that is not the run in --out, a non-finite loss
/// (the last good checkpoint stays), and file errors.
pub fn run(args: Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let out = args.run.out.clone();
    let (settings, recorded) = resolve(&args, &out, args.run.resume)?;
    validate(&settings, args.dump_steps)?;
    let paths = prepare_out(&args.run, &settings)?;
    let hook = FaultInSave::from_env()?.map(|f| f.hook(stop));
    let start = model_start(&settings.model, &paths)?;
    check_position_table(&start.config, settings.data.seq_len)?;
    let task = TaskOptions::MaskedLm(settings.data.clone());
    let save_hook = hook.as_ref().map(|h| h as &dyn Fn(u64, SaveStep));
    let mut run = args.run.run(&start, task, &settings.train, save_hook);
    run.dump = args.dump_steps.map(|steps| DumpOptions {
        dir: out.join(DUMP_DIR),
        steps,
    });
    let record = |print: &Fingerprint| write_record(&out, &settings, print);
    let view = args
        .run
        .view("MLM", &settings.plot, recorded, stop, &record);
    let result = train(&run, view, |e| explain(e, &explained(&settings.data)));
    // The lock on --out is held until here, the run's last write.
    drop(paths.lock);
    result.map(drop)
}

/// The settings that shape the blocks, by their flags, for [`explain`].
fn explained(data: &MlmDataOptions) -> BlockFlags {
    BlockFlags {
        seq_len: data.seq_len,
        validation: data.validation_fraction,
        line_by_line: !data.packed,
    }
}

/// Checks and prepares `--out` (the inputs `--config`, `--vocab`, `--init` and `--corpus` may
/// not be in what it replaces), and takes its lock.
///
/// # Errors
/// As [`open_out_dir`].
fn prepare_out(run: &RunArgs, s: &MlmSettings) -> anyhow::Result<RunPaths> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    inputs.extend(s.model.config.as_deref().map(|p| ("--config", p)));
    inputs.extend(s.model.vocab.as_deref().map(|p| ("--vocab", p)));
    inputs.extend(s.model.init.as_deref().map(|p| ("--init", p)));
    inputs.extend(s.data.corpus.iter().map(|p| ("--corpus", p.as_path())));
    open_out_dir(&OutRequest {
        out: &run.out,
        resume: run.resume,
        overwrite: run.overwrite,
        init: s.model.init.as_deref(),
        inputs,
        plot: &s.plot,
    })
}
