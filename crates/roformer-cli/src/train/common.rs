//! What `train mlm` and `train classify` share: the output directory's rules (its lock, what
//! `--overwrite` may replace, the repair of a killed save on `--resume`), the recorded
//! arguments of `--resume`, the tokenizer files of a checkpoint, and running the loop with its
//! report, plot and summary.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use clap::ValueEnum;
use roformer::optim::{AdamW, AdamWConfig};
use roformer::train::checkpoint::recover_dir;
use roformer::train::resume::{load_resume_state, ResumeFrom};
use roformer::train::run::{checkpoint_dir, read_trainer_state, Event, Outcome, Task, Trainer};
use roformer::train::Params;
use roformer::train::TrainError;
use roformer::{RoFormerConfig, RoFormerTokenizer};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::loss_plot::LossFigure;
use super::progress::{History, Reporter};
use crate::{json, plot};

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

/// Where a run's weights come from, and the lock that makes it the only writer of `--out`.
#[derive(Debug)]
pub struct RunPaths {
    /// The checkpoint the model starts from (`--init`, or the run's own on `--resume`).
    pub weights: Option<PathBuf>,
    /// The checkpoint whose optimiser and trainer state continue (`--resume`).
    pub resume_state: Option<PathBuf>,
    /// The lock on `--out`, held until the run ends.
    pub lock: OutLock,
}

/// The name of the lock file in a run's directory.
const LOCK_FILE: &str = ".lock";

/// An exclusive lock on a run's output directory: `OUT/.lock`, locked with the operating
/// system's file lock and holding the holder's process id, for as long as the value lives.
/// The kernel releases it when the process ends, however it ends (even by SIGKILL); the file
/// stays (deleting a lock file would let two processes lock two different files).
#[derive(Debug)]
pub struct OutLock {
    _file: File,
}

impl OutLock {
    /// Takes the lock of the directory `out`, creating its `.lock`.
    ///
    /// # Errors
    /// "DIR is in use by process N" while another process holds it; a `.lock` that is not a
    /// regular file; file errors (a file system without locks among them).
    pub fn acquire(out: &Path) -> anyhow::Result<Self> {
        let path = out.join(LOCK_FILE);
        // Opening follows a symbolic link, and the file is then truncated: only a regular file.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            bail!(
                "{}: not a regular file; it cannot be the run's lock (remove it)",
                path.display()
            );
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(in_use(out, &path)),
            Err(TryLockError::Error(e)) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot lock {} (does the file system support file locks?)",
                    path.display()
                )))
            }
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self { _file: file })
    }
}

/// The error for a directory whose lock another process holds, naming it by the id in the
/// lock file.
fn in_use(out: &Path, lock: &Path) -> anyhow::Error {
    let pid = std::fs::read_to_string(lock)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    let holder = match pid {
        Some(pid) => format!("process {pid}"),
        None => "another process".into(),
    };
    anyhow::anyhow!(
        "{} is in use by {holder} (it holds the lock {}); wait for that run to end or stop it \
         first",
        out.display(),
        lock.display()
    )
}

/// Fails when another process holds the lock of `out`; takes nothing (and creates nothing).
///
/// # Errors
/// "DIR is in use by process N".
pub fn check_not_in_use(out: &Path) -> anyhow::Result<()> {
    let path = out.join(LOCK_FILE);
    let Ok(file) = File::open(&path) else {
        return Ok(());
    };
    match file.try_lock_shared() {
        Err(TryLockError::WouldBlock) => Err(in_use(out, &path)),
        _ => Ok(()),
    }
}

/// Whether `out` holds anything besides a lock file (anything `--overwrite` would destroy).
fn holds_something(out: &Path) -> bool {
    std::fs::read_dir(out).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name() != std::ffi::OsStr::new(LOCK_FILE))
    })
}

/// What a run asks of its output directory.
#[derive(Debug)]
pub struct OutRequest<'a> {
    /// `--out`.
    pub out: &'a Path,
    /// `--resume`: continue the run in `out`.
    pub resume: bool,
    /// `--overwrite`: replace the run in `out`.
    pub overwrite: bool,
    /// `--init`: the checkpoint a fresh run starts from.
    pub init: Option<&'a Path>,
    /// Every input of the command with its flag (`--init` included): none may lie inside a
    /// directory that `--overwrite` replaces.
    pub inputs: Vec<(&'static str, &'a Path)>,
    /// `--plot`: the loss plot's file name, one of the files of a run.
    pub plot: &'a Path,
}

