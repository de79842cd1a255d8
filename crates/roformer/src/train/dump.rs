//! A trajectory dump: the first steps of a masked-LM run written so that another framework can
//! train the same model from the same weights on the same batches, and the two loss curves be
//! compared step by step (`scripts/compare_trajectory.py` does it in PyTorch).
//!
//! The directory holds:
//!
//! - `init/`: the initial weights as a Hugging Face checkpoint (`config.json`,
//!   `model.safetensors`, tokenizer files), written before the first update;
//! - `batches.safetensors`: `input_ids`, `token_type_ids`, `attention_mask` and `labels`
//!   ([`IGNORE`](crate::train::IGNORE) where no token is predicted), each `[steps, batch, seq]`
//!   int64: the micro-batch of each dumped step as the loss saw it, after masking;
//! - `run.json` ([`DumpRecord`]): the optimiser and schedule settings, and per step the
//!   training loss, the learning rate and the gradient norm before clipping.
//!
//! The last two are written when the run ends (finished, stopped or failed), for the steps it
//! did up to the dump's count. The dump changes nothing in the run: it trains to its last
//! step as it would without one; a caller that wants only the dumped steps stops it after them
//! (`roformer train mlm --dump-steps N --stop-after N`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::Serialize;

use crate::data::MlmBatches;
use crate::train::checkpoint::{safetensors_bytes, write_dir_atomically};
use crate::train::error::TrainError;
use crate::train::run::Event;

/// `run.json`'s `format`: what a reader of the dump may expect.
pub const DUMP_FORMAT: &str = "roformer-trajectory-dump/1";

/// Where to dump the first steps of a run, and how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpOptions {
    /// The directory (created; an earlier dump's `init/`, `batches.safetensors` and
    /// `run.json` there are replaced).
    pub dir: PathBuf,
    /// Steps dumped, at least 1 (a run of fewer steps dumps all of its own).
    pub steps: u64,
}

/// The optimiser and schedule of the run, as `run.json` records them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DumpSettings {
    /// The model's Hugging Face class (`BertForMaskedLM`, `RoFormerForMaskedLM`).
    pub model: String,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps: `lr_at(k) = lr · k / warmup_steps` for the 0-based update `k` below it.
    pub warmup_steps: u64,
    /// The schedule's total steps (the run's, not the dump's).
    pub total_steps: u64,
    /// `linear`, `cosine` or `constant`.
    pub decay: String,
    /// AdamW's decoupled weight decay (on the parameters of `roformer::optim::decays`).
    pub weight_decay: f64,
    /// AdamW's `β1`.
    pub beta1: f64,
    /// AdamW's `β2`.
    pub beta2: f64,
    /// AdamW's `ε`, added to the bias-corrected `sqrt(v)`.
    pub eps: f64,
    /// The global gradient norm is clipped to this (`None`: no clipping), as
    /// `torch.nn.utils.clip_grad_norm_`: `g · max / (‖g‖ + clip_eps)` when `‖g‖ > max`.
    pub max_grad_norm: Option<f64>,
    /// The `ε` of the clipping.
    pub clip_eps: f64,
    /// The precision of the training products (`f32`, `bf16`).
    pub precision: String,
    /// The run's seed (initial weights, data order, masks, dropout).
    pub seed: u64,
}

/// `run.json` of a dump.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DumpRecord {
    /// [`DUMP_FORMAT`].
    pub format: &'static str,
    /// The settings.
    #[serde(flatten)]
    pub settings: DumpSettings,
    /// Steps asked for.
    pub requested_steps: u64,
    /// Per dumped step: the mean cross entropy over the predicted tokens of its batch.
    pub losses: Vec<f64>,
    /// Per dumped step: its learning rate.
    pub lrs: Vec<f64>,
    /// Per dumped step: the global gradient norm before clipping.
    pub grad_norms: Vec<f64>,
}

/// The steps of a run as they pass, up to the dump's count.
#[derive(Debug, Clone, Default)]
pub struct StepLog {
    limit: u64,
    losses: Vec<f64>,
    lrs: Vec<f64>,
    grad_norms: Vec<f64>,
}

