//! A training run's loop, shared by masked-LM pre-training and classification fine-tuning:
//! micro-batches with gradient accumulation, clipping, AdamW with a learning-rate schedule,
//! periodic evaluation, checkpoints, a stop flag (Ctrl-C, SIGTERM), and refusal to go on from
//! a non-finite loss.
//!
//! Step `s` (0-based) uses learning rate `schedule.lr_at(s)`, the micro-batches `s * accum ..
//! (s + 1) * accum` of the task's batch source, and dropout seeded by `(seed, s, micro)`: a
//! pure function of the run's options and the step, so a resumed run repeats an uninterrupted
//! one bit for bit.
//!
//! **Stops.** The stop flag is read before every micro-batch and before every evaluation
//! batch, so a stop waits for one micro-batch (or one evaluation batch) at most, however many
//! micro-batches a step accumulates. The run then saves the last completed step's checkpoint
//! (unless it is already on disk) and returns [`Outcome::Stopped`]:
//! - A stop between the micro-batches of a step keeps what they accumulated: the checkpoint
//!   (the weights and optimiser state of the last completed step) also holds the step in
//!   progress ([`TrainerState::partial`] and [`ACCUMULATED_FILE`]: the summed gradients of
//!   the micro-batches done), and a resume continues that step at its next micro-batch, adding
//!   to the same sums in the same order, so it ends bit for bit as an uninterrupted step. The
//!   one exception: before the first step has completed nothing is saved (there is no
//!   completed step to save), and the partial sums are dropped.
//! - A stop during an evaluation abandons it (no metrics, no best model from it); the
//!   checkpoint is saved without it, and a resume runs that evaluation first
//!   ([`Trainer::run`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::autograd::param_grads::ParamGrads;
use crate::mode::Dropout;
use crate::optim::{AdamW, Gradients, LrSchedule};
use crate::train::checkpoint::{safetensors_bytes, write_dir_atomically_with, SaveStep};
use crate::train::confusion::Confusion;
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
    /// The confusion of the predictions (classification only): the whole matrix
    /// `confusion[gold][predicted]` up to
    /// [`FULL_MATRIX_LABELS`](crate::train::confusion::FULL_MATRIX_LABELS) labels, per-label
    /// counts and the largest confusions past it (its size grows with the labels, never with
    /// their square).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub confusion: Option<Confusion>,
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

/// How an evaluation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// It ran over the validation data.
    Done(EvalMetrics),
    /// There is no validation data (nothing to report).
    NoData,
    /// The stop flag was set before its last batch: abandoned, nothing to report.
    Stopped,
}

/// What a task supplies to the loop: its loss on a micro-batch, its evaluation and the files
/// of its checkpoints.
pub trait Task {
    /// The mean loss of micro-batch `index` (global: `step * grad_accum + micro`) in training
    /// mode with `dropout`, as a differentiable scalar, and the tokens it covered. A task
    /// whose fused ops can hand their parameters' gradients over beside candle's graph gives
    /// them `grads` ([`crate::Plan::with_param_grads`]); the loop runs the loss's backward
    /// through it ([`ParamGrads::backward`]).
    ///
    /// # Errors
    /// Model errors.
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &Dropout,
        grads: &ParamGrads,
    ) -> Result<(candle_core::Tensor, usize), TrainError>;

    /// Evaluates the model at inference on the validation data after `step` steps, reading
    /// `stop` before each batch and abandoning the evaluation when it is set
    /// ([`Evaluation::Stopped`]).
    ///
    /// # Errors
    /// Model errors.
    fn evaluate(&self, step: u64, stop: &AtomicBool) -> Result<Evaluation, TrainError>;

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
    /// The step after `step` when a stop came between its micro-batches: what they
    /// accumulated, the gradients being in [`ACCUMULATED_FILE`] beside this file (`None`: the
    /// checkpoint ends at a step boundary; absent from files written before it existed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub partial: Option<PartialStep>,
}

/// The file of a checkpoint that holds the summed gradients of a step in progress
/// ([`TrainerState::partial`]), one f32 tensor per parameter that has a gradient, named as the
/// parameter.
pub const ACCUMULATED_FILE: &str = "accumulated.safetensors";