/// Checks, locks and prepares the output directory: a new or empty one, or a run's directory
/// replaced with `--overwrite`; with `--resume`, one that holds a checkpoint to continue (a
/// checkpoint that a kill left set aside is put back first). The directory stays locked while
/// the returned value lives.
///
/// # Errors
/// A directory in use by another process, one that holds another run without `--overwrite`,
/// `--overwrite` of a directory that is not a run's or that holds an input, a resume without
/// checkpoint, or file errors.
pub fn prepare_out_dir(request: &OutRequest<'_>) -> anyhow::Result<RunPaths> {
    let out = request.out;
    if request.resume {
        let lock = OutLock::acquire(out)?;
        for dir in [checkpoint_dir(out), out.join("best")] {
            let recovery =
                recover_dir(&dir).with_context(|| format!("repairing {}", dir.display()))?;
            if let Some(aside) = recovery.restored {
                eprintln!(
                    "note: {} was missing (a save was killed between its renames); restored \
                     the previous one from {}",
                    dir.display(),
                    aside.display()
                );
            }
        }
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
            lock,
        });
    }
    if out.exists() && !out.is_dir() {
        bail!("{}: exists and is not a directory", out.display());
    }
    let lock = if holds_something(out) {
        check_not_in_use(out)?;
        if !request.overwrite {
            bail!(
                "{}: the directory is not empty (it may hold another run); pass --overwrite to \
                 replace it, or --resume to continue it",
                out.display()
            );
        }
        check_inputs_outside(out, &request.inputs)?;
        check_is_a_run(out, request.plot)?;
        let lock = OutLock::acquire(out)?;
        // Again under the lock: nothing may have come in between.
        check_is_a_run(out, request.plot)?;
        clear_run(out)?;
        lock
    } else {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        OutLock::acquire(out)?
    };
    Ok(RunPaths {
        weights: request.init.map(Path::to_path_buf),
        resume_state: None,
        lock,
    })
}

/// Whether `path` (or, for a symbolic link, the link itself) lies in the directory whose
/// canonical path is `dir`.
fn lies_inside(path: &Path, dir: &Path) -> bool {
    let real = std::fs::canonicalize(path).ok();
    let link = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            std::fs::canonicalize(parent).ok().map(|p| p.join(name))
        }
        _ => None,
    };
    real.iter().chain(link.iter()).any(|p| p.starts_with(dir))
}

/// Refuses to replace `out` when one of the command's inputs lies inside it.
fn check_inputs_outside(out: &Path, inputs: &[(&str, &Path)]) -> anyhow::Result<()> {
    let dir = std::fs::canonicalize(out).with_context(|| format!("resolving {}", out.display()))?;
    for (flag, path) in inputs {
        if lies_inside(path, &dir) {
            bail!(
                "{flag} {} lies inside --out {}, which --overwrite would delete; move it out or \
                 choose another --out",
                path.display(),
                out.display()
            );
        }
    }
    Ok(())
}

