//! The CLI's side of a training run ([`roformer::train::fit`]): what `train mlm`, `train
//! classify` and the experiments say about the run (on stderr), the check that a resume
//! continues the same run, `run.json`, the progress bar and `metrics.jsonl`, and after the
//! run the loss plot, the summary and the error of a failed or signalled run.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::bail;
use roformer::train::run::{checkpoint_dir, read_trainer_state, Event, Outcome};
use roformer::train::{fit, Finished, Observer, Prepared, PreparedData, TrainError, TrainRun};
use serde_json::json;

use super::fingerprint::{corpus_source, examples_source, Fingerprint};
use super::loss_plot::LossFigure;
use super::progress::{History, Reporter};
use super::record::{check_same_run, Recorded};
use super::signals;
use crate::{json, plot};

/// How a run shows itself and what it records.
pub struct RunView<'a> {
    /// The run's directory (`--out`).
    pub out: &'a Path,
    /// The loss plot's file name in `out`.
    pub plot: &'a Path,
    /// The plot's title: "{what} training loss".
    pub what: &'a str,
    /// JSON lines on stdout.
    pub json: bool,
    /// No progress bar.
    pub quiet: bool,
    /// A resume (no announcement of the data).
    pub resume: bool,
    /// What `run.json` recorded, checked on resume.
    pub recorded: Option<Recorded>,
    /// The stop flag, set by `stop_after`.
    pub stop: &'a AtomicBool,
    /// `--stop-after`: the step after which to stop as Ctrl-C would.
    pub stop_after: Option<u64>,
    /// Writes `run.json` with the run's fingerprint.
    pub write_record: &'a dyn Fn(&Fingerprint) -> anyhow::Result<()>,
    /// How a stopped run is continued, as said after a stop: "continue with --resume".
    pub continuation: &'a str,
}

/// Runs `run` with a [`CliObserver`], then writes the plot and prints the summary; a
/// failure before the first step goes through `explain` (which names the flags behind it).
///
/// # Errors
/// The run's errors (a failure in the loop names the last good checkpoint), file errors, and a
/// stop by SIGTERM or SIGHUP.
pub fn train(
    run: &TrainRun<'_>,
    view: RunView<'_>,
    explain: impl FnOnce(TrainError) -> anyhow::Error,
) -> anyhow::Result<Finished> {
    let stop = view.stop;
    // A forced exit waits while a save renames its directories (see `signals`).
    let guard = signals::rename_guard(run.save_hook);
    let mut guarded: TrainRun<'_> = run.clone();
    guarded.save_hook = Some(&guard);
    let mut observer = CliObserver::new(view);
    let result = fit(&guarded, &mut observer, stop);
    signals::leave_renames();
    observer.finish(result, explain)
}

/// The CLI's [`Observer`].
pub struct CliObserver<'a> {
    view: RunView<'a>,
    /// The unigram entropy of the training tokens (masked LM), reported beside the losses.
    unigram_entropy: Option<f64>,
    /// The run's fingerprint, once prepared.
    print: Option<Fingerprint>,
    /// Shows and records the events, from the first step on.
    reporter: Option<Reporter>,
    /// The first error recording an event (the run goes on; reported at the end).
    failure: Option<anyhow::Error>,
    /// Why this observer refused the run.
    refusal: Option<anyhow::Error>,
    /// Steps done (for the step of each save).
    step: u64,
}

impl<'a> CliObserver<'a> {
    /// An observer showing the run as `view` says.
    pub fn new(view: RunView<'a>) -> Self {
        Self {
            view,
            unigram_entropy: None,
            print: None,
            reporter: None,
            failure: None,
            refusal: None,
            step: 0,
        }
    }

    /// Keeps a refusal for [`Self::finish`] and hands the run its message.
    fn refuse(&mut self, result: anyhow::Result<()>) -> Result<(), TrainError> {
        result.map_err(|e| {
            let message = format!("{e:#}");
            self.refusal = Some(e);
            TrainError::Observer(message.into())
        })
    }

    /// Says what the run trains on, and checks that a resume continues the same run.
    fn check_prepared(&mut self, run: &Prepared<'_>) -> anyhow::Result<()> {
        if !self.view.json {
            announce(run, self.view.resume);
        }
        let sources = match run.data {
            PreparedData::MaskedLm { data, .. } => {
                self.unigram_entropy = Some(data.unigram_entropy);
                data.sources.iter().map(corpus_source).collect()
            }
            PreparedData::Classify {
                options,
                train,
                eval,
            } => {
                let mut sources = vec![examples_source("--train", &options.train, train)];
                if let Some(path) = &options.eval {
                    sources.push(examples_source("--eval", path, eval));
                }
                sources
            }
        };
        let vocab = vocab_text(run.tokenizer_files);
        let print = Fingerprint::new(run.config, run.params, vocab, sources)?;
        if let Some(recorded) = &self.view.recorded {
            check_same_run(self.view.out, recorded.fingerprint.as_ref(), &print)?;
        }
        self.print = Some(print);
        Ok(())
    }

