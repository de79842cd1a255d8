//! A whole training run as one call, [`fit`]: the data read, the model built, the optimiser
//! and its schedule set up (or restored from the run's checkpoint on resume), the loop run
//! with its evaluations and checkpoints, progress reported to an [`Observer`], and a stop flag
//! honoured at the next micro-batch or evaluation batch.
//!
//! ```text
//! fit(run, observer, stop)
//!   1. check the run fits in memory       (budget::check_training_memory)
//!   2. read the data, build the model     (mlm::prepare_mlm_data / classify::read_examples,
//!                                          params::build_trainable)
//!   3. observer.prepared(..)               the caller may refuse the run here
//!   4. AdamW, restored on resume           (resume::load_resume_state)
//!   5. observer.starting(done, total)
//!   6. the loop                           (run::Trainer::run; observer.event per event)
//! ```
//!
//! The steps are the same for every task: a task's fit (`fit_mlm`, `fit_classify`, and
//! [`crate::train::vision::fit_vision`] for images) brings its model, its data and its [`Task`],
//! and calls the one skeleton, `Session`, around them: `for_text` (steps 1 and 2 of a text
//! run; a vision run builds its model and calls `new`), `announce` (step 3, text), `steps`
//! (the run's length) and `drive` (steps 4 to 6).
//!
//! A masked-LM run may also dump its first steps for a comparison with another framework
//! ([`TrainRun::dump`], [`crate::train::dump`]): `init/` is written between steps 3 and 4,
//! the batches and losses after step 6.
//!
//! A program that wants a run calls [`fit`]; `roformer train mlm`, `train classify` and the
//! `experiment` commands are such programs, each adding only its flags and its printing.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use candle_core::Device;

use crate::config::{PositionEmbeddingType, RoFormerConfig};
use crate::model::{Architecture, ModelDir};
use crate::optim::{decays, AdamW, AdamWConfig, Decay, LrSchedule, CLIP_EPS};
use crate::shapes::ModelKind;
use crate::tasks::{HeadModel, RoFormerForMaskedLM, RoFormerForSequenceClassification};
use crate::tokenizer::{RoFormerTokenizer, TokenizerConfig, Vocab};
use crate::train::budget::check_training_memory;
use crate::train::checkpoint::{model_files, tokenizer_files, SaveStep};
use crate::train::classify::{best_score, read_examples, ClassifyOptions, ClassifyTask, Example};
use crate::train::dump::{self, DumpOptions, DumpSettings, StepLog};
use crate::train::error::TrainError;
use crate::train::mlm::{prepare_mlm_data, MlmData, MlmDataOptions, MlmTask};
use crate::train::options::TrainOptions;
use crate::train::params::{build_trainable, Params};
use crate::train::resume::{load_accumulation, load_resume_state};
use crate::train::run::{
    checkpoint_dir, Accumulation, EvalMetrics, Event, LoopOptions, Outcome, Task, Trainer,
};
use crate::weights::Checkpoint;

/// What a run starts from: a config and a tokenizer, and the weights of a checkpoint (none:
/// every weight drawn from the run's seed).
#[derive(Debug)]
pub struct ModelStart {
    /// The model's config (for classification, the labels are set from the task).
    pub config: RoFormerConfig,
    /// The tokenizer; its files are saved in every checkpoint.
    pub tokenizer: RoFormerTokenizer,
    /// The weights to start from.
    pub weights: Option<Checkpoint>,
}

impl ModelStart {
    /// The config, tokenizer and weights of the checkpoint directory `dir`.
    ///
    /// # Errors
    /// [`TrainError::Model`] for a directory that does not load, [`TrainError::Tokenizer`] for
    /// its tokenizer files.
    pub fn from_checkpoint(dir: &Path) -> Result<Self, TrainError> {
        let md = ModelDir::open(dir)?;
        let tokenizer = RoFormerTokenizer::from_dir(dir)?;
        Ok(Self {
            config: md.config,
            tokenizer,
            weights: Some(md.checkpoint),
        })
    }

