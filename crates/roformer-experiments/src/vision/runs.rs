//! The experiment's training runs: each arm's sweep over the rates on one seed, then its final
//! runs on every seed at its best rate. Every run is a `vision train` output directory under
//! `OUT/runs/NAME/`; a run with a `done.json` is not run again, and a run a stop left with a
//! checkpoint continues from it.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{bail, Context};
use roformer::images::augment::Augmentation;
use roformer::optim::Decay;
use roformer::train::run::Outcome;
use roformer::train::{fit_vision, TrainOptions, VisionTrainOptions};
use roformer::vision::{PositionKind, VisionConfig};
use roformer::Precision;
use roformer_runner::train::vision::Printer;
use serde::{Deserialize, Serialize};

use super::plan::{model_of, Plan};

/// The training side of every run: Fashion-MNIST's own, no resizing.
pub const TRAIN_SIDE: usize = 28;

/// One training run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// The position kind.
    pub arm: PositionKind,
    /// The peak learning rate.
    pub lr: f64,
    /// The seed of the weights and the data order.
    pub seed: u64,
}

impl Run {
    /// The run's directory name, e.g. `rope_axial-lr2e-3-s0`.
    pub fn name(&self) -> String {
        format!("{}-lr{:e}-s{}", self.arm.as_str(), self.lr, self.seed)
    }
}

/// What a finished run's `done.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Done {
    /// Top-1 on the 5,000 validation images at 28 x 28, after the last step.
    pub validation_top1: f64,
    /// Wall seconds of the run, its interrupted parts included.
    pub seconds: f64,
}

/// A run and where it lives.
#[derive(Debug, Clone)]
pub struct Trained {
    /// The run.
    pub run: Run,
    /// Its directory (the final model in `best/`).
    pub dir: PathBuf,
    /// Its record.
    pub done: Done,
}

/// The wall seconds of a run's earlier parts (`elapsed.json` beside its checkpoint).
#[derive(Debug, Serialize, Deserialize)]
struct Elapsed {
    seconds: f64,
}