/// The names of the loss plots a run in `out` may have written: this command's `--plot` and
/// the one `run.json` recorded (plain file names only).
fn plot_names(out: &Path, plot: &Path) -> Vec<OsString> {
    let recorded = std::fs::read_to_string(out.join("run.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["plot"].as_str().map(PathBuf::from));
    [Some(plot.to_path_buf()), recorded]
        .into_iter()
        .flatten()
        .filter_map(|p| match p.components().collect::<Vec<_>>()[..] {
            [Component::Normal(name)] => Some(name.to_os_string()),
            _ => None,
        })
        .collect()
}

/// Whether `name` (a directory when `is_dir`) is something a run writes into its directory:
/// `checkpoint/`, `best/`, `metrics.jsonl`, `run.json`, a loss plot, `.lock`, `done.json`
/// (written by `experiment`), and what a killed run leaves (`.checkpoint.partial-PID/` and `.old-PID/`, likewise for `best`, and
/// `.FILE.PID-N.tmp` of a file being replaced).
fn written_by_a_run(name: &str, is_dir: bool, plots: &[OsString]) -> bool {
    let pid_suffix = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    if is_dir {
        return matches!(name, "checkpoint" | "best")
            || ["checkpoint", "best"].iter().any(|d| {
                ["partial", "old"].iter().any(|tag| {
                    name.strip_prefix(&format!(".{d}.{tag}-"))
                        .is_some_and(pid_suffix)
                })
            });
    }
    // `done.json`: the experiment commands' record of a finished run in its directory.
    let files: Vec<&str> = ["metrics.jsonl", "run.json", "done.json"]
        .into_iter()
        .chain(plots.iter().filter_map(|p| p.to_str()))
        .collect();
    if name == LOCK_FILE || files.contains(&name) {
        return true;
    }
    // `.FILE.PID-N.tmp` (crate::output's temporary files).
    files.iter().any(|file| {
        name.strip_prefix(&format!(".{file}."))
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|rest| rest.split_once('-'))
            .is_some_and(|(pid, n)| pid_suffix(pid) && pid_suffix(n))
    })
}

/// Refuses to replace `out` unless it is recognisably a run's directory: it holds `run.json`
/// or `checkpoint/trainer_state.json`, and nothing a run does not write.
fn check_is_a_run(out: &Path, plot: &Path) -> anyhow::Result<()> {
    let plots = plot_names(out, plot);
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let entry = entry.with_context(|| format!("reading {}", out.display()))?;
        // The entry itself, not what a symbolic link points to.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        entries.push((entry.file_name(), is_dir));
    }
    entries.sort();
    for (name, is_dir) in &entries {
        let text = name.to_string_lossy();
        if !name
            .to_str()
            .is_some_and(|n| written_by_a_run(n, *is_dir, &plots))
        {
            bail!(
                "{}: not replaced: it holds {}{}, which is not part of a training run \
                 (--overwrite only replaces a run's directory: checkpoint/, best/, \
                 metrics.jsonl, run.json, the loss plot); remove it yourself or choose another \
                 --out",
                out.display(),
                text,
                if *is_dir { "/" } else { "" }
            );
        }
    }
    if !out.join("run.json").is_file() && !out.join("checkpoint/trainer_state.json").is_file() {
        bail!(
            "{}: not replaced: it holds no training run (neither run.json nor \
             checkpoint/trainer_state.json); remove it yourself or choose another --out",
            out.display()
        );
    }
    Ok(())
}