    /// A fresh model of the config file `config` over the vocabulary file `vocab` (one token a
    /// line; the config's `vocab_size` set to the vocabulary's size, the default tokenizer
    /// settings), with the position type `position` when given: seeded weights at the first
    /// step, no checkpoint.
    ///
    /// # Errors
    /// [`TrainError::Model`] for a config that does not read or validate,
    /// [`TrainError::Tokenizer`] for a vocabulary that does not.
    pub fn fresh(
        config: &Path,
        vocab: &Path,
        position: Option<PositionEmbeddingType>,
    ) -> Result<Self, TrainError> {
        let mut config = RoFormerConfig::from_file(config)?;
        let tokenizer =
            RoFormerTokenizer::new(Vocab::from_file(vocab)?, TokenizerConfig::default())?;
        config.vocab_size = tokenizer.vocab_size();
        if let Some(position) = position {
            config.position_embedding_type = position;
        }
        Ok(Self {
            config,
            tokenizer,
            weights: None,
        })
    }
}

/// The task of a run and its data.
#[derive(Debug, Clone)]
pub enum TaskOptions {
    /// Masked-LM pre-training on a corpus.
    MaskedLm(MlmDataOptions),
    /// Sequence classification on JSON-lines examples.
    Classify(ClassifyOptions),
}

/// Everything a run needs: where it writes, what it trains on what, and how
/// ([`TrainOptions`]).
#[derive(Clone)]
pub struct TrainRun<'a> {
    /// The run's directory: `checkpoint/` (and `best/` for a classifier) are written there.
    pub out: PathBuf,
    /// The model to train.
    pub model: &'a ModelStart,
    /// The task and its data.
    pub task: TaskOptions,
    /// The optimisation settings.
    pub options: TrainOptions,
    /// Continue from `out/checkpoint`: its optimiser and trainer state (the caller gives its
    /// weights in `model`).
    pub resume: bool,
    /// Called at each point of every checkpoint save (a fault-injection hook for tests).
    pub save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
    /// Dump the first steps of a masked-LM run (initial weights, batches, losses) for a
    /// step-by-step comparison with another framework (`None`: no dump; ignored by
    /// classification). The run itself is unchanged.
    pub dump: Option<DumpOptions>,
}

impl<'a> TrainRun<'a> {
    /// A new run of `task` on `model` into `out` with the default [`TrainOptions`]: no
    /// resume, hook or dump. Change what differs with struct update syntax.
    pub fn new(out: impl Into<PathBuf>, model: &'a ModelStart, task: TaskOptions) -> Self {
        Self {
            out: out.into(),
            model,
            task,
            options: TrainOptions::default(),
            resume: false,
            save_hook: None,
            dump: None,
        }
    }
}

/// The data a run prepared, as the [`Observer`] sees it.
#[derive(Debug, Clone, Copy)]
pub enum PreparedData<'a> {
    /// The corpus's batches.
    MaskedLm {
        /// The task's settings (the corpus and its blocks).
        options: &'a MlmDataOptions,
        /// The batches and what they hold.
        data: &'a MlmData,
    },
    /// The classification examples, tokenised.
    Classify {
        /// The task's settings (the example files and labels).
        options: &'a ClassifyOptions,
        /// Training examples.
        train: &'a [Example],
        /// Dev examples.
        eval: &'a [Example],
    },
}

/// A run once its data is read and its model built, before any step.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    /// The config as trained.
    pub config: &'a RoFormerConfig,
    /// The trainable variables.
    pub params: &'a Params,
    /// Whether the weights came from a checkpoint.
    pub from_checkpoint: bool,
    /// Parameters the checkpoint lacked, freshly initialised (all of them for a fresh model).
    pub initialised: &'a [String],
    /// Checkpoint tensors the model does not use.
    pub unused: &'a [String],
    /// The tokenizer files saved in every checkpoint (`vocab.txt`, `tokenizer_config.json`).
    pub tokenizer_files: &'a [(String, Vec<u8>)],
    /// The data.
    pub data: PreparedData<'a>,
}

/// What a caller of [`fit`] hears of the run.
pub trait Observer {
    /// The run is prepared; an error refuses it (nothing is trained or written).
    ///
    /// # Errors
    /// The caller's reason to refuse the run.
    fn prepared(&mut self, _run: &Prepared<'_>) -> Result<(), TrainError> {
        Ok(())
    }

    /// The loop is about to start after `done` of `total` steps (`done > 0` on resume).
    ///
    /// # Errors
    /// The caller's reason to stop here (nothing is trained).
    fn starting(&mut self, _done: u64, _total: u64) -> Result<(), TrainError> {
        Ok(())
    }

