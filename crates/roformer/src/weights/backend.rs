//! The candle-nn backend of [`Checkpoint::load_with`]: serves each tensor a model asks for,
//! recording every problem instead of stopping at the first.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::Init;

use super::Checkpoint;
use crate::error::WeightProblem;

/// What a load asked for: the stored names used and the problems met.
#[derive(Default)]
pub(super) struct Log {
    /// Stored names the model read.
    pub used: BTreeSet<String>,
    /// Every problem met, in the order met.
    pub problems: Vec<WeightProblem>,
}

/// The log, whether or not a panic poisoned its lock.
pub(super) fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves a checkpoint's tensors, checked, to a [`candle_nn::VarBuilder`].
pub(super) struct CheckedBackend<'a> {
    /// The checkpoint.
    pub checkpoint: &'a Checkpoint,
    /// Where uses and problems are recorded.
    pub log: Arc<Mutex<Log>>,
}

impl CheckedBackend<'_> {
    /// Zeros standing in for a bad tensor (a broadcast scalar: no allocation).
    fn stand_in(shape: &Shape, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        Tensor::zeros((), dtype, dev)?.broadcast_as(shape)
    }
}

impl SimpleBackend for CheckedBackend<'_> {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _init: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let expected = shape.dims().to_vec();
        let found = self
            .checkpoint
            .resolve(name)
            .and_then(|stored| Some((stored, self.checkpoint.tensors().get(stored)?)));
        let Some((stored, found)) = found else {
            lock(&self.log).problems.push(WeightProblem::Missing {
                name: name.to_string(),
                expected,
            });
            return Self::stand_in(&shape, dtype, dev);
        };
        let mut log = lock(&self.log);
        log.used.insert(stored.to_string());
        if *found != expected {
            log.problems.push(WeightProblem::Shape {
                name: stored.to_string(),
                expected,
                found: found.clone(),
            });
            return Self::stand_in(&shape, dtype, dev);
        }
        drop(log);
        match self.checkpoint.read(stored, dtype, dev) {
            Ok(t) => Ok(t),
            Err(problem) => {
                lock(&self.log).problems.push(problem);
                Self::stand_in(&shape, dtype, dev)
            }
        }
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let stored =
            self.checkpoint
                .resolve(name)
                .ok_or_else(|| candle_core::Error::CannotFindTensor {
                    path: name.to_string(),
                })?;
        lock(&self.log).used.insert(stored.to_string());
        self.checkpoint
            .read(stored, dtype, dev)
            .map_err(|problem| candle_core::Error::Msg(problem.to_string()))
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.checkpoint.resolve(name).is_some()
    }
}
