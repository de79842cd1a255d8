//! What `train mlm` and `train classify` share: the output directory's rules, the recorded
//! arguments of `--resume`, the tokenizer files of a checkpoint, and running the loop with its
//! report, plot and summary.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use clap::ValueEnum;
use roformer::optim::AdamW;
use roformer::train::run::{checkpoint_dir, read_trainer_state, Event, Outcome, Task, Trainer};
use roformer::{RoFormerConfig, RoFormerTokenizer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::loss_plot::LossFigure;
use super::progress::Reporter;
use crate::{json, output, plot};

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

/// Where a run's weights come from.
#[derive(Debug, Default)]
pub struct RunPaths {
    /// The checkpoint the model starts from (`--init`, or the run's own on `--resume`).
    pub weights: Option<PathBuf>,
    /// The checkpoint whose optimiser and trainer state continue (`--resume`).
    pub resume_state: Option<PathBuf>,
}

/// Whether `out` holds a run (or anything else that `--overwrite` would destroy).
fn holds_something(out: &Path) -> bool {
    std::fs::read_dir(out).is_ok_and(|mut entries| entries.next().is_some())
}

/// Checks and prepares the output directory: a new or empty one, or one replaced with
/// `--overwrite`; with `--resume`, one that holds a checkpoint to continue.
///
/// # Errors
/// A directory that holds another run without `--overwrite`, a resume without checkpoint, or
/// file errors.
pub fn prepare_out_dir(
    out: &Path,
    resume: bool,
    overwrite: bool,
    init: Option<&Path>,
) -> anyhow::Result<RunPaths> {
    if resume {
        let checkpoint = checkpoint_dir(out);
        if !checkpoint.join("trainer_state.json").is_file() {
            bail!(
                "{}: no checkpoint to resume (expected {})",
                out.display(),
                checkpoint.join("trainer_state.json").display()
            );
        }
        return Ok(RunPaths {
            weights: Some(checkpoint.clone()),
            resume_state: Some(checkpoint),
        });
    }
    if out.exists() && !out.is_dir() {
        bail!("{}: exists and is not a directory", out.display());
    }
    if holds_something(out) {
        if !overwrite {
            bail!(
                "{}: the directory is not empty (it may hold another run); pass --overwrite to \
                 replace it, or --resume to continue it",
                out.display()
            );
        }
        if init.is_some_and(|i| i.starts_with(out)) {
            bail!("--init points inside --out, which --overwrite would delete");
        }
        std::fs::remove_dir_all(out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(RunPaths {
        weights: init.map(Path::to_path_buf),
        resume_state: None,
    })
}

/// Writes the run's arguments to `out/run.json`, what `--resume` reads back.
///
/// # Errors
/// File errors.
pub fn write_run_args<A: Serialize>(out: &Path, args: &A) -> anyhow::Result<()> {
    let path = out.join("run.json");
    output::write(&path, json::to_string_pretty(args)?.as_bytes())
}

/// Reads the arguments `write_run_args` recorded.
///
/// # Errors
/// A missing or malformed `run.json`.
pub fn read_run_args<A: DeserializeOwned>(out: &Path) -> anyhow::Result<A> {
    let path = out.join("run.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no run to resume", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is malformed", path.display()))
}

/// Loads the optimiser state of a checkpoint and returns the steps it has done.
///
/// # Errors
/// Missing or mismatched state.
pub fn load_optimizer_state(optimizer: &mut AdamW, checkpoint: &Path) -> anyhow::Result<u64> {
    let state = read_trainer_state(checkpoint)?;
    let path = checkpoint.join("optimizer.safetensors");
    let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
        .with_context(|| format!("reading {}", path.display()))?;
    optimizer.load_state(&tensors)?;
    Ok(state.step)
}

/// `vocab.txt` and `tokenizer_config.json` of a checkpoint, so that transformers'
/// `RoFormerTokenizer` (`BertTokenizer` for BERT) and ours load it.
///
/// # Errors
/// Serialisation errors.
pub fn tokenizer_files(
    tokenizer: &RoFormerTokenizer,
    cfg: &RoFormerConfig,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let vocab = tokenizer.vocab();
    let mut text = String::new();
    for id in 0..vocab.len() as u32 {
        text.push_str(vocab.id_to_token(id).unwrap_or("[unused]"));
        text.push('\n');
    }
    let class = if cfg.base_prefix() == "bert" {
        "BertTokenizer"
    } else {
        "RoFormerTokenizer"
    };
    let config = json!({
        "tokenizer_class": class,
        "do_lower_case": tokenizer.config().do_lower_case,
        "model_max_length": cfg.max_position_embeddings,
    });
    Ok(vec![
        ("vocab.txt".into(), text.into_bytes()),
        (
            "tokenizer_config.json".into(),
            serde_json::to_vec_pretty(&config)?,
        ),
    ])
}

/// How a run shows itself.
#[derive(Debug, Clone, Copy)]
pub struct Display {
    /// JSON lines on stdout.
    pub json: bool,
    /// No progress bar.
    pub quiet: bool,
    /// The unigram entropy of the training tokens (masked LM), reported beside the losses.
    pub unigram_entropy: Option<f64>,
}

/// When a run stops before its last step.
#[derive(Debug, Clone, Copy)]
pub struct Stop<'a> {
    /// Set by Ctrl-C.
    pub flag: &'a AtomicBool,
    /// `--stop-after`: the step after which to stop as Ctrl-C would.
    pub after: Option<u64>,
}

/// Runs the loop with a [`Reporter`], then writes the loss plot and prints the summary.
///
/// # Errors
/// The loop's errors (a non-finite loss names its step and the last good checkpoint), and
/// file errors.
pub fn finish_run<T: Task>(
    trainer: &mut Trainer<'_, T>,
    out: &Path,
    plot_name: &Path,
    display: Display,
    stop: Stop<'_>,
    what: &str,
) -> anyhow::Result<()> {
    let json = display.json;
    let mut reporter = Reporter::new(
        out,
        trainer.step,
        trainer.options.steps,
        json,
        display.quiet,
    )?;
    let mut failure = None;
    let outcome = trainer.run(stop.flag, &mut |event: Event| {
        if let Event::Step(m) = &event {
            if stop.after == Some(m.step) {
                stop.flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        if failure.is_none() {
            if let Err(e) = reporter.event(event) {
                failure = Some(e);
            }
        }
    });
    reporter.finish();
    if let Some(e) = failure {
        return Err(e);
    }
    let plot_path = out.join(plot_name);
    let figure = LossFigure {
        history: &reporter.history,
        title: format!("{what} training loss"),
    };
    if !reporter.history.steps.is_empty() {
        plot::save(&figure, &plot_path, (900, 560))?;
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            let last = reporter
                .history
                .last_checkpoint
                .as_ref()
                .map(|p| format!("the last good checkpoint is {}", p.display()))
                .unwrap_or_else(|| "no checkpoint was written before it".into());
            return Err(anyhow::Error::new(e).context(format!("training stopped; {last}")));
        }
    };
    let last = reporter.history.steps.last();
    let summary = json!({
        "event": "summary",
        "outcome": match outcome { Outcome::Finished => "finished", Outcome::Stopped(_) => "stopped" },
        "steps": trainer.step,
        "final_train_loss": json::to_value(&last.map(|s| s.loss))?,
        "unigram_entropy": json::to_value(&display.unigram_entropy)?,
        "last_eval": json::to_value(&reporter.history.evals.last())?,
        "checkpoint": reporter.history.last_checkpoint,
        "plot": plot_path,
    });
    if json {
        println!("{summary}");
    } else {
        if let Outcome::Stopped(step) = outcome {
            eprintln!("stopped after step {step}; continue with --resume");
        }
        if let Some(s) = last {
            println!(
                "steps: {}   final training loss: {:.4}",
                trainer.step, s.loss
            );
        }
        if let Some(h) = display.unigram_entropy {
            println!("unigram entropy of the training tokens (the context-free loss): {h:.4}");
        }
        if let Some(e) = reporter.history.evals.last() {
            println!(
                "validation (step {}): loss {:.4}, accuracy {:.4}, perplexity {:.2}{}",
                e.step,
                e.loss,
                e.accuracy,
                e.perplexity,
                e.macro_f1
                    .map(|f| format!(", macro-F1 {f:.4}"))
                    .unwrap_or_default()
            );
        }
        if let Some(c) = &reporter.history.last_checkpoint {
            println!("checkpoint: {}", c.display());
        }
        println!("loss plot: {}", plot_path.display());
    }
    Ok(())
}