    /// A step, an evaluation or a save finished.
    fn event(&mut self, event: Event);
}

/// How a run that did not fail ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// All steps done, or stopped by the flag.
    pub outcome: Outcome,
    /// Steps done.
    pub steps: u64,
    /// Micro-batches of the next step that a stop between them saved with the checkpoint (0:
    /// the checkpoint ends at a step boundary); a resume continues that step.
    pub accumulated: u64,
    /// The last evaluation (of this call, or the checkpoint's when this call made none).
    pub last_eval: Option<EvalMetrics>,
    /// The best model's directory, when one is kept (classification with dev examples).
    pub best: Option<PathBuf>,
}

/// Runs a training: prepares data and model, restores the run on `run.resume`, trains
/// until the last step or until `stop` is set (at the next micro-batch or evaluation batch,
/// with the last completed step's checkpoint saved, see [`crate::train::run`]), and tells
/// `observer` along the way. The buffers the training ops recycled between steps are freed
/// when it returns (`cpu::recycle::release`).
///
/// # Errors
/// [`TrainError::TooLarge`] for a run that does not fit in memory, data and model errors,
/// the refusals of the observer and of the resume checks, and the loop's errors
/// ([`TrainError::NonFinite`] at the first non-finite loss, the last checkpoint kept).
pub fn fit(
    run: &TrainRun<'_>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<Finished, TrainError> {
    let finished = match &run.task {
        TaskOptions::MaskedLm(data) => fit_mlm(run, data, observer, stop),
        TaskOptions::Classify(task) => fit_classify(run, task, observer, stop),
    };
    crate::cpu::recycle::release();
    finished
}

/// [`fit`] for masked-LM pre-training.
fn fit_mlm(
    run: &TrainRun<'_>,
    data_options: &MlmDataOptions,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<Finished, TrainError> {
    let shape = (data_options.batch_size, data_options.seq_len);
    let config = run.model.config.clone();
    let kind = ModelKind::MaskedLm;
    let (session, text) = Session::<RoFormerForMaskedLM>::for_text(run, config, kind, shape)?;
    let data = prepare_mlm_data(&run.model.tokenizer, data_options)?;
    let view = PreparedData::MaskedLm {
        options: data_options,
        data: &data,
    };
    let items = (data.blocks.0, data_options.batch_size);
    let steps = session.announce(&text, observer, view, items)?;
    let task = MlmTask {
        model: &session.model,
        params: &session.params,
        data: &data,
        max_eval_batches: data_options.max_eval_batches,
        tokenizer_files: text.files.clone(),
        precision: run.options.precision,
    };
    let record = task_record(data_options)?;
    let Some(dump_options) = &run.dump else {
        return Ok(session.drive(task, steps, record, observer, stop)?.0);
    };
    let architecture = session.model.architecture_name();
    let mut init = model_files(&text.config, &architecture, &session.params)?;
    init.extend(text.files.iter().cloned());
    dump::begin(dump_options, run.options.grad_accum, run.resume, &init)?;
    let mut log = StepLog::new(dump_options.steps);
    let mut logged = Logged {
        inner: observer,
        log: &mut log,
    };
    let result = session.drive(task, steps, record, &mut logged, stop);
    let settings = dump_settings(run, &architecture, steps);
    let written = dump::finish(dump_options, &log, &data.train, settings);
    // A failed run's error goes first; its dump (the steps it did) is written all the same.
    let (finished, _) = result?;
    written?;
    Ok(finished)
}

/// An observer that notes each event in a dump's [`StepLog`] before passing it on.
struct Logged<'a> {
    inner: &'a mut dyn Observer,
    log: &'a mut StepLog,
}

impl Observer for Logged<'_> {
    fn starting(&mut self, done: u64, total: u64) -> Result<(), TrainError> {
        self.inner.starting(done, total)
    }

    fn event(&mut self, event: Event) {
        self.log.record(&event);
        self.inner.event(event);
    }
}

