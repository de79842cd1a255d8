//! Image classification on Fashion-MNIST: a [`VisionForImageClassification`] trained from
//! scratch (or continued from a checkpoint) by the same skeleton as the text tasks (their
//! `Session`: the run's length, the optimiser, its schedule and the loop), as one call,
//! [`fit_vision`].
//!
//! ```text
//! fit_vision(options, observer, stop)
//!   1. the data: the 60,000 training images less a seeded validation cut of 5,000
//!      (images::fashion_mnist::split_validation; a tenth of a smaller set); the test set is
//!      never read here
//!   2. the model on trainable variables: seeded values (vision::init), then, with --init,
//!      a checkpoint's (a classifier's every tensor, or a DINOv3 backbone's under dinov3_vit.)
//!   3. AdamW (decay on matrices only), restored from out/checkpoint on resume
//!   4. the loop (run::Trainer): micro-batch i of the run is images
//!      order_e[j b .. (j + 1) b] of epoch e = i / (n / b), j = i mod (n / b), augmented and
//!      resized to the batch's side (images::batch), so a resumed run sees the same batches
//! ```
//!
//! The loss is cross entropy with label smoothing `eps` (torch's `label_smoothing`):
//!
//! ```text
//! loss = (1 - eps) * mean_i(-log p_i[y_i]) + eps * mean_i(mean_c(-log p_i[c]))
//! ```
//!
//! An evaluation is the plain cross entropy and top-1 on the validation cut at `eval_side`
//! (plain bilinear resize, as `roformer vision eval --size N` does), with the confusion
//! matrix; the best model by top-1 is kept in `out/best`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use serde::Serialize;

use crate::autograd::param_grads::ParamGrads;
use crate::cpu::Precision;
use crate::images::augment::Augmentation;
use crate::images::batch::{epoch_order, BatchBuilder, ImageBatch};
use crate::images::fashion_mnist::{self, Split};
use crate::images::planes::Channels;
use crate::mode::{Dropout, Mode};

use crate::train::checkpoint::write_dir_atomically;
use crate::train::confusion::ConfusionCounts;
use crate::train::error::TrainError;
use crate::train::options::TrainOptions;
use crate::train::params::Params;
use crate::train::run::{checkpoint_dir, EvalMetrics, Evaluation, Task};
use crate::train::session::{Finished, LoopSettings, Observer, Session};
use crate::vision::error::invalid;
use crate::vision::init::initialise;
use crate::vision::save::model_files;
use crate::vision::tensors::{expected_tensors, VisionKind};
use crate::vision::{VisionConfig, VisionForImageClassification, VisionModelDir};

/// Everything a vision training run needs.
#[derive(Debug, Clone)]
pub struct VisionTrainOptions {
    /// The run's directory: `checkpoint/` and `best/` are written there.
    pub out: PathBuf,
    /// The model's config (its `num_labels` must be 10, its `num_channels` 1 or 3).
    pub config: VisionConfig,
    /// The checkpoint to start from (`None`: seeded fresh weights).
    pub init: Option<PathBuf>,
    /// The directory holding Fashion-MNIST's gzipped IDX files.
    pub data: PathBuf,
    /// Use only the first this many training images (after the validation cut): a smoke run.
    pub train_limit: Option<usize>,
    /// Evaluate on at most this many validation images.
    pub max_eval_images: Option<usize>,
    /// Images per micro-batch.
    pub batch_size: usize,
    /// The training augmentation (random sides, crops, flips, erasing).
    pub augmentation: Augmentation,
    /// The side of the validation images at each evaluation.
    pub eval_side: usize,
    /// Label smoothing `eps` in `[0, 1)`.
    pub label_smoothing: f64,
    /// The optimisation settings ([`TrainOptions::VISION`] are those of `roformer vision
    /// train`); AdamW's weight decay goes to matrices only (biases, norms, tokens and scales
    /// get none), and `steps: None` is three passes over the training images.
    pub train: TrainOptions,
    /// Continue from `out/checkpoint`.
    pub resume: bool,
}

/// What `trainer_state.json` records of the task, checked on resume by the caller.
#[derive(Debug, Clone, Serialize)]
struct TaskRecord<'a> {
    task: &'static str,
    data: &'a Path,
    train_images: usize,
    validation_images: usize,
    batch_size: usize,
    augmentation: String,
    eval_side: usize,
    label_smoothing: f64,
}

