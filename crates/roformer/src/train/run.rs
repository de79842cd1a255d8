//! A training run's loop, shared by masked-LM pre-training and classification fine-tuning:
//! micro-batches with gradient accumulation, clipping, AdamW with a learning-rate schedule,
//! periodic evaluation, checkpoints, a stop flag (Ctrl-C), and refusal to go on from a
//! non-finite loss.
//!
//! Step `s` (0-based) uses learning rate `schedule.lr_at(s)`, the micro-batches `s * accum ..
//! (s + 1) * accum` of the task's batch source, and dropout seeded by `(seed, s, micro)`: a
//! pure function of the run's options and the step, so a resumed run repeats an uninterrupted
//! one bit for bit.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::mode::Dropout;
use crate::optim::{AdamW, Gradients, LrSchedule};
use crate::train::checkpoint::{safetensors_bytes, write_dir_atomically_with, SaveStep};
use crate::train::error::TrainError;
use crate::train::params::Params;

/// What one optimisation step reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepMetrics {
    /// Steps done, this one included (1-based).
    pub step: u64,
    /// The mean training loss over the step's micro-batches.
    pub loss: f64,
    /// The learning rate the step used.
    pub lr: f64,
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens the step processed (padding included).
    pub tokens: usize,
    /// Wall time of the step, seconds.
    pub seconds: f64,
}

/// What an evaluation reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalMetrics {
    /// Steps done when it ran.
    pub step: u64,
    /// Mean loss per predicted item (token or sequence).
    pub loss: f64,
    /// Share of items predicted right.
    pub accuracy: f64,
    /// `exp(loss)` (meaningful for masked LM).
    pub perplexity: f64,
    /// Macro-averaged F1 over the labels (classification only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub macro_f1: Option<f64>,
    /// The confusion matrix (classification only): `confusion[gold][predicted]` counts the
    /// items of label `gold` predicted as `predicted`, labels in index order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub confusion: Option<Vec<Vec<usize>>>,
    /// Items evaluated.
    pub count: usize,
}

/// An event of a run, for progress display and metric logs.
#[derive(Debug, Clone)]
pub enum Event {
    /// A step finished.
    Step(StepMetrics),
    /// An evaluation finished.
    Eval(EvalMetrics),
    /// A checkpoint was written to the path.
    Saved(PathBuf),
}

/// The loop's settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LoopOptions {
    /// Total optimisation steps.
    pub steps: u64,
    /// Micro-batches per step (gradient accumulation), at least 1.
    pub grad_accum: usize,
    /// Clip the global gradient norm to this (none when `None`).
    pub max_grad_norm: Option<f64>,
    /// Seed of dropout (and of the data, kept by the task).
    pub seed: u64,
    /// Evaluate every this many steps (and at the end); 0 evaluates at the end only.
    pub eval_every: u64,
    /// Save a checkpoint every this many steps (and at the end); 0 saves at the end only.
    pub save_every: u64,
}

/// What a task supplies to the loop: its loss on a micro-batch, its evaluation and the files
/// of its checkpoints.
pub trait Task {
    /// The mean loss of micro-batch `index` (global: `step * grad_accum + micro`) in training
    /// mode with `dropout`, as a differentiable scalar, and the tokens it covered.
    ///
    /// # Errors
    /// Model errors.
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &Dropout,
    ) -> Result<(candle_core::Tensor, usize), TrainError>;

    /// Evaluates the model at inference on the validation data (`None` without any).
    ///
    /// # Errors
    /// Model errors.
    fn evaluate(&self, step: u64) -> Result<Option<EvalMetrics>, TrainError>;

    /// The model's files (`config.json`, `model.safetensors`, tokenizer files) for a
    /// checkpoint.
    ///
    /// # Errors
    /// Serialisation errors.
    fn model_files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError>;

    /// Called after each evaluation; a classification task keeps its best model here.
    ///
    /// # Errors
    /// Errors writing files.
    fn after_eval(&mut self, _metrics: &EvalMetrics) -> Result<(), TrainError> {
        Ok(())
    }
}

/// `trainer_state.json`: where a run stands, for `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    /// Steps done.
    pub step: u64,
    /// The loop's settings.
    pub options: LoopOptions,
    /// The schedule's settings as JSON (for the record).
    pub schedule: serde_json::Value,
    /// The task's own settings (data, sequence length, ...), to be checked on resume.
    pub task: serde_json::Value,
    /// The last evaluation.
    pub last_eval: Option<EvalMetrics>,
}

/// The checkpoint directory of a run's output directory.
pub fn checkpoint_dir(out: &Path) -> PathBuf {
    out.join("checkpoint")
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// All steps done.
    Finished,
    /// Stopped by the stop flag after this many steps, with a checkpoint written.
    Stopped(u64),
}

/// The 64-bit seed of the dropout of micro-batch `micro` of step `step` (SplitMix64 over the
/// three numbers).
fn dropout_seed(seed: u64, step: u64, micro: u64) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    mix(mix(mix(seed) ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ micro)
}

/// The training loop over a [`Task`].
pub struct Trainer<'a, T: Task> {
    /// The task.
    pub task: T,
    /// The trainable variables (the task's model's weights).
    pub params: &'a Params,
    /// The optimiser over `params`.
    pub optimizer: AdamW,
    /// The learning-rate schedule.
    pub schedule: LrSchedule,
    /// The loop settings.
    pub options: LoopOptions,
    /// The run's output directory (checkpoints under `checkpoint/`).
    pub out: PathBuf,
    /// Steps already done (non-zero when resumed).
    pub step: u64,
    /// The task's settings, recorded in `trainer_state.json`.
    pub task_record: serde_json::Value,
    /// The last evaluation.
    pub last_eval: Option<EvalMetrics>,
    /// Called with the steps done and each [`SaveStep`] of every checkpoint save, right after
    /// the step (a fault-injection hook for tests; `None` normally).
    pub save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
}