/// The optimiser and schedule of a run of `steps` steps of the model class `model`, as a
/// dump records them.
fn dump_settings(run: &TrainRun<'_>, model: &str, steps: u64) -> DumpSettings {
    let adamw = adamw_config(&run.options);
    DumpSettings {
        model: model.to_string(),
        lr: run.options.lr,
        warmup_steps: run.options.warmup,
        total_steps: steps,
        decay: format!("{:?}", run.options.decay).to_lowercase(),
        weight_decay: adamw.weight_decay,
        beta1: adamw.beta1,
        beta2: adamw.beta2,
        eps: adamw.eps,
        max_grad_norm: run.options.max_grad_norm,
        clip_eps: CLIP_EPS,
        precision: run.options.precision.name().to_string(),
        seed: run.options.seed,
    }
}

/// [`fit`] for sequence classification; the best model by dev macro-F1 goes to `out/best`.
fn fit_classify(
    run: &TrainRun<'_>,
    task_options: &ClassifyOptions,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<Finished, TrainError> {
    let labels = &task_options.labels;
    let mut config = run.model.config.clone();
    config.num_labels = labels.len();
    config.id2label = labels.iter().cloned().enumerate().collect();
    let (batch, length) = (task_options.batch_size, task_options.max_length);
    let kind = ModelKind::SequenceClassification;
    let (session, text) =
        Session::<RoFormerForSequenceClassification>::for_text(run, config, kind, (batch, length))?;
    let read = |path: &Path| read_examples(path, &run.model.tokenizer, labels, length);
    let train = read(&task_options.train)?;
    let eval = task_options.eval.as_deref().map(read).transpose()?;
    let eval = eval.unwrap_or_default();
    let view = PreparedData::Classify {
        options: task_options,
        train: &train,
        eval: &eval,
    };
    let steps = session.announce(&text, observer, view, (train.len(), batch))?;
    let best_dir = run.out.join("best");
    let task = ClassifyTask {
        model: &session.model,
        params: &session.params,
        train,
        eval,
        options: task_options.clone(),
        pad: text.config.pad_token_id.unwrap_or(0),
        tokenizer_files: text.files.clone(),
        precision: run.options.precision,
        best: run.resume.then(|| best_score(&best_dir)).flatten(),
        best_dir: Some(best_dir.clone()),
    };
    let record = task_record(task_options)?;
    let (mut finished, task) = session.drive(task, steps, record, observer, stop)?;
    finished.best = task.best.map(|_| best_dir);
    Ok(finished)
}

/// The steps every run shares, text and images, around what its task brings (its model, its
/// data, its [`Task`]): the run's length ([`Session::steps`]) and steps 4 to 6 of [`fit`]
/// ([`Session::drive`]: the optimiser, the schedule and the loop). A text run builds its
/// session with [`Session::for_text`] (steps 1 and 2: the memory check, the model, the tokenizer
/// files a checkpoint holds) and tells its observer with [`Session::announce`] (step 3);
/// [`crate::train::vision::fit_vision`] builds its own model and calls [`Session::new`].
pub(crate) struct Session<'o, M> {
    /// The loop's side of the run's options.
    settings: LoopSettings<'o>,
    /// The steps asked for (`None`: three passes over the training data).
    steps: Option<u64>,
    /// The model; its weights are the tensors of `params`.
    pub(crate) model: M,
    /// The trainable variables, for the optimiser and the checkpoints.
    pub(crate) params: Params,
}

/// What a text run's observer and checkpoints need beside its [`Session`].
struct TextStart {
    /// The config as trained.
    config: RoFormerConfig,
    /// The tokenizer files saved in every checkpoint.
    files: Vec<(String, Vec<u8>)>,
    /// Whether the weights came from a checkpoint.
    from_checkpoint: bool,
    /// Parameters the checkpoint lacked, freshly initialised.
    initialised: Vec<String>,
    /// Checkpoint tensors the model does not use.
    unused: Vec<String>,
}

impl<'o, M> Session<'o, M> {
    /// The session of `model` on `params`, run with `settings` for `steps` steps (`None`:
    /// three passes over the training data).
    pub(crate) fn new(
        settings: LoopSettings<'o>,
        steps: Option<u64>,
        model: M,
        params: Params,
    ) -> Self {
        Session {
            settings,
            steps,
            model,
            params,
        }
    }