    /// Notes a run with nothing left to do, writes `run.json` and opens the reporter.
    fn start(&mut self, done: u64, total: u64) -> anyhow::Result<()> {
        let out = self.view.out;
        self.step = done;
        if done > 0 {
            signals::note_saved(done);
        }
        if done > 0 && done == total {
            eprintln!(
                "note: the run in {} has done all its {total} steps: nothing to train (give \
                 --steps above {total} to train further)",
                out.display()
            );
        }
        if let Some(print) = &self.print {
            (self.view.write_record)(print)?;
        }
        let reporter = Reporter::new(out, done, total, self.view.json, self.view.quiet)?;
        self.reporter = Some(reporter);
        Ok(())
    }

    /// After [`fit`]: the loss plot, the summary, and the run's error, if any.
    ///
    /// # Errors
    /// A refusal of this observer, a failure before the loop (through `explain`), an error
    /// recording an event, the loop's error (naming the last good checkpoint), and a stop by
    /// SIGTERM or SIGHUP.
    pub fn finish(
        mut self,
        result: Result<Finished, TrainError>,
        explain: impl FnOnce(TrainError) -> anyhow::Error,
    ) -> anyhow::Result<Finished> {
        if let Some(refusal) = self.refusal.take() {
            return Err(refusal);
        }
        let Some(reporter) = self.reporter.take() else {
            return result.map_err(explain);
        };
        reporter.finish();
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        let stdout_gone = reporter.stdout_gone;
        let history = reporter.history;
        let view = &self.view;
        let plot_path = view.out.join(view.plot);
        if !history.steps.is_empty() {
            let title = format!("{} training loss", view.what);
            let figure = LossFigure {
                history: &history,
                title,
            };
            plot::save(&figure, &plot_path, (900, 560))?;
        }
        let finished = result.map_err(|e| {
            let last = last_good_checkpoint(history.last_checkpoint.as_deref(), view.out);
            anyhow::Error::new(e).context(format!("training stopped; {last}"))
        })?;
        let stopped = |by: &str, why: &str| stop_line(&finished, &history, view, by, why);
        if let (Outcome::Stopped(_), true) = (&finished.outcome, stdout_gone) {
            bail!(stopped("", ": standard output was closed by its reader"));
        }
        let signal = signals::termination_signal();
        let summary = Summary {
            finished: &finished,
            history: &history,
            unigram_entropy: self.unigram_entropy,
            plot: &plot_path,
            stop_note: match (&finished.outcome, signal) {
                (Outcome::Stopped(_), None) => Some(stopped("", "")),
                _ => None,
            },
        };
        summary.print(view.json)?;
        if let (Outcome::Stopped(_), Some(signal)) = (&finished.outcome, signal) {
            bail!(stopped(&format!(" by {signal}"), ""));
        }
        if let (false, Some(best)) = (view.json, &finished.best) {
            writeln!(
                std::io::stdout().lock(),
                "best dev model: {}",
                best.display()
            )?;
        }
        Ok(finished)
    }
}