/// The image-classification task of the loop.
struct ImageTask<'a> {
    model: &'a VisionForImageClassification,
    config: &'a VisionConfig,
    varmap: &'a VarMap,
    train: Split,
    validation: Split,
    builder: BatchBuilder,
    batch_size: usize,
    seed: u64,
    eval_side: usize,
    label_smoothing: f64,
    precision: Precision,
    preprocessor: Vec<u8>,
    /// The epoch whose order is cached, and the order.
    order: Mutex<(u64, Vec<usize>)>,
    best: Option<f64>,
    best_dir: PathBuf,
}

impl ImageTask<'_> {
    /// The images of micro-batch `index`.
    fn indices(&self, index: u64) -> Vec<usize> {
        let n = self.train.len();
        let per_epoch = (n / self.batch_size).max(1) as u64;
        let (epoch, j) = (index / per_epoch, (index % per_epoch) as usize);
        let mut cached = self.order.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != epoch || cached.1.is_empty() {
            *cached = (epoch, epoch_order(n, self.seed, epoch));
        }
        let start = (j * self.batch_size).min(n);
        let end = (start + self.batch_size).min(n);
        cached.1[start..end].to_vec()
    }

    /// The pixels of `batch` as a tensor `[b, c, s, s]`.
    fn pixels(batch: ImageBatch) -> Result<Tensor, TrainError> {
        let shape = (batch.batch, batch.channels, batch.side, batch.side);
        Ok(Tensor::from_vec(batch.pixels, shape, &Device::Cpu)?)
    }

    /// The validation cut's mean cross entropy, top-1 and confusion at `eval_side`; `None`
    /// when `stop` was set before the last batch.
    fn validation_metrics(
        &self,
        step: u64,
        stop: &AtomicBool,
    ) -> Result<Option<EvalMetrics>, TrainError> {
        let Some(scored) = score_split(
            self.model,
            &self.builder,
            &self.validation,
            (self.eval_side, 256),
            stop,
        )?
        else {
            return Ok(None);
        };
        let count = scored.counts.items();
        let loss = scored.loss_sum / count.max(1) as f64;
        Ok(Some(EvalMetrics {
            step,
            loss,
            accuracy: scored.counts.right() as f64 / count.max(1) as f64,
            perplexity: loss.exp(),
            macro_f1: Some(scored.counts.macro_f1()),
            confusion: Some(scored.counts.report()),
            count,
        }))
    }

    /// The files of a checkpoint of the model: `config.json`, `model.safetensors` and the
    /// `preprocessor_config.json` that `roformer vision classify` reads.
    fn files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
        let mut files = model_files(self.config, VisionKind::ImageClassification, self.varmap)?;
        files.push(("preprocessor_config.json".into(), self.preprocessor.clone()));
        Ok(files)
    }
}

/// A classifier's predictions on a split: the confusion counts and the summed cross entropy
/// `sum_i -log p_i[y_i]`.
#[derive(Debug, Clone)]
pub struct SplitScore {
    /// Gold label against predicted label, per image.
    pub counts: ConfusionCounts,
    /// The cross entropy summed over the images.
    pub loss_sum: f64,
}

/// Scores `model` on every image of `split`, each resized to `side x side` by `builder`'s
/// evaluation batches (no augmentation), `per_pass` images a forward pass: the argmax of the
/// logits against the label, and the cross entropy. `None` when `stop` was set before the
/// last pass.
///
/// # Errors
/// The data's and the model's errors; [`crate::error::ModelError::Input`] for a NaN or
/// infinite logit.
pub fn score_split(
    model: &VisionForImageClassification,
    builder: &BatchBuilder,
    split: &Split,
    (side, per_pass): (usize, usize),
    stop: &AtomicBool,
) -> Result<Option<SplitScore>, TrainError> {
    let mut counts = ConfusionCounts::new(model.config().num_labels);
    let mut loss_sum = 0.0f64;
    let all: Vec<usize> = (0..split.len()).collect();
    for chunk in all.chunks(per_pass.max(1)) {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let batch = builder.eval_batch(split, chunk, side)?;
        let labels = batch.labels.clone();
        let x = ImageTask::pixels(batch)?;
        let logits = model.forward(&x, model.plan(Mode::Inference))?;
        let loss = f64::from(smoothed_cross_entropy(&logits, &labels, 0.0)?.to_scalar::<f32>()?);
        if !loss.is_finite() {
            let reason = "the model gave a non-finite logit".to_string();
            return Err(crate::error::ModelError::Input(reason).into());
        }
        loss_sum += loss * labels.len() as f64;
        let predicted = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
        for (&y, &p) in labels.iter().zip(&predicted) {
            counts.add(y, p);
        }
    }
    Ok(Some(SplitScore { counts, loss_sum }))
}

