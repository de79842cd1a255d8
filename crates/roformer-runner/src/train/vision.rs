//! A vision training run ([`roformer::train::fit_vision`]) as `vision train` and the vision
//! experiment show and record it: a step line every few steps on stderr, every event in
//! `metrics.jsonl`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use roformer::train::run::Event;
use roformer::train::{Observer, TrainError};

/// Prints progress on stderr and appends every event to `metrics.jsonl`.
pub struct Printer {
    metrics: BufWriter<File>,
    log_every: u64,
    total: u64,
}

impl Printer {
    /// A printer of a step line every `log_every` steps of `total`, appending to
    /// `out/metrics.jsonl` (created, with `out`, when missing).
    ///
    /// # Errors
    /// The directory or the file cannot be created or opened.
    pub fn open(out: &Path, log_every: u64, total: u64) -> anyhow::Result<Printer> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let metrics_path = out.join("metrics.jsonl");
        let metrics = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .with_context(|| format!("opening {}", metrics_path.display()))?;
        Ok(Printer {
            metrics: BufWriter::new(metrics),
            log_every,
            total,
        })
    }

    fn record(&mut self, value: serde_json::Value) {
        // A full disk loses a metrics line, not the run; the checkpoint writer reports its own.
        let _ = writeln!(self.metrics, "{value}");
        let _ = self.metrics.flush();
    }
}

impl Observer for Printer {
    fn starting(&mut self, done: u64, total: u64) -> Result<(), TrainError> {
        self.total = total;
        eprintln!("training steps {}..{total}", done + 1);
        Ok(())
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Step(m) => {
                if m.step == 1 || m.step % self.log_every.max(1) == 0 || m.step == self.total {
                    eprintln!(
                        "step {}/{}  loss {:.4}  lr {:.2e}  grad norm {:.3}  {:.0} images/s",
                        m.step,
                        self.total,
                        m.loss,
                        m.lr,
                        m.grad_norm,
                        m.tokens as f64 / m.seconds.max(1e-9)
                    );
                }
                self.record(serde_json::json!({"event": "step", "metrics": m}));
            }
            Event::Eval(m) => {
                eprintln!(
                    "eval at step {}: validation loss {:.4}, top-1 {:.2} %",
                    m.step,
                    m.loss,
                    100.0 * m.accuracy
                );
                self.record(serde_json::json!({"event": "eval", "metrics": m}));
            }
            Event::Saved(path) => {
                self.record(serde_json::json!({"event": "saved", "path": path}));
            }
        }
    }
}
