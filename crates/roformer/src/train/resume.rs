//! What a resumed run continues from: a checkpoint's `trainer_state.json` and
//! `optimizer.safetensors`, read with a bound, restored into the optimiser and checked against
//! each other and against the run's total steps, and the step in progress that a stop saved
//! mid-step (`accumulated.safetensors`). `roformer train --resume` reads them here, and so does
//! the fuzzer (`roformer-fuzz trainer-state` and `optimizer`).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use candle_core::Tensor;

use crate::optim::{AdamW, Gradients};
use crate::train::error::TrainError;
use crate::train::params::Params;
use crate::train::run::{read_trainer_state, Accumulation, TrainerState, ACCUMULATED_FILE};

/// What a resumed run does, from the step its checkpoint records and the run's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeFrom {
    /// Steps remain: go on from this step.
    Step(u64),
    /// The run has done all its steps: nothing to do.
    Finished(u64),
}

impl ResumeFrom {
    /// The steps done.
    pub fn done(self) -> u64 {
        match self {
            Self::Step(n) | Self::Finished(n) => n,
        }
    }
}

/// Checks the step of a checkpoint's `trainer_state.json` (`recorded`) against the optimiser
/// state's own count (`optimizer`) and the run's total steps.
///
/// # Errors
/// [`TrainError::Resume`] for step 0 (a checkpoint is written after a step, at the earliest),
/// a step the optimiser state disagrees with, or a step beyond the total.
pub fn resume_from(
    state_file: &Path,
    recorded: u64,
    optimizer: u64,
    total: u64,
) -> Result<ResumeFrom, TrainError> {
    let refuse = |why: String| {
        Err(TrainError::Resume(format!(
            "{}: {why}",
            state_file.display()
        )))
    };
    if recorded == 0 {
        return refuse(
            "step 0, but a checkpoint is only written after a step; the file is damaged (start \
             the run again with --overwrite)"
                .into(),
        );
    }
    if recorded != optimizer {
        return refuse(format!(
            "step {recorded}, but the optimiser state beside it (optimizer.safetensors) records \
             step {optimizer}; the checkpoint is damaged or mixed from two runs"
        ));
    }
    if recorded > total {
        return refuse(format!(
            "step {recorded} is beyond the run's {total} steps; give --steps {recorded} or more \
             to continue it"
        ));
    }
    Ok(if recorded == total {
        ResumeFrom::Finished(total)
    } else {
        ResumeFrom::Step(recorded)
    })
}

/// The most bytes an `optimizer.safetensors` for `optimizer` may hold: both moments of every
/// parameter in f64 (16 bytes an element; we write f32), plus 4 KiB of header per tensor and
/// 1 MiB to spare. A longer file is not one of ours, and is refused before it is read.
fn state_file_limit(optimizer: &AdamW) -> u64 {
    let (count, elements) = optimizer.params().fold((0u64, 0u64), |(n, e), (_, v)| {
        (n + 1, e + v.elem_count() as u64)
    });
    elements
        .saturating_mul(16)
        .saturating_add((3 * count + 1).saturating_mul(4096))
        .saturating_add(1 << 20)
}

/// The tensors of the safetensors file at `path`, read only when it is a regular file no
/// longer than `limit` bytes.
fn read_state_file(path: &Path, limit: u64) -> Result<HashMap<String, Tensor>, TrainError> {
    let io = |source| TrainError::Io {
        path: path.to_path_buf(),
        source,
    };
    let refuse = |why: String| TrainError::Resume(format!("{}: {why}", path.display()));
    // Asked before opening: opening a FIFO would wait for a writer.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(refuse(format!(
            "longer than the {limit} bytes this model's optimiser state can take; not this \
             run's optimiser state"
        )));
    }
    candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu)
        .map_err(|e| refuse(format!("not a readable safetensors file: {e}")))
}