/// Trains `run` into `out/runs/NAME` (or reads its `done.json`).
///
/// # Errors
/// The run's errors; a stop (`stopped; give the same command again`).
pub fn train(
    plan: &Plan,
    model: &VisionConfig,
    (data, out): (&Path, &Path),
    run: Run,
    stop: &AtomicBool,
) -> anyhow::Result<Trained> {
    let dir = out.join("runs").join(run.name());
    let config = model_of(model, run.arm);
    let resume = dir.join("checkpoint").is_dir();
    if resume {
        check_settings(&dir, plan, &config, run)?;
    }
    if dir.join("done.json").is_file() {
        let done = super::super::done::read_done(&dir)?;
        return Ok(Trained { run, dir, done });
    }
    if dir.exists() && !resume {
        // Killed before its first checkpoint: nothing to continue.
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let earlier = read_elapsed(&dir);
    eprintln!(
        "run {}{}",
        run.name(),
        if resume { " (continuing)" } else { "" }
    );
    let options = VisionTrainOptions {
        out: dir.clone(),
        config,
        init: None,
        data: data.to_path_buf(),
        train_limit: None,
        max_eval_images: None,
        batch_size: plan.batch_size,
        augmentation: Augmentation::none(TRAIN_SIDE),
        eval_side: TRAIN_SIDE,
        label_smoothing: plan.label_smoothing,
        train: TrainOptions {
            steps: Some(plan.steps),
            grad_accum: 1,
            lr: run.lr,
            warmup: plan.warmup,
            decay: Decay::Cosine,
            weight_decay: plan.weight_decay,
            max_grad_norm: (plan.max_grad_norm > 0.0).then_some(plan.max_grad_norm),
            seed: run.seed,
            eval_every: 0,
            save_every: plan.steps.div_ceil(4),
            precision: Precision::F32,
        },
        resume,
    };
    let mut printer = Printer::open(&dir, plan.steps.div_ceil(4), plan.steps)?;
    let started = Instant::now();
    let finished = fit_vision(&options, &mut printer, stop);
    let seconds = earlier + started.elapsed().as_secs_f64();
    super::super::write_json(&dir, "elapsed.json", &Elapsed { seconds })?;
    let finished = finished.with_context(|| format!("run {}", run.name()))?;
    if let Outcome::Stopped(_) = finished.outcome {
        bail!("stopped; give the same command again to continue");
    }
    let Some(eval) = finished.last_eval else {
        bail!("run {} ended without a validation score", run.name());
    };
    let done = Done {
        validation_top1: eval.accuracy,
        seconds,
    };
    super::super::done::mark_done(&dir, &done)?;
    Ok(Trained { run, dir, done })
}

/// What a run's `checkpoint/trainer_state.json` records of its settings.
#[derive(Debug, Deserialize)]
struct TrainerState {
    options: LoopRecord,
    schedule: ScheduleRecord,
    task: TaskRecord,
}

#[derive(Debug, Deserialize)]
struct LoopRecord {
    steps: u64,
    seed: u64,
    max_grad_norm: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct ScheduleRecord {
    peak_lr: f64,
    warmup_steps: u64,
}

#[derive(Debug, Deserialize)]
struct TaskRecord {
    batch_size: usize,
    label_smoothing: f64,
}

/// Refuses to reuse or continue the run in `dir` when its checkpoint was trained with other
/// settings or another model than `plan` and `config` say (a settings file edited between two
/// commands): its results would be reported as the new settings'.
///
/// # Errors
/// An unreadable checkpoint; the first setting that differs.
fn check_settings(dir: &Path, plan: &Plan, config: &VisionConfig, run: Run) -> anyhow::Result<()> {
    let checkpoint = dir.join("checkpoint");
    let state_path = checkpoint.join("trainer_state.json");
    let text = std::fs::read_to_string(&state_path)
        .with_context(|| format!("reading {}", state_path.display()))?;
    let state: TrainerState = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a trainer state", state_path.display()))?;
    let saved = VisionConfig::from_file(&checkpoint.join("config.json"))?;
    let clip = (plan.max_grad_norm > 0.0).then_some(plan.max_grad_norm);
    let differences = [
        ("steps", state.options.steps == plan.steps),
        ("seed", state.options.seed == run.seed),
        ("max_grad_norm", state.options.max_grad_norm == clip),
        ("rate", state.schedule.peak_lr == run.lr),
        ("warmup", state.schedule.warmup_steps == plan.warmup),
        ("batch_size", state.task.batch_size == plan.batch_size),
        (
            "label_smoothing",
            state.task.label_smoothing == plan.label_smoothing,
        ),
        ("model", saved == *config),
    ];
    if let Some((what, _)) = differences.iter().find(|(_, same)| !same) {
        bail!(
            "{} was trained with another {what} than the settings give; use another --out, or \
             remove the run to train it again",
            dir.display()
        );
    }
    Ok(())
}

/// The seconds `dir/elapsed.json` records (0 when absent or unreadable: a lost record only
/// undercounts).
fn read_elapsed(dir: &Path) -> f64 {
    std::fs::read_to_string(dir.join("elapsed.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Elapsed>(&t).ok())
        .map_or(0.0, |e| e.seconds)
}

/// The rate of `arm` with the best validation top-1 among `sweep`'s runs of it (the smaller
/// rate on a tie).
pub fn best_rate(sweep: &[Trained], arm: PositionKind) -> Option<f64> {
    let runs = sweep.iter().filter(|t| t.run.arm == arm);
    runs.fold(None, |best: Option<&Trained>, t| match best {
        Some(b) if b.done.validation_top1 >= t.done.validation_top1 => Some(b),
        _ => Some(t),
    })
    .map(|t| t.run.lr)
}