impl Observer for CliObserver<'_> {
    fn prepared(&mut self, run: &Prepared<'_>) -> Result<(), TrainError> {
        let checked = self.check_prepared(run);
        self.refuse(checked)
    }

    fn starting(&mut self, done: u64, total: u64) -> Result<(), TrainError> {
        let started = self.start(done, total);
        self.refuse(started)
    }

    fn event(&mut self, event: Event) {
        match &event {
            Event::Step(m) => {
                self.step = m.step;
                if self.view.stop_after == Some(m.step) {
                    self.view.stop.store(true, Ordering::SeqCst);
                }
            }
            Event::Saved(_) => signals::note_saved(self.step),
            Event::Eval(_) => {}
        }
        if let (None, Some(reporter)) = (&self.failure, &mut self.reporter) {
            if let Err(e) = reporter.event(event) {
                self.failure = Some(e);
            }
            // Nobody reads the run's output any more: stop as SIGTERM would, saving first.
            if reporter.stdout_gone {
                self.view.stop.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// Says on stderr what a run trains on and what its model took from the checkpoint (a
/// resume only names the tensors a checkpoint lacked).
fn announce(run: &Prepared<'_>, resume: bool) {
    match run.data {
        PreparedData::MaskedLm { options, data } => {
            if run.from_checkpoint && !run.initialised.is_empty() {
                eprintln!(
                    "initialised (not in the checkpoint): {}",
                    run.initialised.join(", ")
                );
            }
            if !resume {
                eprintln!(
                    "{} documents: {} training blocks of {} tokens ({} tokens), {} validation \
                     blocks; {} parameters; unigram entropy {:.3} nats",
                    data.documents,
                    data.blocks.0,
                    options.seq_len,
                    data.train_tokens,
                    data.blocks.1,
                    run.params.element_count(),
                    data.unigram_entropy
                );
            }
        }
        PreparedData::Classify {
            options,
            train,
            eval,
        } if !resume => {
            let initialised = match run.initialised.is_empty() {
                true => "none".into(),
                false => run.initialised.join(", "),
            };
            eprintln!(
                "{} training and {} dev examples, labels {:?}; initialised: {initialised}; \
                 unused from the checkpoint: {}",
                train.len(),
                eval.len(),
                options.labels,
                run.unused.len()
            );
        }
        PreparedData::Classify { .. } => {}
    }
}

/// The `vocab.txt` bytes among a checkpoint's tokenizer files (empty if absent).
fn vocab_text(files: &[(String, Vec<u8>)]) -> &[u8] {
    files
        .iter()
        .find(|(name, _)| name == "vocab.txt")
        .map_or(&[], |(_, bytes)| bytes)
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

/// The line that says how a stopped run ended: by what (`by`: "" or " by SIGTERM"), after
/// which step, why (`why`: "" or ": standard output was closed ..."), and what it kept: the
/// checkpoint of its last completed step (saved by the stop or by an earlier save, with the
/// micro-batches of the next step it holds), or, before the first step completed, nothing.
fn stop_line(
    finished: &Finished,
    history: &History,
    view: &RunView<'_>,
    by: &str,
    why: &str,
) -> String {
    let step = finished.steps;
    if step == 0 {
        return format!(
            "stopped{by} before the first step completed{why}; nothing was saved (no step had \
             completed, so there is no checkpoint to resume)"
        );
    }
    let path = checkpoint_dir(view.out);
    let before = match history.last_checkpoint {
        None => ", from before this command",
        Some(_) => "",
    };
    let partial = match finished.accumulated {
        0 => String::new(),
        m => format!(
            ", with the {m} micro-batches of step {} done so far, which --resume continues",
            step + 1
        ),
    };
    format!(
        "stopped{by} after step {step}{why}; the checkpoint {} (step {step}{before}{partial}) \
         is saved: {}",
        path.display(),
        view.continuation
    )
}

/// The summary of a finished or stopped run.
struct Summary<'a> {
    finished: &'a Finished,
    history: &'a History,
    unigram_entropy: Option<f64>,
    plot: &'a Path,
    /// The line of a run stopped by Ctrl-C (printed on stderr with the text summary).
    stop_note: Option<String>,
}

impl Summary<'_> {
    /// Prints the summary: one JSON line with `json`, else text; the note of a stop by Ctrl-C
    /// goes to stderr either way.
    ///
    /// # Errors
    /// A non-finite loss or metric in JSON (JSON has no NaN), a failed write to standard
    /// output.
    fn print(&self, json: bool) -> anyhow::Result<()> {
        if let Some(note) = &self.stop_note {
            eprintln!("{note}");
        }
        if json {
            writeln!(std::io::stdout().lock(), "{}", self.to_json()?)?;
            return Ok(());
        }
        self.print_text()?;
        Ok(())
    }

    /// The `--json` summary line.
    fn to_json(&self) -> anyhow::Result<serde_json::Value> {
        let history = self.history;
        Ok(json!({
            "event": "summary",
            "outcome": match self.finished.outcome {
                Outcome::Finished => "finished",
                Outcome::Stopped(_) => "stopped",
            },
            "steps": self.finished.steps,
            "final_train_loss": json::to_value(&history.steps.last().map(|s| s.loss))?,
            "unigram_entropy": json::to_value(&self.unigram_entropy)?,
            "last_eval": json::to_value(&history.evals.last())?,
            "checkpoint": history.last_checkpoint,
            "plot": self.plot,
        }))
    }

    /// The summary as text.
    ///
    /// # Errors
    /// A failed write to standard output.
    fn print_text(&self) -> std::io::Result<()> {
        let history = self.history;
        let mut out = std::io::stdout().lock();
        if let Some(s) = history.steps.last() {
            writeln!(
                out,
                "steps: {}   final training loss: {:.4}",
                self.finished.steps, s.loss
            )?;
        }
        if let Some(h) = self.unigram_entropy {
            writeln!(
                out,
                "unigram entropy of the training tokens (the context-free loss): {h:.4}"
            )?;
        }
        if let Some(e) = history.evals.last() {
            writeln!(
                out,
                "validation (step {}): loss {:.4}, accuracy {:.4}, perplexity {:.2}{}",
                e.step,
                e.loss,
                e.accuracy,
                e.perplexity,
                e.macro_f1
                    .map(|f| format!(", macro-F1 {f:.4}"))
                    .unwrap_or_default()
            )?;
        }
        if let Some(c) = &history.last_checkpoint {
            writeln!(out, "checkpoint: {}", c.display())?;
        }
        writeln!(out, "loss plot: {}", self.plot.display())
    }
}