    /// The run's steps: those asked for, or three passes over `items` at `batch` items a
    /// micro-batch.
    pub(crate) fn steps(&self, items: usize, batch: usize) -> u64 {
        let per_step = batch * self.settings.grad_accum;
        self.steps.unwrap_or_else(|| three_epochs(items, per_step))
    }

    /// Runs `task` for `steps` steps: [`drive`] with the session's loop settings.
    ///
    /// # Errors
    /// As [`drive`].
    pub(crate) fn drive<T: Task>(
        &self,
        task: T,
        steps: u64,
        record: serde_json::Value,
        observer: &mut dyn Observer,
        stop: &AtomicBool,
    ) -> Result<(Finished, T), TrainError> {
        let settings = &self.settings;
        drive(settings, task, &self.params, steps, record, observer, stop)
    }
}

impl<'o, M: Architecture> Session<'o, M> {
    /// Checks that a text run of `kind` on micro-batches of `(batch, length)` fits in memory,
    /// then builds the model of `config` (from the start's weights, or seeded).
    ///
    /// # Errors
    /// [`TrainError::TooLarge`], and the errors of building the model and its tokenizer files.
    fn for_text(
        run: &'o TrainRun<'o>,
        config: RoFormerConfig,
        kind: ModelKind,
        (batch, length): (usize, usize),
    ) -> Result<(Self, TextStart), TrainError> {
        check_training_memory(&config, kind, batch, length)?;
        let start = run.model;
        let weights = start.weights.as_ref();
        let trainable = build_trainable(&config, weights, run.options.seed, &Device::Cpu)?;
        let files = tokenizer_files(&start.tokenizer, &config)?;
        let session = Session::new(
            run.settings(),
            run.options.steps,
            trainable.model,
            trainable.params,
        );
        let text = TextStart {
            config,
            files,
            from_checkpoint: weights.is_some(),
            initialised: trainable.initialised,
            unused: trainable.unused,
        };
        Ok((session, text))
    }

    /// Tells `observer` the text run is prepared with `data`; returns the run's steps
    /// ([`Session::steps`] over `items` at `batch` items a micro-batch).
    ///
    /// # Errors
    /// The observer's refusal.
    fn announce(
        &self,
        text: &TextStart,
        observer: &mut dyn Observer,
        data: PreparedData<'_>,
        (items, batch): (usize, usize),
    ) -> Result<u64, TrainError> {
        observer.prepared(&Prepared {
            config: &text.config,
            params: &self.params,
            from_checkpoint: text.from_checkpoint,
            initialised: &text.initialised,
            unused: &text.unused,
            tokenizer_files: &text.files,
            data,
        })?;
        Ok(self.steps(items, batch))
    }
}

/// Steps for three passes over `items` at `per_step` items a step.
fn three_epochs(items: usize, per_step: usize) -> u64 {
    (3 * items).div_ceil(per_step.max(1)) as u64
}

/// The task's settings as `trainer_state.json` records them.
fn task_record(task: &impl serde::Serialize) -> Result<serde_json::Value, TrainError> {
    serde_json::to_value(task).map_err(|e| TrainError::Save(e.to_string()))
}

/// The AdamW settings of a run: torch's defaults with the run's learning rate and weight
/// decay.
fn adamw_config(options: &TrainOptions) -> AdamWConfig {
    AdamWConfig {
        weight_decay: options.weight_decay,
        ..AdamWConfig::with_lr(options.lr)
    }
}

/// The loop's side of a run's options: what [`drive`] reads, shared by [`fit`] and
/// [`crate::train::vision::fit_vision`].
pub(crate) struct LoopSettings<'a> {
    /// The run's directory.
    pub(crate) out: &'a Path,
    /// Micro-batches per step.
    pub(crate) grad_accum: usize,
    /// AdamW's settings (peak learning rate, weight decay).
    pub(crate) adamw: AdamWConfig,
    /// Which parameters AdamW decays, by name.
    pub(crate) decays: fn(&str) -> bool,
    /// Warm-up steps.
    pub(crate) warmup: u64,
    /// The decay after the warm-up.
    pub(crate) decay: Decay,
    /// Clip the global gradient norm to this.
    pub(crate) max_grad_norm: Option<f64>,
    /// Seed of dropout.
    pub(crate) seed: u64,
    /// Evaluate every this many steps.
    pub(crate) eval_every: u64,
    /// Save every this many steps.
    pub(crate) save_every: u64,
    /// Continue from `out/checkpoint`.
    pub(crate) resume: bool,
    /// The fault-injection hook of checkpoint saves.
    pub(crate) save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
}

