//! `train_mlm`: masked-LM training from Python over the library's `fit`, with the CLI's
//! options as keyword arguments, progress as a callback, and Ctrl-C honoured as the CLI does
//! (the run stops at the next micro-batch with its last completed step saved, then
//! `KeyboardInterrupt` is raised).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use roformer::optim::Decay;
use roformer::train::mlm::MlmDataOptions;
use roformer::train::run::{Event, Outcome};
use roformer::train::{fit, ModelStart, Observer, TaskOptions, TrainOptions, TrainRun};
use roformer_builtin::poetry;

use crate::errors::{self, value_error};

/// Hands each event to the Python callback, and turns Ctrl-C (or an exception in the
/// callback) into the stop flag; the exception is raised once the run has stopped.
struct PyObserver<'a> {
    progress: Option<&'a Py<PyAny>>,
    stop: &'a AtomicBool,
    raised: Option<PyErr>,
}

/// An event as the dict the callback receives.
fn event_dict<'py>(py: Python<'py>, event: &Event) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match event {
        Event::Step(m) => {
            d.set_item("event", "step")?;
            d.set_item("step", m.step)?;
            d.set_item("loss", m.loss)?;
            d.set_item("lr", m.lr)?;
            d.set_item("grad_norm", m.grad_norm)?;
            d.set_item("tokens", m.tokens)?;
            d.set_item("seconds", m.seconds)?;
        }
        Event::Eval(m) => {
            d.set_item("event", "eval")?;
            d.set_item("step", m.step)?;
            d.set_item("loss", m.loss)?;
            d.set_item("accuracy", m.accuracy)?;
            d.set_item("perplexity", m.perplexity)?;
        }
        Event::Saved(path) => {
            d.set_item("event", "saved")?;
            d.set_item("path", path.display().to_string())?;
        }
    }
    Ok(d)
}