/// `(1 - eps) * NLL + eps * mean_c(-log p)` over the rows of `logits` `[b, classes]`: the
/// training loss of [`fit_vision`] (`eps` 0: the plain cross entropy of its evaluations).
///
/// # Errors
/// Labels out of range or a batch that does not match `logits`; candle errors.
pub fn smoothed_cross_entropy(
    logits: &Tensor,
    labels: &[u32],
    eps: f64,
) -> Result<Tensor, TrainError> {
    let log_p = candle_nn::ops::log_softmax(logits, D::Minus1)?; // [b, classes]
    let targets = Tensor::from_slice(labels, (labels.len(), 1), logits.device())?;
    let nll = log_p.gather(&targets, 1)?.neg()?.mean_all()?;
    if eps == 0.0 {
        return Ok(nll);
    }
    let uniform = log_p.mean(D::Minus1)?.neg()?.mean_all()?;
    Ok(((nll * (1.0 - eps))? + (uniform * eps)?)?)
}

impl Task for ImageTask<'_> {
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &Dropout,
        grads: &ParamGrads,
    ) -> Result<(Tensor, usize), TrainError> {
        let indices = self.indices(index);
        let batch = self.builder.train_batch(&self.train, &indices, index)?;
        let labels = batch.labels.clone();
        let x = Self::pixels(batch)?;
        let plan = self.model.plan(Mode::Train {
            dropout,
            precision: self.precision,
        });
        let logits = self.model.forward(&x, plan.with_param_grads(grads))?;
        let loss = smoothed_cross_entropy(&logits, &labels, self.label_smoothing)?;
        Ok((loss, labels.len()))
    }

    fn evaluate(&self, step: u64, stop: &AtomicBool) -> Result<Evaluation, TrainError> {
        if self.validation.is_empty() {
            return Ok(Evaluation::NoData);
        }
        Ok(match self.validation_metrics(step, stop)? {
            Some(metrics) => Evaluation::Done(metrics),
            None => Evaluation::Stopped,
        })
    }

    fn model_files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
        self.files()
    }

    fn after_eval(&mut self, metrics: &EvalMetrics) -> Result<(), TrainError> {
        let score = metrics.accuracy;
        if self.best.is_none_or(|best| score > best) {
            self.best = Some(score);
            write_dir_atomically(&self.best_dir, &self.files()?)?;
        }
        Ok(())
    }
}