impl StepLog {
    /// Keeps the first `limit` steps.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Notes `event` when it is one of the first `limit` steps.
    pub fn record(&mut self, event: &Event) {
        if let Event::Step(m) = event {
            if m.step <= self.limit && m.step == self.losses.len() as u64 + 1 {
                self.losses.push(m.loss);
                self.lrs.push(m.lr);
                self.grad_norms.push(m.grad_norm);
            }
        }
    }
}

/// Checks that a run can be dumped and writes `init/` from `init_files` (the model's files
/// before the first update); removes what an earlier dump left in the directory.
///
/// # Errors
/// [`TrainError::Dump`] for 0 steps, a run of several micro-batches a step (the format holds
/// one batch a step) or a resumed run (its weights are not the initial ones);
/// [`TrainError::Io`] for files that cannot be written.
pub fn begin(
    options: &DumpOptions,
    grad_accum: usize,
    resume: bool,
    init_files: &[(String, Vec<u8>)],
) -> Result<(), TrainError> {
    if options.steps == 0 {
        return Err(TrainError::Dump(
            "0 steps asked for; give at least 1".into(),
        ));
    }
    if grad_accum != 1 {
        return Err(TrainError::Dump(format!(
            "it holds one batch a step, and the run accumulates {grad_accum} micro-batches a \
             step; dump a run of 1"
        )));
    }
    if resume {
        return Err(TrainError::Dump(
            "a resumed run does not start from its initial weights; dump a fresh run".into(),
        ));
    }
    for stale in ["batches.safetensors", "run.json"] {
        let path = options.dir.join(stale);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(TrainError::Io { path, source: e })
            }
            _ => {}
        }
    }
    write_dir_atomically(&options.dir.join("init"), init_files)
}

/// Writes `batches.safetensors` (the batches of the logged steps, from `batches`) and
/// `run.json` of a dump.
///
/// # Errors
/// [`TrainError::Io`] and [`TrainError::Save`] for files that cannot be written.
pub fn finish(
    options: &DumpOptions,
    log: &StepLog,
    batches: &MlmBatches,
    settings: DumpSettings,
) -> Result<(), TrainError> {
    let tensors = batch_tensors(batches, log.losses.len() as u64)?;
    write_file(
        &options.dir.join("batches.safetensors"),
        &safetensors_bytes(&tensors)?,
    )?;
    let record = DumpRecord {
        format: DUMP_FORMAT,
        settings,
        requested_steps: options.steps,
        losses: log.losses.clone(),
        lrs: log.lrs.clone(),
        grad_norms: log.grad_norms.clone(),
    };
    let mut json =
        serde_json::to_vec_pretty(&record).map_err(|e| TrainError::Save(e.to_string()))?;
    json.push(b'\n');
    write_file(&options.dir.join("run.json"), &json)
}

/// The four `[steps, batch, seq]` int64 tensors of the batches of steps `0..steps`.
fn batch_tensors(batches: &MlmBatches, steps: u64) -> Result<Vec<(String, Tensor)>, TrainError> {
    let mut columns: [Vec<i64>; 4] = Default::default();
    let (mut rows, mut seq) = (0, 0);
    for step in 0..steps {
        let b = batches.batch(step);
        (rows, seq) = (b.batch, b.seq);
        let widen = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>();
        columns[0].extend(widen(&b.input_ids));
        columns[1].extend(widen(&b.token_type_ids));
        columns[2].extend(widen(&b.attention_mask));
        columns[3].extend_from_slice(&b.labels);
    }
    let names = ["input_ids", "token_type_ids", "attention_mask", "labels"];
    names
        .into_iter()
        .zip(columns)
        .map(|(name, values)| {
            let t = Tensor::from_vec(values, (steps as usize, rows, seq), &Device::Cpu)?;
            Ok((name.to_string(), t))
        })
        .collect()
}

/// Writes `bytes` to `path` whole or not at all: to a sibling `.NAME.partial`, synced, then
/// renamed over `path`.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TrainError::Io { path, source }
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let partial = path.with_file_name(format!(".{name}.partial"));
    let mut f = fs::File::create(&partial).map_err(io(&partial))?;
    f.write_all(bytes).map_err(io(&partial))?;
    f.sync_all().map_err(io(&partial))?;
    fs::rename(&partial, path).map_err(io(path))
}
