//! The arguments every training command shares ([`RunArgs`], flattened into `train mlm` and
//! `train classify`), and the library's [`TrainOptions`] built from them.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::ValueEnum;
use roformer::train::checkpoint::SaveStep;
use roformer::train::{ModelStart, TaskOptions, TrainOptions};
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

impl From<Decay> for roformer::optim::Decay {
    fn from(d: Decay) -> Self {
        match d {
            Decay::Linear => roformer::optim::Decay::Linear,
            Decay::Cosine => roformer::optim::Decay::Cosine,
            Decay::Constant => roformer::optim::Decay::Constant,
        }
    }
}

/// The arguments of a training run that every training command takes (the peak learning
/// rate, steps, batch and seed have a default per command, and stay with it).
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct RunArgs {
    /// Micro-batches per optimisation step.
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
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
    /// Evaluate every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// Save a checkpoint every this many steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    pub save_every: u64,
    /// The output directory (checkpoint/, metrics.jsonl, loss plot, run.json; best/ for a
    /// classifier).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an output directory that holds another run.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Continue the run in --out from its checkpoint, with the arguments it recorded. --steps
    /// (not below the steps done), --precision, --save-every and --eval-every may change; any
    /// other flag must repeat the run's value. The config, vocabulary, data and parameter
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
    // `--json`: JSON lines on stdout instead of the progress bar and summary.
    #[command(flatten)]
    #[serde(flatten)]
    pub stdout: OutputArgs,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// What a command adds to its [`RunArgs`] for [`RunArgs::options`].
pub struct CommandRun<'a> {
    /// The model to train.
    pub model: &'a ModelStart,
    /// The task and its data.
    pub task: TaskOptions,
    /// `--steps`.
    pub steps: Option<u64>,
    /// `--lr`.
    pub lr: f64,
    /// `--seed`.
    pub seed: u64,
    /// The save's fault-injection hook ([`super::save_fault`]).
    pub save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
}

impl RunArgs {
    /// How a run of these flags shows itself: `what` titles its loss plot ("{what} training
    /// loss"), `write_record` writes its `run.json`.
    pub fn view<'a>(
        &'a self,
        what: &'a str,
        recorded: Option<Recorded>,
        stop: &'a AtomicBool,
        write_record: &'a dyn Fn(&Fingerprint) -> anyhow::Result<()>,
    ) -> RunView<'a> {
        RunView {
            out: &self.out,
            plot: &self.plot,
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

    /// The library's options for the run these arguments and `command`'s describe.
    pub fn options<'a>(&self, command: CommandRun<'a>) -> TrainOptions<'a> {
        TrainOptions {
            out: self.out.clone(),
            model: command.model,
            task: command.task,
            steps: command.steps,
            grad_accum: self.grad_accum,
            lr: command.lr,
            warmup: self.warmup,
            decay: self.decay.into(),
            weight_decay: self.weight_decay,
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
            seed: command.seed,
            eval_every: self.eval_every,
            save_every: self.save_every,
            precision: self.precision.unwrap_or_default().resolve(),
            resume: self.resume,
            save_hook: command.save_hook,
            dump: None,
        }
    }
}
