//! `roformer experiment ...` (the binary delegates to [`run`]): the paper's training claims at
//! small scale, each one command that trains (or reuses) its runs and writes `results.json`,
//! figures and `section.md` (its part of EXPERIMENTS.md) into its output directory.
//!
//! - `convergence`: MLM pre-training with rotary, absolute (BERT), sinusoidal and no positions,
//!   everything else identical (the paper's Figure 3, left);
//! - `length`: the pre-trained models of `convergence` on validation blocks longer and shorter
//!   than their training length;
//! - `long-docs`: fine-tuning them at 128 and 512 tokens to classify ten-poem documents by
//!   collection, or (`--task authorship`) to tell which of two candidates is by an anchor's
//!   poet;
//! - `linear`: the same pre-training with linear attention (Figure 3, right);
//! - `vision`: a ViT on Fashion-MNIST with 2D, flattened 1D, absolute and no positions, tested
//!   at other image sizes (its settings: `experiments/vision/settings.json`).
//!
//! Each experiment's numbers (arms, rates, seeds, steps, sizes) are read from
//! `experiments/NAME/settings.json` (`settings.rs`; `vision`: its `config.json`); the flags of the same names override them
//! for one command, and the section names the file.
//!
//! `convergence` and `linear` take `--sweep RATES`: each arm's learning rate tuned on seed 0,
//! then the arms compared at their own best rates (`sweep.rs`).
//!
//! Every run lives in `OUT/runs/NAME/` (a `train mlm` / `train classify` output directory);
//! a run with a `done.json` is not run again, and a run that a stop left with its checkpoint
//! continues from it (`interrupted.rs`), so an interrupted experiment continues where it
//! stopped when the same command is given again.
//!
//! An application crate, like the binary it serves: errors are [`anyhow::Error`]s with the
//! context a person reads, and it prints its progress; what it shares with the `train`
//! commands (the run's observer, output directory and record) is `roformer-runner`'s.
//!
//! A program runs an experiment as the binary does: [`Command`] is a clap subcommand, [`run`]
//! runs it (here `convergence` with two arms and one seed, its other numbers from
//! `experiments/convergence/settings.json`).
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(subcommand)]
//!     experiment: roformer_experiments::Command,
//! }
//! let argv = ["x", "convergence", "--arms", "rotary,absolute", "--seeds", "1", "--out", "runs"];
//! let cli = Cli::parse_from(argv);
//! roformer_experiments::run(cli.experiment)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

#![warn(missing_docs)]

mod convergence;
mod done;
mod figure;
mod interrupted;
mod length;
mod linear;
mod long_docs;
mod pretrain;
mod settings;
mod stats;
mod summary;
mod sweep;
mod vision;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::bail;
use roformer::train::{Finished, ModelStart, TrainError, TrainRun};
use serde::Serialize;

use interrupted::Interrupted;
use roformer::train::out_dir::OutRequest;
use roformer_runner::train::observer::{train, RunView};
use roformer_runner::train::out_dir::open_out_dir;
use roformer_runner::train::record::{write_record, Recorded};
use roformer_runner::{json, output};

/// The experiments.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// MLM convergence: rotary against absolute, sinusoidal, ALiBi, T5 and no positions
    /// (`--sweep`: each at its own best learning rate).
    Convergence(pretrain::Flags),
    /// Validation MLM loss at lengths 64..4096 of the models `convergence` pre-trained at 128,
    /// rotary ones also under the context-extension scalings.
    Length(length::Args),
    /// Long inputs at 128 and 512 tokens, fine-tuned from `convergence`: ten-poem documents
    /// by collection, or (`--task authorship`) which of two candidates is an anchor poet's.
    LongDocs(long_docs::Flags),
    /// MLM convergence with linear attention: rotary against none and absolute (`--sweep`:
    /// each at its own best learning rate).
    Linear(pretrain::Flags),
    /// Seed 003 on Fashion-MNIST: a ViT with 2D (axial, mixed), flattened 1D, absolute and no
    /// positions, trained at 28 x 28 and tested at 20..56, and the rotations' relativity and
    /// invertibility.
    Vision(vision::Args),
}

/// Runs an experiment; Ctrl-C stops the current run after its step and exits (the same
/// command continues).
///
/// # Errors
/// The runs' errors, unreadable inputs, file errors.
pub fn run(command: Command) -> anyhow::Result<()> {
    let stop = roformer_runner::train::stop_flag();
    match command {
        Command::Convergence(a) => convergence::run(&a, &stop),
        Command::Length(a) => length::run(&a),
        Command::LongDocs(a) => long_docs::run(&a, &stop),
        Command::Linear(a) => linear::run(&a, &stop),
        Command::Vision(a) => vision::run(&a, &stop),
    }
}