/// A step that a stop interrupted between its micro-batches, as `trainer_state.json` records
/// it (the gradients themselves are in [`ACCUMULATED_FILE`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartialStep {
    /// Micro-batches of the step done: at least 1, fewer than the run's `grad_accum`.
    pub micro_batches: u64,
    /// The sum of their losses (for the step's reported mean loss; JSON keeps it to within a
    /// unit in the last place, and it never reaches the weights).
    pub loss_sum: f64,
    /// Tokens they covered.
    pub tokens: usize,
    /// Seconds they took.
    pub seconds: f64,
    /// The parameters that have a gradient, in the order the sums hold them (the order of the
    /// global norm's sum, kept so that a resumed step clips exactly as an uninterrupted one).
    pub gradients: Vec<String>,
}

/// The micro-batches of a step done so far: their summed gradients (each micro-batch's loss
/// scaled by `1 / grad_accum`), losses and tokens.
#[derive(Debug, Clone, Default)]
pub struct Accumulation {
    /// Micro-batches done.
    pub micro_batches: u64,
    /// Their summed gradients.
    pub gradients: Gradients,
    /// The sum of their (unscaled) losses.
    pub loss_sum: f64,
    /// Tokens they covered.
    pub tokens: usize,
    /// Seconds they took (in this and earlier processes).
    pub seconds: f64,
}

impl Accumulation {
    /// The record of `trainer_state.json` (the gradients go to [`ACCUMULATED_FILE`]).
    pub fn record(&self) -> PartialStep {
        PartialStep {
            micro_batches: self.micro_batches,
            loss_sum: self.loss_sum,
            tokens: self.tokens,
            seconds: self.seconds,
            gradients: self.gradients.names().map(String::from).collect(),
        }
    }
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
    /// Stopped by the stop flag after this many completed steps, with their checkpoint on disk
    /// (saved by the stop, or already there); with 0, before the first step completed, and
    /// nothing was saved.
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
    /// The micro-batches of the next step done so far: restored from a checkpoint that a stop
    /// saved mid-step, or left by a stop (saved with the checkpoint).
    pub accumulation: Option<Accumulation>,
    /// Where the checkpoint on disk stands: the steps done and the micro-batches of the next
    /// step it holds (`None`: no checkpoint yet). A stop saves only when the run is past it.
    pub saved: Option<(u64, u64)>,
}