/// The trainable variables of a model for `config`: seeded values, then those of `init`.
///
/// # Errors
/// The config's and the checkpoint's errors (every missing or mis-shaped tensor named).
pub fn build_model(
    config: &VisionConfig,
    init: Option<&Path>,
    seed: u64,
) -> Result<(VarMap, VisionForImageClassification), TrainError> {
    let (mut varmap, device) = (VarMap::new(), Device::Cpu);
    initialise(
        &varmap,
        config,
        VisionKind::ImageClassification,
        seed,
        DType::F32,
        &device,
    )?;
    if let Some(dir) = init {
        let start = VisionModelDir::open(dir)?;
        // A classifier gives every tensor; a DINOv3 backbone all but the head, whose seeded
        // values stay.
        let (kind, scope) = if start.has_classifier() {
            (VisionKind::ImageClassification, "")
        } else {
            (VisionKind::Model, "dinov3_vit.")
        };
        let names = expected_tensors(config, kind);
        start.checkpoint.load_with(DType::F32, &device, |vb| {
            for t in &names {
                let value = vb.get(t.shape.as_slice(), &t.name)?;
                varmap.set_one(format!("{scope}{}", t.name), value)?;
            }
            Ok(())
        })?;
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let model = VisionForImageClassification::load(vb, config)?;
    Ok((varmap, model))
}

/// Whether a variable gets weight decay: matrices and the patch kernel, not biases, norms,
/// layer scales, tokens or position tables (as the PyTorch recipe and timm do).
pub fn vision_decays(name: &str) -> bool {
    let leaf = name.rsplit('.').next().unwrap_or(name);
    !(leaf == "bias"
        || leaf == "lambda1"
        || leaf.ends_with("_token")
        || leaf == "register_tokens"
        || leaf == "position_embeddings"
        || leaf == "rope_freqs"
        || name.contains("norm"))
}

/// The training images less the validation cut (5,000 of the release's 60,000; a tenth of a
/// smaller set), each cut to the options' limits.
///
/// # Errors
/// The data's errors.
fn read_splits(options: &VisionTrainOptions) -> Result<(Split, Split), TrainError> {
    let all = fashion_mnist::load_split(&options.data, fashion_mnist::Part::Train)?;
    let count = fashion_mnist::VALIDATION_COUNT.min(all.len() / 10);
    let (train, validation) =
        fashion_mnist::split_validation(&all, count, fashion_mnist::VALIDATION_SEED)?;
    let first = |split: Split, limit: Option<usize>| match limit {
        Some(limit) => split.select(&(0..limit.min(split.len())).collect::<Vec<_>>()),
        None => Ok(split),
    };
    Ok((
        first(train, options.train_limit)?,
        first(validation, options.max_eval_images)?,
    ))
}

/// What `trainer_state.json` records of the run's task.
fn task_record(
    options: &VisionTrainOptions,
    train_images: usize,
    validation_images: usize,
) -> Result<serde_json::Value, TrainError> {
    serde_json::to_value(TaskRecord {
        task: "image-classification",
        data: &options.data,
        train_images,
        validation_images,
        batch_size: options.batch_size,
        augmentation: format!("{:?}", options.augmentation),
        eval_side: options.eval_side,
        label_smoothing: options.label_smoothing,
    })
    .map_err(|e| TrainError::Save(e.to_string()))
}

/// Runs a vision training: reads the data, builds the model, restores the run on
/// `options.resume`, trains until the last step or until `stop` is set, keeping the best
/// model by validation top-1 in `out/best`. The buffers the training ops recycled between
/// steps are freed when it returns (`cpu::recycle::release`).
///
/// # Errors
/// Data and model errors, the resume checks, the observer's refusals and the loop's errors.
pub fn fit_vision(
    options: &VisionTrainOptions,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<Finished, TrainError> {
    let config = &options.config;
    let channels = match config.num_channels {
        1 => Channels::Grey,
        3 => Channels::Rgb,
        n => {
            let reason = format!("Fashion-MNIST is grey: a model of 1 or 3 channels, not {n}");
            return Err(invalid("num_channels", reason).into());
        }
    };
    let (train, validation) = read_splits(options)?;
    let builder = BatchBuilder::new(options.augmentation.clone(), channels, options.train.seed)?;
    // A resumed run continues from its own checkpoint's weights, `--init` or not.
    let start = if options.resume {
        Some(checkpoint_dir(&options.out))
    } else {
        options.init.clone()
    };
    let (varmap, model) = build_model(config, start.as_deref(), options.train.seed)?;
    let record = task_record(options, train.len(), validation.len())?;
    let train_options = &options.train;
    let settings = LoopSettings::new(
        &options.out,
        train_options,
        vision_decays,
        options.resume,
        None,
    );
    let params = Params::from_varmap(&varmap);
    let session = Session::new(settings, train_options.steps, model, params);
    let steps = session.steps(train.len(), options.batch_size);
    let best_dir = options.out.join("best");
    let task = ImageTask {
        model: &session.model,
        config,
        varmap: &varmap,
        train,
        validation,
        builder,
        batch_size: options.batch_size,
        seed: options.train.seed,
        eval_side: options.eval_side,
        label_smoothing: options.label_smoothing,
        precision: options.train.precision,
        preprocessor: preprocessor_json(config.num_channels)?,
        order: Mutex::new((0, Vec::new())),
        best: None,
        best_dir: best_dir.clone(),
    };
    let driven = session.drive(task, steps, record, observer, stop);
    // The steps' recycled buffers go back to the allocator, whatever the run's end.
    crate::cpu::recycle::release();
    let (mut finished, task) = driven?;
    finished.best = task.best.map(|_| best_dir);
    Ok(finished)
}

/// The `preprocessor_config.json` of a Fashion-MNIST model: resize to 28 x 28 (bilinear),
/// rescale by 1/255, normalise by the training split's mean and std (repeated per channel).
fn preprocessor_json(channels: usize) -> Result<Vec<u8>, TrainError> {
    let json = serde_json::json!({
        "do_convert_rgb": channels == 3,
        "do_resize": true,
        "size": {"height": fashion_mnist::SIDE, "width": fashion_mnist::SIDE},
        "resample": 2,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": true,
        "image_mean": vec![fashion_mnist::MEAN; channels],
        "image_std": vec![fashion_mnist::STD; channels],
    });
    serde_json::to_vec_pretty(&json).map_err(|e| TrainError::Save(e.to_string()))
}