/// Removes everything in `out` but its lock file.
fn clear_run(out: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let entry = entry.with_context(|| format!("reading {}", out.display()))?;
        if entry.file_name() == std::ffi::OsStr::new(LOCK_FILE) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// The AdamW of a run over `params` (learning rate `lr`, decoupled weight decay
/// `weight_decay`), with the state of the checkpoint `resume_state` when the run resumes, and
/// the steps already done (0 for a fresh run).
///
/// # Errors
/// As [`load_optimizer_state`].
pub fn optimizer(
    params: &Params,
    lr: f64,
    weight_decay: f64,
    resume_state: Option<&Path>,
    total: u64,
) -> anyhow::Result<(AdamW, u64)> {
    let config = AdamWConfig {
        weight_decay,
        ..AdamWConfig::with_lr(lr)
    };
    let mut optimizer = AdamW::new(params.vars().to_vec(), config)?;
    let done = match resume_state {
        Some(state) => load_optimizer_state(&mut optimizer, state, total)?.done(),
        None => 0,
    };
    Ok((optimizer, done))
}

/// Loads the optimiser state of a checkpoint and checks the step its `trainer_state.json`
/// records against it and against the run's `total` steps ([`load_resume_state`]); says so
/// when the run has nothing left to do.
///
/// # Errors
/// Missing, malformed or mismatched state, and a step the run cannot continue from.
pub fn load_optimizer_state(
    optimizer: &mut AdamW,
    checkpoint: &Path,
    total: u64,
) -> anyhow::Result<ResumeFrom> {
    let (_, from) = load_resume_state(optimizer, checkpoint, total)?;
    if let ResumeFrom::Finished(steps) = from {
        eprintln!(
            "note: the run in {} has done all its {steps} steps: nothing to train (give \
             --steps above {steps} to train further)",
            checkpoint.parent().unwrap_or(checkpoint).display()
        );
    }
    Ok(from)
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

/// The `vocab.txt` bytes among a checkpoint's [`tokenizer_files`] (empty if absent).
pub fn vocab_text(files: &[(String, Vec<u8>)]) -> &[u8] {
    files
        .iter()
        .find(|(name, _)| name == "vocab.txt")
        .map_or(&[], |(_, bytes)| bytes)
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

/// Where a failed run's last good checkpoint is: the one this process saved last, or else the
/// one the run had before (a resumed run that failed before its first save).
fn last_good_checkpoint(saved: Option<&Path>, out: &Path) -> String {
    let checkpoint = checkpoint_dir(out);
    match (saved, read_trainer_state(&checkpoint)) {
        (Some(p), _) => format!("the last good checkpoint is {}", p.display()),
        (None, Ok(state)) => format!(
            "the last good checkpoint is {} (step {}, from before this command)",
            checkpoint.display(),
            state.step
        ),
        (None, Err(_)) => "no checkpoint was written before it".into(),
    }
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
    let (history, outcome) = run_reported(trainer, out, display, stop)?;
    let plot_path = out.join(plot_name);
    if !history.steps.is_empty() {
        let title = format!("{what} training loss");
        plot::save(
            &LossFigure {
                history: &history,
                title,
            },
            &plot_path,
            (900, 560),
        )?;
    }
    let signal = super::termination_signal();
    let outcome = outcome.map_err(|e| {
        let last = last_good_checkpoint(history.last_checkpoint.as_deref(), out);
        anyhow::Error::new(e).context(format!("training stopped; {last}"))
    })?;
    if display.json {
        println!(
            "{}",
            summary_json(&outcome, trainer.step, &history, display, &plot_path)?
        );
    } else {
        if let (Outcome::Stopped(step), None) = (&outcome, signal) {
            eprintln!("stopped after step {step}; continue with --resume");
        }
        print_summary(trainer.step, &history, display, &plot_path);
    }
    if let (Outcome::Stopped(step), Some(signal)) = (outcome, signal) {
        let saved = history
            .last_checkpoint
            .as_ref()
            .map(|p| format!("the checkpoint {} is saved", p.display()))
            .unwrap_or_else(|| "a checkpoint is saved".into());
        bail!("stopped by {signal} after step {step}; {saved}: continue with --resume");
    }
    Ok(())
}

/// Runs the loop, reporting every event (and stopping after `--stop-after`): the history
/// reported, and the loop's outcome.
///
/// # Errors
/// The reporter's errors (metrics file, stdout).
fn run_reported<T: Task>(
    trainer: &mut Trainer<'_, T>,
    out: &Path,
    display: Display,
    stop: Stop<'_>,
) -> anyhow::Result<(History, Result<Outcome, TrainError>)> {
    let (done, total) = (trainer.step, trainer.options.steps);
    let mut reporter = Reporter::new(out, done, total, display.json, display.quiet)?;
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
    match failure {
        Some(e) => Err(e),
        None => Ok((reporter.history, outcome)),
    }
}

/// The `--json` summary line of a run.
///
/// # Errors
/// A non-finite loss or metric (JSON has no NaN).
fn summary_json(
    outcome: &Outcome,
    steps: u64,
    history: &History,
    display: Display,
    plot_path: &Path,
) -> anyhow::Result<serde_json::Value> {
    Ok(json!({
        "event": "summary",
        "outcome": match outcome { Outcome::Finished => "finished", Outcome::Stopped(_) => "stopped" },
        "steps": steps,
        "final_train_loss": json::to_value(&history.steps.last().map(|s| s.loss))?,
        "unigram_entropy": json::to_value(&display.unigram_entropy)?,
        "last_eval": json::to_value(&history.evals.last())?,
        "checkpoint": history.last_checkpoint,
        "plot": plot_path,
    }))
}

/// The summary of a run as text.
fn print_summary(steps: u64, history: &History, display: Display, plot_path: &Path) {
    if let Some(s) = history.steps.last() {
        println!("steps: {steps}   final training loss: {:.4}", s.loss);
    }
    if let Some(h) = display.unigram_entropy {
        println!("unigram entropy of the training tokens (the context-free loss): {h:.4}");
    }
    if let Some(e) = history.evals.last() {
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
    if let Some(c) = &history.last_checkpoint {
        println!("checkpoint: {}", c.display());
    }
    println!("loss plot: {}", plot_path.display());
}