impl<T: Task> Trainer<'_, T> {
    /// One optimisation step: accumulated micro-batch gradients, clipping, AdamW.
    fn step_once(&mut self) -> Result<StepMetrics, TrainError> {
        let started = Instant::now();
        let accum = self.options.grad_accum.max(1);
        let lr = self.schedule.lr_at(self.step);
        let mut grads = Gradients::new();
        let (mut loss_sum, mut tokens) = (0.0, 0);
        for micro in 0..accum as u64 {
            let dropout = Dropout::seeded(dropout_seed(self.options.seed, self.step, micro));
            let index = self.step * accum as u64 + micro;
            let (loss, n) = self.task.micro_batch_loss(index, &dropout)?;
            let value = f64::from(loss.to_scalar::<f32>()?);
            if !value.is_finite() {
                return Err(TrainError::NonFinite {
                    step: self.step + 1,
                    what: format!("loss {value}"),
                });
            }
            loss_sum += value;
            tokens += n;
            let store = (loss / accum as f64)?.backward()?;
            let micro_grads = Gradients::from_store(&store, self.params.vars())?;
            if micro == 0 {
                grads = micro_grads;
            } else {
                grads.accumulate(&micro_grads)?;
            }
        }
        if let Some(name) = grads.first_non_finite() {
            return Err(TrainError::NonFinite {
                step: self.step + 1,
                what: format!("gradient of {name}"),
            });
        }
        let grad_norm = match self.options.max_grad_norm {
            Some(max) => grads.clip_global_norm(max)?,
            None => grads.global_norm(),
        };
        self.optimizer.step(&grads, lr)?;
        self.step += 1;
        Ok(StepMetrics {
            step: self.step,
            loss: loss_sum / accum as f64,
            lr,
            grad_norm,
            tokens,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Writes `checkpoint/`: the task's model files, the optimiser state and the trainer
    /// state, replacing the previous checkpoint only once all are written (a kill at any point
    /// leaves a whole checkpoint, or one that
    /// [`recover_dir`](crate::train::checkpoint::recover_dir) restores).
    ///
    /// # Errors
    /// Serialisation and file errors.
    pub fn save(&self) -> Result<PathBuf, TrainError> {
        let mut files = self.task.model_files()?;
        files.push((
            "optimizer.safetensors".into(),
            safetensors_bytes(&self.optimizer.state_tensors()?)?,
        ));
        let state = TrainerState {
            step: self.step,
            options: self.options.clone(),
            schedule: serde_json::json!({
                "peak_lr": self.schedule.peak_lr,
                "warmup_steps": self.schedule.warmup_steps,
                "total_steps": self.schedule.total_steps,
                "decay": format!("{:?}", self.schedule.decay),
            }),
            task: self.task_record.clone(),
            last_eval: self.last_eval.clone(),
        };
        let json =
            serde_json::to_vec_pretty(&state).map_err(|e| TrainError::Save(e.to_string()))?;
        files.push(("trainer_state.json".into(), json));
        let dir = checkpoint_dir(&self.out);
        let step = self.step;
        write_dir_atomically_with(&dir, &files, &mut |s| {
            if let Some(hook) = self.save_hook {
                hook(step, s);
            }
        })?;
        Ok(dir)
    }

    fn evaluate(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<(), TrainError> {
        if let Some(m) = self.task.evaluate(self.step)? {
            self.task.after_eval(&m)?;
            self.last_eval = Some(m.clone());
            on_event(Event::Eval(m));
        }
        Ok(())
    }

    /// Runs the remaining steps. Evaluates and saves on schedule and at the end; when `stop`
    /// is set, finishes the current step, saves and returns [`Outcome::Stopped`].
    ///
    /// # Errors
    /// [`TrainError::NonFinite`] at the first non-finite loss or gradient (nothing is saved
    /// from that step: the last checkpoint stays the last good one), and model, optimiser and
    /// file errors.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Outcome, TrainError> {
        let every = |n: u64, step: u64| n > 0 && step.is_multiple_of(n);
        while self.step < self.options.steps {
            let metrics = self.step_once()?;
            let step = metrics.step;
            on_event(Event::Step(metrics));
            let last = step == self.options.steps;
            if last || every(self.options.eval_every, step) {
                self.evaluate(on_event)?;
            }
            let stopping = stop.load(Ordering::Relaxed);
            let saving = last || stopping || every(self.options.save_every, step);
            if saving {
                on_event(Event::Saved(self.save()?));
            }
            // Asked again after the save: a stop that came during it needs no further step.
            if !last && (stopping || stop.load(Ordering::Relaxed)) {
                if !saving {
                    on_event(Event::Saved(self.save()?));
                }
                return Ok(Outcome::Stopped(step));
            }
        }
        Ok(Outcome::Finished)
    }
}

/// Reads `trainer_state.json` of a checkpoint directory.
///
/// # Errors
/// [`TrainError::Io`] and [`TrainError::Resume`] for a missing or malformed file.
pub fn read_trainer_state(checkpoint: &Path) -> Result<TrainerState, TrainError> {
    let path = checkpoint.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(|source| TrainError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| TrainError::Resume(format!("{}: {e}", path.display())))
}