impl TrainRun<'_> {
    /// The loop's settings of this run (AdamW's default decay rule).
    fn settings(&self) -> LoopSettings<'_> {
        LoopSettings::new(
            &self.out,
            &self.options,
            decays,
            self.resume,
            self.save_hook,
        )
    }
}

impl<'a> LoopSettings<'a> {
    /// The loop's settings of a run into `out` with `options`, AdamW decaying the parameters
    /// `decays` names, continued from `out/checkpoint` on `resume`.
    pub(crate) fn new(
        out: &'a Path,
        options: &TrainOptions,
        decays: fn(&str) -> bool,
        resume: bool,
        save_hook: Option<&'a dyn Fn(u64, SaveStep)>,
    ) -> Self {
        LoopSettings {
            out,
            grad_accum: options.grad_accum,
            adamw: adamw_config(options),
            decays,
            warmup: options.warmup,
            decay: options.decay,
            max_grad_norm: options.max_grad_norm,
            seed: options.seed,
            eval_every: options.eval_every,
            save_every: options.save_every,
            resume,
            save_hook,
        }
    }
}

/// What a run continues from: AdamW over `params` (with the state of `out/checkpoint` on
/// resume), the steps done, the last evaluation and the step in progress.
struct Restored {
    optimizer: AdamW,
    done: u64,
    last_eval: Option<EvalMetrics>,
    accumulation: Option<Accumulation>,
}

/// The AdamW of a run over `params`, with the state of `out/checkpoint` on resume, the steps
/// already done (0 for a fresh run), the checkpoint's last evaluation and its step in
/// progress.
fn restore(
    options: &LoopSettings<'_>,
    params: &Params,
    total: u64,
) -> Result<Restored, TrainError> {
    let vars = params.vars().to_vec();
    let mut optimizer = AdamW::with_decay_rule(vars, options.adamw, options.decays)?;
    if !options.resume {
        return Ok(Restored {
            optimizer,
            done: 0,
            last_eval: None,
            accumulation: None,
        });
    }
    let checkpoint = checkpoint_dir(options.out);
    let (state, from) = load_resume_state(&mut optimizer, &checkpoint, total)?;
    let done = from.done();
    let finished = done == total;
    let accumulation =
        load_accumulation(&checkpoint, &state, params, options.grad_accum, finished)?;
    Ok(Restored {
        optimizer,
        done,
        last_eval: state.last_eval,
        accumulation,
    })
}

/// Steps 4 to 6 of [`fit`] for a prepared `task`: the optimiser, the schedule and the loop.
/// Returns the task with the result, for what it kept (the best model).
fn drive<T: Task>(
    options: &LoopSettings<'_>,
    task: T,
    params: &Params,
    steps: u64,
    task_record: serde_json::Value,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<(Finished, T), TrainError> {
    let restored = restore(options, params, steps)?;
    let done = restored.done;
    let schedule = LrSchedule::new(options.adamw.lr, options.warmup, steps, options.decay)?;
    observer.starting(done, steps)?;
    let mut trainer = Trainer {
        task,
        params,
        optimizer: restored.optimizer,
        schedule,
        options: LoopOptions {
            steps,
            grad_accum: options.grad_accum,
            max_grad_norm: options.max_grad_norm,
            seed: options.seed,
            eval_every: options.eval_every,
            save_every: options.save_every,
        },
        out: options.out.to_path_buf(),
        step: done,
        task_record,
        last_eval: restored.last_eval,
        save_hook: options.save_hook,
        saved: (done > 0).then(|| {
            let micro = restored
                .accumulation
                .as_ref()
                .map_or(0, |a| a.micro_batches);
            (done, micro)
        }),
        accumulation: restored.accumulation,
    };
    let outcome = trainer.run(stop, &mut |event| observer.event(event))?;
    let finished = Finished {
        outcome,
        steps: trainer.step,
        accumulated: trainer.accumulation.as_ref().map_or(0, |a| a.micro_batches),
        last_eval: trainer.last_eval,
        best: None,
    };
    Ok((finished, trainer.task))
}

#[cfg(test)]
mod tests;
