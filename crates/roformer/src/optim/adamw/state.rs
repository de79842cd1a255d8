//! Saving and restoring the AdamW state, for resuming training bit for bit.
//!
//! The state is a flat list of named tensors (ready for `candle_core::safetensors::save`):
//!
//! * `step`: the number of [`AdamW::step`] calls, `i64`, shape `(1,)`;
//! * for every parameter `P` that has been updated at least once:
//!   `exp_avg.P` (`m`, `f32`, `P`'s shape), `exp_avg_sq.P` (`v`, likewise) and `step.P` (its
//!   own update count `t`, `i64`, shape `(1,)`).
//!
//! A parameter never updated has no state tensors (as in torch's lazily created state).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};

use super::{AdamW, Moments};
use crate::optim::cpu::to_f32_vec;
use crate::optim::error::{OptimError, Result};

/// The name of the global step count.
const STEP: &str = "step";
/// The prefixes of the per-parameter state tensors.
const EXP_AVG: &str = "exp_avg.";
const EXP_AVG_SQ: &str = "exp_avg_sq.";
const PARAM_STEP: &str = "step.";

/// Reads a step count: a one-element tensor holding an integer in `[min, 2⁵³]`.
fn read_count(name: &str, t: &Tensor, min: u64) -> Result<u64> {
    let invalid = |reason: String| OptimError::InvalidState {
        name: name.to_string(),
        reason,
    };
    let values = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?;
    let [x] = values[..] else {
        return Err(invalid(format!("{} elements, expected 1", values.len())));
    };
    if !(x.fract() == 0.0 && x >= min as f64 && x <= 2f64.powi(53)) {
        return Err(invalid(format!("{x} is not an integer ≥ {min}")));
    }
    Ok(x as u64)
}

impl AdamW {
    /// The optimiser state as named tensors on the CPU (see the module documentation for the
    /// names): `step`, and `exp_avg.P`, `exp_avg_sq.P`, `step.P` for every parameter `P`
    /// updated at least once. [`AdamW::load_state`] on a fresh optimiser over the same
    /// parameters (holding the same values) continues bit for bit.
    pub fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let cpu = Device::Cpu;
        let count = |n: u64| Tensor::new(&[n as i64], &cpu);
        let mut out = vec![(STEP.to_string(), count(self.steps)?)];
        for p in &self.params {
            let Some(m) = &p.moments else { continue };
            out.push((
                format!("{EXP_AVG}{}", p.name),
                Tensor::from_slice(&m.exp_avg, &p.shape, &cpu)?,
            ));
            out.push((
                format!("{EXP_AVG_SQ}{}", p.name),
                Tensor::from_slice(&m.exp_avg_sq, &p.shape, &cpu)?,
            ));
            out.push((format!("{PARAM_STEP}{}", p.name), count(m.step)?));
        }
        Ok(out)
    }

    /// Restores a state written by [`AdamW::state_tensors`] (e.g. after a safetensors round
    /// trip). The moments may be of any float dtype (converted to `f32`).
    ///
    /// All-or-nothing: the whole state is checked before anything changes. Errors:
    /// [`OptimError::MissingState`] for a missing `step`, or a parameter with some but not all
    /// of its three tensors; [`OptimError::UnknownState`] for a name that matches no
    /// parameter; [`OptimError::StateShape`] for moments whose shape is not the parameter's;
    /// [`OptimError::InvalidState`] for a step count that is not an integer (`≥ 1` per
    /// parameter, at most the global `step`).
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>) -> Result<()> {
        for name in state.keys() {
            let param = [EXP_AVG_SQ, EXP_AVG, PARAM_STEP]
                .iter()
                .find_map(|prefix| name.strip_prefix(prefix));
            let known = name == STEP || param.is_some_and(|p| self.index.contains_key(p));
            if !known {
                return Err(OptimError::UnknownState(name.clone()));
            }
        }
        let steps = read_count(
            STEP,
            state
                .get(STEP)
                .ok_or_else(|| OptimError::MissingState(STEP.to_string()))?,
            0,
        )?;
        let mut restored = Vec::with_capacity(self.params.len());
        for p in &self.params {
            let names =
                [EXP_AVG, EXP_AVG_SQ, PARAM_STEP].map(|prefix| format!("{prefix}{}", p.name));
            let found = names.clone().map(|n| state.get(&n));
            let [Some(m), Some(v), Some(t)] = found else {
                if let Some(i) = found.iter().position(Option::is_none) {
                    if found.iter().any(Option::is_some) {
                        return Err(OptimError::MissingState(names[i].clone()));
                    }
                }
                restored.push(None);
                continue;
            };
            for (name, tensor) in names.iter().zip([m, v]) {
                if tensor.shape() != &p.shape {
                    return Err(OptimError::StateShape {
                        name: name.clone(),
                        expected: p.shape.dims().to_vec(),
                        found: tensor.dims().to_vec(),
                    });
                }
            }
            let step = read_count(&names[2], t, 1)?;
            if step > steps {
                return Err(OptimError::InvalidState {
                    name: names[2].clone(),
                    reason: format!("{step} updates exceed the global step count {steps}"),
                });
            }
            restored.push(Some(Moments {
                step,
                exp_avg: to_f32_vec(m)?,
                exp_avg_sq: to_f32_vec(v)?,
            }));
        }
        for (p, moments) in self.params.iter_mut().zip(restored) {
            p.moments = moments;
        }
        self.steps = steps;
        Ok(())
    }
}
