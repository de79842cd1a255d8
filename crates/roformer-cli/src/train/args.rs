//! The arguments every training command shares ([`RunArgs`], flattened into `train mlm` and
//! `train classify`), and the library's [`TrainOptions`] and [`TrainRun`] built from them.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use clap::ValueEnum;
use roformer::train::checkpoint::SaveStep;
use roformer::train::{ModelStart, TaskOptions, TrainOptions, TrainRun};
use serde::{Deserialize, Serialize};

use roformer_runner::output::OutputArgs;
use roformer_runner::precision::PrecisionArg;
use roformer_runner::train::checks::{parse_max_grad_norm, parse_weight_decay};
use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::train::observer::RunView;
use roformer_runner::train::record::Recorded;

/// `--decay`: the learning rate after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Decay {
    /// Linearly to 0 at the last step.
    Linear,
    /// Half a cosine to 0 at the last step.
    Cosine,
    /// Constant.
    Constant,
}

impl Decay {
    /// The flag's value: `linear`, `cosine` or `constant`.
    pub fn name(self) -> &'static str {
        match self {
            Decay::Linear => "linear",
            Decay::Cosine => "cosine",
            Decay::Constant => "constant",
        }
    }
}

impl From<roformer::optim::Decay> for Decay {
    fn from(d: roformer::optim::Decay) -> Self {
        match d {
            roformer::optim::Decay::Linear => Decay::Linear,
            roformer::optim::Decay::Cosine => Decay::Cosine,
            roformer::optim::Decay::Constant => Decay::Constant,
        }
    }
}

impl From<Decay> for roformer::optim::Decay {
    fn from(d: Decay) -> Self {
        match d {
            Decay::Linear => roformer::optim::Decay::Linear,
            Decay::Cosine => roformer::optim::Decay::Cosine,
            Decay::Constant => roformer::optim::Decay::Constant,
        }
    }
}

/// The library's defaults that the flags of a training take when not given.
pub const DEFAULTS: TrainOptions = TrainOptions::PRETRAINING;

/// The loss plot's file name when `--plot` is not given.
pub const DEFAULT_PLOT: &str = "loss.png";

/// A flag's help: `text`, then the default it takes from the library's options.
pub fn with_default(text: &str, value: impl std::fmt::Display) -> String {
    format!("{text} [default: {value}; on --resume, the run's]")
}

/// `--resume`'s help, naming the flags that a resume may change
/// ([`roformer::train::Resumable::MAY_CHANGE`]).
fn resume_help() -> String {
    let may_change: Vec<String> = super::resume::may_change().collect();
    format!(
        "Continue the run in --out from its checkpoint, with the settings it recorded. {} may \
         change (--steps not below the steps done); any other flag must repeat the run's \
         value. The config, vocabulary, data and parameter shapes must be the run's.",
        may_change.join(", ")
    )
}