/// The command line that was run, for the reports.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("roformer {}", args.join(" "))
}

/// Refuses a list flag (`--arms`, `--lengths`) that names a value twice: each would be run and
/// reported twice.
///
/// # Errors
/// "--arms names absolute twice (absolute,absolute); give each once".
fn refuse_duplicates<T: PartialEq + std::fmt::Display>(
    flag: &str,
    values: &[T],
) -> anyhow::Result<()> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            let list: Vec<String> = values.iter().map(ToString::to_string).collect();
            bail!(
                "{flag} names {v} twice ({}); give each once",
                list.join(",")
            );
        }
    }
    Ok(())
}

/// Fails when Ctrl-C stopped the last run (it is left unfinished, to be run again).
fn check_stopped(stop: &AtomicBool) -> anyhow::Result<()> {
    if stop.load(Ordering::SeqCst) {
        bail!("stopped; give the same command again to continue");
    }
    Ok(())
}

/// Trains one run of an experiment into its directory `run.out`, quietly, with the same
/// files as a `train` command: `run.json` (holding `record`), `metrics.jsonl`, `loss.png` and
/// `checkpoint/`. With `interrupted` (and `run.resume`, and `run.model` loaded from
/// its checkpoint) it continues that run; otherwise it replaces what an unfinished run left
/// there (none of `inputs` may lie inside it). `what` titles the loss plot; `explain` names
/// the flags behind a failure before the first step. Returns the wall seconds of the run,
/// its earlier parts included, and records them for a next part.
///
/// # Errors
/// The run's errors, and file errors.
fn train_run(
    run: &TrainRun<'_>,
    (inputs, interrupted): (Vec<(&'static str, &Path)>, Option<&Interrupted>),
    record: &impl Serialize,
    what: &str,
    stop: &AtomicBool,
    explain: impl FnOnce(TrainError) -> anyhow::Error,
) -> anyhow::Result<f64> {
    let dir = run.out.as_path();
    let plot = Path::new("loss.png");
    let paths = open_out_dir(&OutRequest {
        out: dir,
        resume: run.resume,
        overwrite: !run.resume,
        init: None,
        inputs,
        plot,
    })?;
    let recorded = interrupted.map(|i| Recorded {
        fingerprint: i.fingerprint.clone(),
    });
    let view = RunView {
        out: dir,
        plot,
        what,
        json: false,
        quiet: true,
        resume: run.resume,
        recorded,
        stop,
        stop_after: None,
        write_record: &|print| write_record(dir, record, print),
        continuation: "give the same command again to continue it",
    };
    let started = Instant::now();
    let result = train(run, view, explain);
    let seconds = interrupted.map_or(0.0, |i| i.seconds) + started.elapsed().as_secs_f64();
    // Kept whatever the outcome: a stop can also come after the last step, before the
    // experiment marks the run done. The run's own error is the one to report; a lost time
    // record only undercounts.
    if let Err(e) = interrupted::record_seconds(dir, seconds) {
        eprintln!("warning: the time of this part of the run is not recorded: {e:#}");
    }
    // The lock on the run's directory is held until its last write.
    drop(paths.lock);
    result.map(|_: Finished| seconds)
}

/// How an experiment's run starts: from `fresh` (the model a new run trains), or, when the
/// run in `dir` was interrupted with the settings of `record`, from its checkpoint. Says which
/// on stderr when it continues.
///
/// # Errors
/// A checkpoint that does not load, `fresh`'s errors.
fn start_of(
    dir: &Path,
    record: &impl Serialize,
    fresh: impl FnOnce() -> anyhow::Result<ModelStart>,
) -> anyhow::Result<(ModelStart, Option<Interrupted>)> {
    match Interrupted::find(dir, record)? {
        Some(interrupted) => {
            eprintln!(
                "continuing the interrupted run from {}",
                interrupted.checkpoint.display()
            );
            let start = ModelStart::from_checkpoint(&interrupted.checkpoint)?;
            Ok((start, Some(interrupted)))
        }
        None => Ok((fresh()?, None)),
    }
}

/// Writes `value` as pretty JSON to `dir/name`.
fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    output::write(&path, (json::to_string_pretty(value)? + "\n").as_bytes())?;
    Ok(path)
}

/// Writes `text` to `dir/section.md`.
fn write_section(dir: &Path, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("section.md");
    output::write(&path, text.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::refuse_duplicates;

    #[test]
    fn a_list_flag_naming_a_value_twice_is_refused() {
        assert!(refuse_duplicates("--lengths", &[128, 512]).is_ok());
        assert!(refuse_duplicates::<u32>("--lengths", &[]).is_ok());
        let err = refuse_duplicates("--arms", &["absolute", "rotary", "absolute"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--arms names absolute twice (absolute,rotary,absolute); give each once"
        );
    }
}