impl<T: Task> Trainer<'_, T> {
    /// One optimisation step: accumulated micro-batch gradients, clipping, AdamW. Starts
    /// from [`Self::accumulation`] when a resumed checkpoint held one. Reads `stop` before
    /// each micro-batch; when it is set, keeps the micro-batches done in
    /// [`Self::accumulation`] and returns `None` (the weights are those of the last completed
    /// step).
    fn step_once(&mut self, stop: &AtomicBool) -> Result<Option<StepMetrics>, TrainError> {
        let started = Instant::now();
        let accum = self.options.grad_accum.max(1) as u64;
        let lr = self.schedule.lr_at(self.step);
        let mut acc = self.accumulation.take().unwrap_or_default();
        while acc.micro_batches < accum {
            if stop.load(Ordering::Relaxed) {
                acc.seconds += started.elapsed().as_secs_f64();
                self.accumulation = (acc.micro_batches > 0).then_some(acc);
                return Ok(None);
            }
            let micro = acc.micro_batches;
            let dropout = Dropout::seeded(dropout_seed(self.options.seed, self.step, micro));
            let index = self.step * accum + micro;
            let delivered = ParamGrads::new();
            let (loss, n) = self.task.micro_batch_loss(index, &dropout, &delivered)?;
            let value = f64::from(loss.to_scalar::<f32>()?);
            if !value.is_finite() {
                return Err(TrainError::NonFinite {
                    step: self.step + 1,
                    what: format!("loss {value}"),
                });
            }
            acc.loss_sum += value;
            acc.tokens += n;
            let store = delivered.backward(&(loss / accum as f64)?)?;
            let micro_grads = Gradients::from_store(&store, self.params.vars())?;
            if micro == 0 {
                acc.gradients = micro_grads;
            } else {
                acc.gradients.accumulate(&micro_grads)?;
            }
            acc.micro_batches += 1;
        }
        let mut grads = acc.gradients;
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
        Ok(Some(StepMetrics {
            step: self.step,
            loss: acc.loss_sum / accum as f64,
            lr,
            grad_norm,
            tokens: acc.tokens,
            seconds: acc.seconds + started.elapsed().as_secs_f64(),
        }))
    }

    /// Writes `checkpoint/`: the task's model files, the optimiser state and the trainer
    /// state (with the step in progress, when [`Self::accumulation`] holds one), replacing the
    /// previous checkpoint only once all are written (a kill at any point leaves a whole
    /// checkpoint, or one that [`recover_dir`](crate::train::checkpoint::recover_dir)
    /// restores).
    ///
    /// # Errors
    /// Serialisation and file errors.
    pub fn save(&mut self) -> Result<PathBuf, TrainError> {
        let mut files = self.task.model_files()?;
        files.push((
            "optimizer.safetensors".into(),
            safetensors_bytes(&self.optimizer.state_tensors()?)?,
        ));
        if let Some(acc) = &self.accumulation {
            let device = candle_core::Device::Cpu;
            let mut tensors = Vec::new();
            for name in acc.gradients.names() {
                if let Some(t) = acc.gradients.to_tensor(name, &device)? {
                    tensors.push((name.to_string(), t));
                }
            }
            files.push((ACCUMULATED_FILE.into(), safetensors_bytes(&tensors)?));
        }
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
            partial: self.accumulation.as_ref().map(Accumulation::record),
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
        self.saved = Some(self.position());
        Ok(dir)
    }

    /// The steps done and the micro-batches of the next step accumulated.
    fn position(&self) -> (u64, u64) {
        let micro = self.accumulation.as_ref().map_or(0, |a| a.micro_batches);
        (self.step, micro)
    }

    /// Saves, telling `on_event`.
    fn save_event(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<(), TrainError> {
        let dir = self.save()?;
        on_event(Event::Saved(dir));
        Ok(())
    }

    /// Ends the run on a stop: saves where it stands unless the checkpoint on disk already
    /// does, or no step has completed (then nothing is saved, and the micro-batches of the
    /// first step are dropped).
    fn stop_here(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<Outcome, TrainError> {
        if self.step == 0 {
            self.accumulation = None;
        } else if self.saved != Some(self.position()) {
            self.save_event(on_event)?;
        }
        Ok(Outcome::Stopped(self.step))
    }

    /// Whether an evaluation is due after `step` steps: every `eval_every` and at the end.
    fn eval_due(&self, step: u64) -> bool {
        let every = self.options.eval_every;
        step == self.options.steps || (every > 0 && step.is_multiple_of(every))
    }

    /// Runs the task's evaluation; `false` when a stop cut it short.
    fn evaluate(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<bool, TrainError> {
        match self.task.evaluate(self.step, stop)? {
            Evaluation::Done(m) => {
                self.task.after_eval(&m)?;
                self.last_eval = Some(m.clone());
                on_event(Event::Eval(m));
                Ok(true)
            }
            Evaluation::NoData => Ok(true),
            Evaluation::Stopped => Ok(false),
        }
    }

    /// Whether the checkpoint this run resumed from missed an evaluation that was due at its
    /// step (a stop cut it short before the save).
    fn evaluation_missed(&self) -> bool {
        self.step > 0
            && self.accumulation.is_none()
            && self.eval_due(self.step)
            && self.last_eval.as_ref().is_none_or(|e| e.step != self.step)
    }

    /// Runs the remaining steps. Evaluates and saves on schedule and at the end; when `stop`
    /// is set, stops at the next micro-batch or evaluation batch, saves where the run stands
    /// (see the module's doc) and returns [`Outcome::Stopped`]. A resumed run whose checkpoint
    /// missed an evaluation due at its step runs it first (and saves again, to record it).
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
        if self.evaluation_missed() {
            let evaluated = self.evaluate(stop, on_event)?;
            if !evaluated {
                return self.stop_here(on_event);
            }
            if self.last_eval.as_ref().is_some_and(|e| e.step == self.step) {
                self.save_event(on_event)?;
            }
        }
        while self.step < self.options.steps {
            let Some(metrics) = self.step_once(stop)? else {
                return self.stop_here(on_event);
            };
            let step = metrics.step;
            on_event(Event::Step(metrics));
            let last = step == self.options.steps;
            let cut_short = self.eval_due(step) && !self.evaluate(stop, on_event)?;
            let stopping = stop.load(Ordering::Relaxed);
            if last || stopping || every(self.options.save_every, step) {
                self.save_event(on_event)?;
            }
            // Asked again after the save: a stop that came during it needs no further step.
            // At the last step only an evaluation that the stop cut short is left to do.
            if (!last || cut_short) && (stopping || stop.load(Ordering::Relaxed)) {
                return self.stop_here(on_event);
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
