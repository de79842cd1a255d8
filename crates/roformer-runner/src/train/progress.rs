//! What a training run shows and records: a progress bar (loss, tokens/s, ETA) on a terminal,
//! `metrics.jsonl` in the output directory, JSON lines on stdout with `--json`, and the loss
//! plot.

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use roformer::train::run::{EvalMetrics, Event, StepMetrics};

use crate::{json, output};

/// The records of a run, kept for the plot and the summary.
#[derive(Debug, Default)]
pub struct History {
    /// Every step.
    pub steps: Vec<StepMetrics>,
    /// Every evaluation; only the last keeps its confusion (whose size grows with the labels),
    /// so that the history grows with the evaluations, not with evaluations x labels.
    pub evals: Vec<EvalMetrics>,
    /// The last checkpoint written.
    pub last_checkpoint: Option<PathBuf>,
}

impl History {
    /// Adds an evaluation, dropping the confusion of the one before.
    fn push_eval(&mut self, m: EvalMetrics) {
        if let Some(previous) = self.evals.last_mut() {
            previous.confusion = None;
        }
        self.evals.push(m);
    }
}

/// Shows and records the events of a run.
pub struct Reporter {
    bar: ProgressBar,
    metrics: File,
    json: bool,
    /// What happened so far.
    pub history: History,
    /// Whether standard output's reader has gone (a closed pipe, as `| head` leaves): the
    /// `--json` lines stop there, `metrics.jsonl` goes on.
    pub stdout_gone: bool,
}

impl Reporter {
    /// A reporter for a run of `total` steps starting after `done`, appending to
    /// `out/metrics.jsonl` (truncated to the lines of steps up to `done`, so that a resumed
    /// run does not repeat steps lost after its checkpoint).
    ///
    /// # Errors
    /// When the metrics file cannot be read or written.
    pub fn new(out: &Path, done: u64, total: u64, json: bool, quiet: bool) -> anyhow::Result<Self> {
        let path = out.join("metrics.jsonl");
        let mut history = History::default();
        let mut kept = String::new();
        if done > 0 {
            let old = std::fs::read_to_string(&path).unwrap_or_default();
            for line in old.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if v["step"].as_u64().is_some_and(|s| s > done) {
                    continue;
                }
                match v["event"].as_str() {
                    Some("step") => history.steps.extend(serde_json::from_value(v.clone()).ok()),
                    Some("eval") => {
                        if let Ok(m) = serde_json::from_value(v.clone()) {
                            history.push_eval(m);
                        }
                    }
                    _ => {}
                }
                kept.push_str(line);
                kept.push('\n');
            }
        }
        output::write(&path, kept.as_bytes())?;
        let metrics = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let bar = if quiet || json || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{bar:30} step {pos}/{len}  {msg}  eta {eta}")
            {
                bar.set_style(style);
            }
            bar.set_position(done);
            bar
        };
        Ok(Reporter {
            bar,
            metrics,
            json,
            history,
            stdout_gone: false,
        })
    }

    fn record(&mut self, value: serde_json::Value) -> anyhow::Result<()> {
        writeln!(self.metrics, "{value}").context("writing metrics.jsonl")?;
        if self.json && !self.stdout_gone {
            match writeln!(std::io::stdout().lock(), "{value}") {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => self.stdout_gone = true,
                written => written.context("writing to standard output")?,
            }
        }
        Ok(())
    }

    /// Shows and records one event.
    ///
    /// # Errors
    /// When the metrics file cannot be written.
    pub fn event(&mut self, event: Event) -> anyhow::Result<()> {
        match event {
            Event::Step(m) => {
                let tokens_per_s = m.tokens as f64 / m.seconds.max(1e-9);
                self.bar.set_position(m.step);
                self.bar.set_message(format!(
                    "loss {:.4}  lr {:.2e}  {:.0} tok/s",
                    m.loss, m.lr, tokens_per_s
                ));
                let mut v = json::to_value(&m)?;
                v["event"] = serde_json::json!("step");
                v["tokens_per_s"] = serde_json::json!(json::finite("tokens_per_s", tokens_per_s)?);
                self.record(v)?;
                self.history.steps.push(m);
            }
            Event::Eval(m) => {
                let line = format!(
                    "step {}: validation loss {:.4}, accuracy {:.4}{}",
                    m.step,
                    m.loss,
                    m.accuracy,
                    m.macro_f1
                        .map(|f| format!(", macro-F1 {f:.4}"))
                        .unwrap_or_else(|| format!(", perplexity {:.2}", m.perplexity))
                );
                if !self.json {
                    self.bar.suspend(|| eprintln!("{line}"));
                }
                let mut v = json::to_value(&m)?;
                v["event"] = serde_json::json!("eval");
                self.record(v)?;
                self.history.push_eval(m);
            }
            Event::Saved(path) => {
                let step = self.history.steps.last().map_or(0, |s| s.step);
                self.record(serde_json::json!({"event": "saved", "step": step, "path": path}))?;
                self.history.last_checkpoint = Some(path);
            }
        }
        Ok(())
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