impl Observer for PyObserver<'_> {
    fn event(&mut self, event: Event) {
        if self.raised.is_some() {
            return;
        }
        let result = Python::attach(|py| -> PyResult<()> {
            py.check_signals()?;
            if let Some(callback) = self.progress {
                callback.call1(py, (event_dict(py, &event)?,))?;
            }
            Ok(())
        });
        if let Err(e) = result {
            self.raised = Some(e);
            self.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// The learning-rate decay after the warm-up.
fn decay(name: &str) -> PyResult<Decay> {
    match name {
        "linear" => Ok(Decay::Linear),
        "cosine" => Ok(Decay::Cosine),
        "constant" => Ok(Decay::Constant),
        other => Err(value_error(format!(
            "decay must be 'linear', 'cosine' or 'constant', got {other:?}"
        ))),
    }
}

/// The model a run starts from: a checkpoint directory, a fresh model of a config and a
/// vocabulary (both given, and no `init`), or the built-in poetry model.
fn start(
    init: Option<PathBuf>,
    config: Option<PathBuf>,
    vocab: Option<PathBuf>,
) -> PyResult<ModelStart> {
    let must_exist = |path: &PathBuf, what: &str| {
        if path.exists() {
            Ok(())
        } else {
            Err(errors::not_found(format!(
                "{}: no such {what}",
                path.display()
            )))
        }
    };
    match (init, config, vocab) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(value_error(
            "give init (a checkpoint), or config and vocab (a fresh model), not both",
        )),
        (None, Some(_), None) | (None, None, Some(_)) => Err(value_error(
            "a fresh model needs both config (config.json) and vocab (vocab.txt)",
        )),
        (Some(dir), None, None) => {
            if !dir.is_dir() {
                return Err(errors::not_found(format!(
                    "{}: no such directory",
                    dir.display()
                )));
            }
            ModelStart::from_checkpoint(&dir).map_err(errors::train)
        }
        (None, Some(config), Some(vocab)) => {
            must_exist(&config, "file")?;
            must_exist(&vocab, "file")?;
            ModelStart::fresh(&config, &vocab, None).map_err(errors::train)
        }
        (None, None, None) => {
            let dir = poetry::model_dir().map_err(errors::model)?;
            Ok(ModelStart {
                config: dir.config,
                tokenizer: poetry::tokenizer().map_err(errors::tokenizer)?,
                weights: Some(dir.checkpoint),
            })
        }
    }
}

/// Trains a masked LM on `corpus` into `out` (`out/checkpoint`), from `init` (a checkpoint
/// directory), from scratch on `config` and `vocab` (a `config.json` and a `vocab.txt`, as
/// `roformer train mlm --config --vocab`), or from the built-in poetry model when none is
/// given. Returns `{"outcome", "steps",
/// "last_eval"}`.
#[pyfunction]
#[pyo3(signature = (
    out, corpus, steps, *, init = None, config = None, vocab = None, batch_size = 16, seq_len = 128, lr = 5e-4, warmup = 0,
    decay = "linear", weight_decay = 0.01, max_grad_norm = 1.0, grad_accum = 1, seed = 0,
    eval_every = 0, save_every = 0, eval_batches = 50, validation = 0.05, line_by_line = false,
    whole_word = false, precision = "f32", resume = false, progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn train_mlm<'py>(
    py: Python<'py>,
    out: PathBuf,
    corpus: Vec<PathBuf>,
    steps: u64,
    init: Option<PathBuf>,
    config: Option<PathBuf>,
    vocab: Option<PathBuf>,
    batch_size: usize,
    seq_len: usize,
    lr: f64,
    warmup: u64,
    decay: &str,
    weight_decay: f64,
    max_grad_norm: f64,
    grad_accum: usize,
    seed: u64,
    eval_every: u64,
    save_every: u64,
    eval_batches: usize,
    validation: f64,
    line_by_line: bool,
    whole_word: bool,
    precision: &str,
    resume: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    if steps == 0 || batch_size == 0 || grad_accum == 0 {
        return Err(value_error(
            "steps, batch_size and grad_accum must be at least 1",
        ));
    }
    if !(lr.is_finite() && lr > 0.0) {
        return Err(value_error(format!(
            "lr must be a finite number above 0, got {lr}"
        )));
    }
    if corpus.is_empty() {
        return Err(value_error(
            "corpus must name at least one file or directory",
        ));
    }
    if let Some(missing) = corpus.iter().find(|p| !p.exists()) {
        return Err(errors::not_found(format!(
            "{}: no such file",
            missing.display()
        )));
    }
    let precision = crate::text_model::precision(precision)?;
    let decay = self::decay(decay)?;
    let model = start(init, config, vocab)?;
    let task = TaskOptions::MaskedLm(MlmDataOptions {
        corpus,
        format: None,
        seq_len,
        packed: !line_by_line,
        validation_fraction: validation,
        batch_size,
        seed,
        whole_word,
        max_eval_batches: eval_batches,
        also_simplified: false,
        line_share: 0.0,
        alone_share: 0.0,
    });
    let stop = AtomicBool::new(false);
    let mut observer = PyObserver {
        progress: progress.as_ref(),
        stop: &stop,
        raised: None,
    };
    // The options are made on the thread that runs without the GIL: they hold a `&dyn Fn`
    // (the save hook, unused here), which is not `Sync`.
    let finished = py.detach(|| {
        let run = TrainRun {
            options: TrainOptions {
                steps: Some(steps),
                grad_accum,
                lr,
                warmup,
                decay,
                weight_decay,
                max_grad_norm: (max_grad_norm > 0.0).then_some(max_grad_norm),
                seed,
                eval_every,
                save_every,
                precision,
            },
            resume,
            ..TrainRun::new(out, &model, task)
        };
        fit(&run, &mut observer, &stop)
    });
    if let Some(e) = observer.raised {
        return Err(e);
    }
    let finished = finished.map_err(errors::train)?;
    let d = PyDict::new(py);
    let outcome = match finished.outcome {
        Outcome::Finished => "finished",
        Outcome::Stopped(_) => "stopped",
    };
    d.set_item("outcome", outcome)?;
    d.set_item("steps", finished.steps)?;
    let last_eval = match &finished.last_eval {
        Some(m) => Some(event_dict(py, &Event::Eval(m.clone()))?),
        None => None,
    };
    d.set_item("last_eval", last_eval)?;
    Ok(d)
}