/// The arguments of a training run that every training command takes (the peak learning
/// rate, steps, batch and seed have a default per command, and stay with it). A flag not
/// given is `None` here: a new run takes the library's default ([`DEFAULTS`]), a resume the
/// run's value. Deserialised from the flat `run.json` of earlier versions.
#[derive(Debug, Clone, clap::Args, Deserialize)]
pub struct RunArgs {
    /// Micro-batches per optimisation step.
    #[arg(long, help = with_default("Micro-batches per optimisation step.", DEFAULTS.grad_accum))]
    pub grad_accum: Option<usize>,
    /// Warm-up steps (linear from 0 to the peak).
    #[arg(long, help = with_default("Warm-up steps (linear from 0 to the peak).", DEFAULTS.warmup))]
    pub warmup: Option<u64>,
    /// Decay after the warm-up.
    #[arg(long, value_enum, help = with_default("Decay after the warm-up.", Decay::from(DEFAULTS.decay).name()))]
    pub decay: Option<Decay>,
    /// AdamW's decoupled weight decay (not on biases and norm weights; 0 or more).
    #[arg(
        long,
        value_parser = parse_weight_decay,
        allow_negative_numbers = true,
        help = with_default(
            "AdamW's decoupled weight decay (not on biases and norm weights; 0 or more).",
            DEFAULTS.weight_decay
        )
    )]
    pub weight_decay: Option<f64>,
    /// Clip the global gradient norm to this (a finite number; 0: no clipping).
    #[arg(
        long,
        value_parser = parse_max_grad_norm,
        allow_negative_numbers = true,
        help = with_default(
            "Clip the global gradient norm to this (a finite number; 0: no clipping).",
            DEFAULTS.max_grad_norm.unwrap_or(0.0)
        )
    )]
    pub max_grad_norm: Option<f64>,
    /// Evaluate every this many steps (0: at the end only).
    #[arg(long, help = with_default("Evaluate every this many steps (0: at the end only).", DEFAULTS.eval_every))]
    pub eval_every: Option<u64>,
    /// Save a checkpoint every this many steps (0: at the end only).
    #[arg(long, help = with_default("Save a checkpoint every this many steps (0: at the end only).", DEFAULTS.save_every))]
    pub save_every: Option<u64>,
    /// The output directory (checkpoint/, metrics.jsonl, loss plot, run.json; best/ for a
    /// classifier).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an output directory that holds another run.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Continue the run in --out from its checkpoint, with the settings it recorded.
    #[arg(long, help = resume_help())]
    pub resume: bool,
    /// The loss plot's file name in --out (.png or .svg; a name, not a path: it is always
    /// written in --out).
    #[arg(long, help = with_default(
        "The loss plot's file name in --out (.png or .svg; a name, not a path: it is always \
         written in --out).",
        DEFAULT_PLOT
    ))]
    pub plot: Option<PathBuf>,
    /// Stop after this step as Ctrl-C would (checkpoint written, --resume continues).
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// The precision of the matrix products. Master weights, optimiser state, norms, softmax
    /// and the loss stay f32; checkpoints are f32.
    #[arg(long, value_enum, help = with_default(
        "The precision of the matrix products. Master weights, optimiser state, norms, \
         softmax and the loss stay f32; checkpoints are f32.",
        DEFAULTS.precision
    ))]
    #[serde(default)]
    pub precision: Option<PrecisionArg>,
    // `--json`: JSON lines on stdout instead of the progress bar and summary.
    #[command(flatten)]
    #[serde(flatten)]
    pub stdout: OutputArgs,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The flags of [`TrainOptions`] that each command declares itself (their defaults differ).
pub struct CommandFlags {
    /// `--steps`.
    pub steps: Option<u64>,
    /// `--lr`.
    pub lr: Option<f64>,
    /// `--seed`.
    pub seed: Option<u64>,
}

impl RunArgs {
    /// `base` with the flags given laid over it (`base`: the defaults of a new run, or the
    /// options a resumed run recorded).
    pub fn options_over(&self, base: &TrainOptions, command: CommandFlags) -> TrainOptions {
        TrainOptions {
            steps: command.steps.or(base.steps),
            grad_accum: self.grad_accum.unwrap_or(base.grad_accum),
            lr: command.lr.unwrap_or(base.lr),
            warmup: self.warmup.unwrap_or(base.warmup),
            decay: self.decay.map_or(base.decay, Into::into),
            weight_decay: self.weight_decay.unwrap_or(base.weight_decay),
            max_grad_norm: self
                .max_grad_norm
                .map_or(base.max_grad_norm, |m| (m > 0.0).then_some(m)),
            seed: command.seed.unwrap_or(base.seed),
            eval_every: self.eval_every.unwrap_or(base.eval_every),
            save_every: self.save_every.unwrap_or(base.save_every),
            precision: self.precision.map_or(base.precision, Into::into),
        }
    }

    /// The plot's name: `--plot`, else `base`'s.
    pub fn plot_over(&self, base: &Path) -> PathBuf {
        self.plot.clone().unwrap_or_else(|| base.to_path_buf())
    }

    /// How a run of these flags shows itself: `what` titles its loss plot ("{what} training
    /// loss") drawn to `plot`, `write_record` writes its `run.json`.
    pub fn view<'a>(
        &'a self,
        what: &'a str,
        plot: &'a Path,
        recorded: Option<Recorded>,
        stop: &'a AtomicBool,
        write_record: &'a dyn Fn(&Fingerprint) -> anyhow::Result<()>,
    ) -> RunView<'a> {
        RunView {
            out: &self.out,
            plot,
            what,
            json: self.stdout.json,
            quiet: self.quiet,
            resume: self.resume,
            recorded,
            stop,
            stop_after: self.stop_after,
            write_record,
            continuation: "continue with --resume",
        }
    }

    /// The library's run of `options` (their precision as it runs on this CPU) on `model`
    /// for `task`, saving through `save_hook`.
    pub fn run<'a>(
        &self,
        model: &'a ModelStart,
        task: TaskOptions,
        options: &TrainOptions,
        save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
    ) -> TrainRun<'a> {
        TrainRun {
            options: TrainOptions {
                precision: PrecisionArg::from(options.precision).resolve(),
                ..options.clone()
            },
            resume: self.resume,
            save_hook,
            ..TrainRun::new(self.out.clone(), model, task)
        }
    }
}