/// Reads the resume state of the checkpoint directory `checkpoint` into `optimizer`: its
/// `trainer_state.json` ([`read_trainer_state`]) and `optimizer.safetensors`
/// ([`AdamW::load_state`], all or nothing), then checks the steps ([`resume_from`]) for a run
/// of `total` steps.
///
/// # Errors
/// [`TrainError::Io`] for a file that cannot be read, [`TrainError::Resume`] for a malformed
/// or foreign file (naming it) and the refusals of [`resume_from`].
pub fn load_resume_state(
    optimizer: &mut AdamW,
    checkpoint: &Path,
    total: u64,
) -> Result<(TrainerState, ResumeFrom), TrainError> {
    let state = read_trainer_state(checkpoint)?;
    let path = checkpoint.join("optimizer.safetensors");
    let tensors = read_state_file(&path, state_file_limit(optimizer))?;
    optimizer.load_state(&tensors).map_err(|e| {
        TrainError::Resume(format!(
            "{}: not this run's optimiser state: {e}",
            path.display()
        ))
    })?;
    let state_file = checkpoint.join("trainer_state.json");
    let from = resume_from(&state_file, state.step, optimizer.steps(), total)?;
    Ok((state, from))
}

/// The step in progress that `state` records ([`TrainerState::partial`]), its gradients read
/// from [`ACCUMULATED_FILE`] in `checkpoint` and rebuilt in the recorded order, for a run of
/// `grad_accum` micro-batches a step over `params`. `None` when the checkpoint ends at a step
/// boundary, or when the run has no step left to continue (`finished`).
///
/// # Errors
/// [`TrainError::Io`] for a file that cannot be read, [`TrainError::Resume`] for a record that
/// does not fit the run (a count of micro-batches outside `1..grad_accum`, a gradient the
/// record or the file lacks, a name that is no parameter, a shape that is not the parameter's).
pub fn load_accumulation(
    checkpoint: &Path,
    state: &TrainerState,
    params: &Params,
    grad_accum: usize,
    finished: bool,
) -> Result<Option<Accumulation>, TrainError> {
    let Some(partial) = state.partial.as_ref().filter(|_| !finished) else {
        return Ok(None);
    };
    let path = checkpoint.join(ACCUMULATED_FILE);
    let refuse = |why: String| TrainError::Resume(format!("{}: {why}", path.display()));
    if partial.micro_batches == 0 || partial.micro_batches >= grad_accum as u64 {
        return Err(refuse(format!(
            "trainer_state.json records {} micro-batches of a step in progress, but a step of \
             this run has {grad_accum}",
            partial.micro_batches
        )));
    }
    let elements: u64 = params
        .vars()
        .iter()
        .map(|(_, v)| v.elem_count() as u64)
        .sum();
    let limit = elements
        .saturating_mul(4)
        .saturating_add((params.vars().len() as u64 + 1).saturating_mul(4096))
        .saturating_add(1 << 20);
    let mut tensors = read_state_file(&path, limit)?;
    if tensors.len() != partial.gradients.len() {
        return Err(refuse(format!(
            "{} gradients, but trainer_state.json lists {}",
            tensors.len(),
            partial.gradients.len()
        )));
    }
    let mut ordered = Vec::with_capacity(partial.gradients.len());
    for name in &partial.gradients {
        let Some(var) = params.get(name) else {
            return Err(refuse(format!("{name} is not a parameter of this model")));
        };
        let Some(tensor) = tensors.remove(name) else {
            return Err(refuse(format!("no gradient of {name}")));
        };
        if tensor.dims() != var.dims() {
            return Err(refuse(format!(
                "the gradient of {name} has shape {:?}, the parameter {:?}",
                tensor.dims(),
                var.dims()
            )));
        }
        ordered.push((name.as_str(), tensor));
    }
    let gradients = Gradients::from_tensors(ordered.iter().map(|(n, t)| (*n, t)))
        .map_err(|e| refuse(e.to_string()))?;
    Ok(Some(Accumulation {
        micro_batches: partial.micro_batches,
        gradients,
        loss_sum: partial.loss_sum,
        tokens: partial.tokens,
        seconds: partial.seconds,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_step_must_be_one_the_run_can_continue_from() {
        let file = Path::new("out/checkpoint/trainer_state.json");
        assert_eq!(resume_from(file, 4, 4, 8).unwrap(), ResumeFrom::Step(4));
        assert_eq!(resume_from(file, 8, 8, 8).unwrap(), ResumeFrom::Finished(8));
        let err = resume_from(file, 0, 0, 8).unwrap_err().to_string();
        assert!(err.contains("step 0"), "{err}");
        let err = resume_from(file, u64::MAX, u64::MAX, 8)
            .unwrap_err()
            .to_string();
        assert!(err.contains("beyond the run's 8 steps"), "{err}");
        let err = resume_from(file, u64::MAX, 4, 8).unwrap_err().to_string();
        assert!(err.contains("optimiser state"), "{err}");
    }
}
