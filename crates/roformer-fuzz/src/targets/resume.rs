//! Targets `trainer-state`, `optimizer` and `run-json`: the files `roformer train mlm --resume`
//! reads besides the weights, taken from a real tiny run (`fixtures/resume/`).
//!
//! - `trainer-state` and `optimizer`: the bytes written as the checkpoint's
//!   `trainer_state.json` or `optimizer.safetensors` (the other one the run's own), then read
//!   by `roformer::train::resume::load_resume_state` into an AdamW over the run's model, as
//!   `--resume` does: parsed, restored and the steps checked.
//! - `run-json`: the bytes written as the run's `run.json`, and the `roformer` binary run on
//!   the copy: `train mlm --resume --out run --stop-after 3`. The record's type is the
//!   command's own argument struct, so the command is the only faithful reader; its exit
//!   status is the outcome (0 accepted, 1 rejected; a panic, a signal or no exit within
//!   [`RESUME_TIMEOUT`] is a finding, reported by panicking here). `--stop-after 3` bounds a
//!   run that the record sends on training to one step.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use candle_core::Device;
use roformer::optim::{AdamW, AdamWConfig};
use roformer::train::build_trainable;
use roformer::train::resume::load_resume_state;
use roformer::{Checkpoint, RoFormerConfig, RoFormerForMaskedLM};

use super::scratch_dir;
use crate::fixtures::resume::{ALL, CONFIG, MODEL, OPTIMIZER, RUN_JSON, TRAINER_STATE};
use crate::outcome::Outcome;

/// The fields of `trainer_state.json` (and of the objects in it), for the mutator to add.
pub const STATE_FIELDS: &[&str] = &[
    "step",
    "options",
    "steps",
    "grad_accum",
    "max_grad_norm",
    "seed",
    "eval_every",
    "save_every",
    "schedule",
    "task",
    "last_eval",
    "loss",
    "accuracy",
    "perplexity",
    "macro_f1",
    "count",
    "partial",
    "micro_batches",
    "loss_sum",
    "tokens",
    "seconds",
    "gradients",
];

/// The fields of `run.json` (`train mlm`'s flat arguments of before, the typed settings of
/// version 2, and the fingerprint's), for the mutator to add.
pub const RUN_FIELDS: &[&str] = &[
    "version",
    "model",
    "train",
    "packed",
    "batch_size",
    "validation_fraction",
    "config",
    "vocab",
    "init",
    "position",
    "corpus",
    "format",
    "text_field",
    "seq_len",
    "line_by_line",
    "whole_word",
    "validation",
    "batch",
    "grad_accum",
    "steps",
    "lr",
    "warmup",
    "decay",
    "weight_decay",
    "max_grad_norm",
    "seed",
    "eval_every",
    "eval_batches",
    "save_every",
    "out",
    "plot",
    "precision",
    "fingerprint",
    "data",
    "shapes",
];

/// The steps of the fixture run.
const STEPS: u64 = 2;

/// The longest a resume of the tiny run may take before it counts as a hang.
pub const RESUME_TIMEOUT: Duration = Duration::from_secs(20);

/// The fixture's `trainer_state.json`.
pub fn trainer_state_seeds() -> Vec<Vec<u8>> {
    vec![TRAINER_STATE.1.to_vec()]
}

/// The fixture's `optimizer.safetensors`.
pub fn optimizer_seeds() -> Vec<Vec<u8>> {
    vec![OPTIMIZER.1.to_vec()]
}

/// The fixture's `run.json`.
pub fn run_json_seeds() -> Vec<Vec<u8>> {
    vec![RUN_JSON.1.to_vec()]
}

/// Runs one `trainer_state.json`.
pub fn run_trainer_state(data: &[u8]) -> Outcome {
    load_state(data, OPTIMIZER.1)
}

/// Runs one `optimizer.safetensors`.
pub fn run_optimizer(data: &[u8]) -> Outcome {
    load_state(TRAINER_STATE.1, data)
}

/// Writes the two files into a scratch checkpoint and reads them as `--resume` does.
fn load_state(trainer_state: &[u8], optimizer: &[u8]) -> Outcome {
    let written = scratch_dir("resume-state").and_then(|dir| {
        std::fs::write(dir.join("trainer_state.json"), trainer_state)?;
        std::fs::write(dir.join("optimizer.safetensors"), optimizer)?;
        Ok(dir)
    });
    match written {
        Ok(dir) => Outcome::from_result(restore(&dir)),
        Err(e) => Outcome::Rejected(format!("cannot write the scratch files: {e}")),
    }
}

/// An AdamW over the fixture run's model, restored from the checkpoint `dir`.
fn restore(dir: &Path) -> Result<Outcome, roformer::train::TrainError> {
    let text = std::str::from_utf8(CONFIG.1).unwrap_or_default();
    let cfg = RoFormerConfig::from_json_str(text)?;
    let checkpoint = Checkpoint::from_safetensors_bytes(MODEL.0, MODEL.1.to_vec())?;
    let trainable =
        build_trainable::<RoFormerForMaskedLM>(&cfg, Some(&checkpoint), 1, &Device::Cpu)?;
    let config = AdamWConfig {
        weight_decay: 0.01,
        ..AdamWConfig::with_lr(5e-4)
    };
    let mut optimizer = AdamW::new(trainable.params.vars().to_vec(), config)?;
    load_resume_state(&mut optimizer, dir, STEPS)?;
    Ok(Outcome::Accepted)
}

/// The `roformer` binary: `ROFORMER_BIN`, or the one built beside this executable (the
/// fuzzer's own directory, or its parent for a test binary in `deps/`).
pub fn roformer_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ROFORMER_BIN") {
        return Some(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("roformer"))
        .find(|bin| bin.is_file())
}

/// Runs one `run.json`.
pub fn run_run_json(data: &[u8]) -> Outcome {
    let Some(bin) = roformer_binary() else {
        return Outcome::Rejected(
            "no roformer binary (build roformer-cli, or set ROFORMER_BIN)".into(),
        );
    };
    let written = scratch_dir("run-json").and_then(|dir| {
        let _ = std::fs::remove_dir_all(dir.join("run"));
        std::fs::create_dir_all(dir.join("run/checkpoint"))?;
        for (path, bytes) in ALL {
            std::fs::write(dir.join(path), bytes)?;
        }
        std::fs::write(dir.join(RUN_JSON.0), data)?;
        Ok(dir)
    });
    match written {
        Ok(dir) => resume(&bin, &dir),
        Err(e) => Outcome::Rejected(format!("cannot write the scratch files: {e}")),
    }
}

/// `roformer train mlm --resume` in `dir`; panics on a crash or a hang (the findings).
fn resume(bin: &Path, dir: &Path) -> Outcome {
    let log = dir.join("stderr.txt");
    let spawned = std::fs::File::create(&log).and_then(|stderr| {
        Command::new(bin)
            .args([
                "train",
                "mlm",
                "--resume",
                "--out",
                "run",
                "--stop-after",
                "3",
            ])
            .args(["--json", "--quiet"])
            .current_dir(dir)
            .env_remove("ROFORMER_TEST_ABORT_IN_SAVE")
            .env_remove("ROFORMER_TEST_PAUSE_IN_SAVE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Outcome::Rejected(format!("cannot run {}: {e}", bin.display())),
    };
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < RESUME_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("roformer did not end within {RESUME_TIMEOUT:?}");
            }
        }
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    match status.code() {
        Some(0) => Outcome::Accepted,
        Some(1) => Outcome::rejected(stderr.trim_start()),
        _ => panic!("roformer ended with {status}: {stderr}"),
    }
}
