//! AdamW with `torch.optim.AdamW` semantics, updating candle `Var`s in place with one fused
//! per-element pass over CPU slices.

mod config;
mod state;

use std::collections::{HashMap, HashSet};

use candle_core::{Shape, Var};
use rayon::prelude::*;

pub use config::{decays, AdamWConfig};

use super::cpu::{update_var, CHUNK, PAR_MIN};
use super::error::{OptimError, Result};
use super::gradients::Gradients;

/// The optimiser state of one parameter, created at its first update (as torch's lazy state).
#[derive(Debug, Clone)]
struct Moments {
    /// The number of updates this parameter received (torch's `state["step"]`).
    step: u64,
    /// `m`, row-major.
    exp_avg: Vec<f32>,
    /// `v`, row-major.
    exp_avg_sq: Vec<f32>,
}

/// One parameter under optimisation.
#[derive(Debug)]
struct Param {
    name: String,
    var: Var,
    shape: Shape,
    decay: bool,
    moments: Option<Moments>,
}

/// AdamW (Loshchilov & Hutter) exactly as `torch.optim.AdamW` (single-tensor path,
/// `amsgrad = False`, `maximize = False`), over named candle `Var`s.
///
/// At each [`AdamW::step`] with learning rate `lr`, every parameter that has a gradient `g` is
/// updated, with `t` its own 1-based update count and `λ = weight_decay` if the parameter is in
/// the decay group (else 0):
///
/// ```text
/// p ← p · (1 − lr·λ)
/// m ← β1·m + (1 − β1)·g
/// v ← β2·v + (1 − β2)·g²
/// p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + ε)
/// ```
///
/// The scalars (`1 − lr·λ`, `lr / (1 − β1ᵗ)`, `sqrt(1 − β2ᵗ)`, …) are computed in `f64` and
/// rounded to `f32`; the per-element arithmetic is `f32`, as torch does on `f32` tensors.
/// A parameter without a gradient in `grads` is skipped entirely (no decay, no moment update,
/// its `t` does not advance), as torch skips a parameter whose `.grad` is `None`.
///
/// Contiguous `f32` CPU variables are updated in place in their own storage; variables of
/// other dtypes or devices go through a CPU `f32` copy written back with `Var::set` (see the
/// module documentation). Moments are `f32` on the CPU.
#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    params: Vec<Param>,
    index: HashMap<String, usize>,
    steps: u64,
}

/// The per-step scalars of one parameter, rounded to `f32`.
#[derive(Debug, Clone, Copy)]
struct Coeffs {
    decay: f32,
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    step_size: f32,
    bias_correction2_sqrt: f32,
    eps: f32,
}

impl Coeffs {
    /// The scalars for update number `t` (1-based) at learning rate `lr`.
    fn new(c: &AdamWConfig, lr: f64, t: u64, decay: bool) -> Self {
        // `f64` powers of the step, as Python's `beta ** step` in torch.
        let t = t as f64;
        let weight_decay = if decay { c.weight_decay } else { 0.0 };
        Self {
            decay: (1.0 - lr * weight_decay) as f32,
            beta1: c.beta1 as f32,
            one_minus_beta1: (1.0 - c.beta1) as f32,
            beta2: c.beta2 as f32,
            one_minus_beta2: (1.0 - c.beta2) as f32,
            step_size: (lr / (1.0 - c.beta1.powf(t))) as f32,
            bias_correction2_sqrt: (1.0 - c.beta2.powf(t)).sqrt() as f32,
            eps: c.eps as f32,
        }
    }
}

/// The fused AdamW update of one slice (all four of the same length).
fn update_slice(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: &Coeffs) {
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        let decayed = *p * c.decay;
        *m = c.beta1 * *m + c.one_minus_beta1 * g;
        *v = c.beta2 * *v + c.one_minus_beta2 * g * g;
        let denom = v.sqrt() / c.bias_correction2_sqrt + c.eps;
        *p = decayed - c.step_size * *m / denom;
    }
}

/// [`update_slice`] in parallel chunks for large tensors.
fn update(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: &Coeffs) {
    if p.len() < PAR_MIN {
        update_slice(p, g, m, v, c);
        return;
    }
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| update_slice(p, g, m, v, c));
}

impl AdamW {
    /// An optimiser over `params` (named by their Hugging Face tensor names) with the default
    /// decay rule [`decays`]. Fails on an invalid `config`, a repeated name, or the same `Var`
    /// given under two names (it would be updated twice).
    pub fn new(params: Vec<(String, Var)>, config: AdamWConfig) -> Result<Self> {
        Self::with_decay_rule(params, config, decays)
    }

    /// As [`AdamW::new`], with weight decay applied to the parameters for which `decay(name)`
    /// is true.
    pub fn with_decay_rule(
        params: Vec<(String, Var)>,
        config: AdamWConfig,
        decay: impl Fn(&str) -> bool,
    ) -> Result<Self> {
        config.validate()?;
        let mut index = HashMap::with_capacity(params.len());
        let mut ids = HashSet::with_capacity(params.len());
        let mut out = Vec::with_capacity(params.len());
        for (name, var) in params {
            if index.insert(name.clone(), out.len()).is_some() || !ids.insert(var.id()) {
                return Err(OptimError::DuplicateParameter(name));
            }
            out.push(Param {
                decay: decay(&name),
                shape: var.shape().clone(),
                name,
                var,
                moments: None,
            });
        }
        Ok(Self {
            config,
            params: out,
            index,
            steps: 0,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// The number of [`AdamW::step`] calls so far (restored by [`AdamW::load_state`]).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The number of updates parameter `name` received (its `t` after the last step), `None`
    /// for an unknown name. Equal to [`AdamW::steps`] unless the parameter missed gradients.
    pub fn param_steps(&self, name: &str) -> Option<u64> {
        let p = &self.params[*self.index.get(name)?];
        Some(p.moments.as_ref().map_or(0, |m| m.step))
    }

    /// Whether parameter `name` is in the weight-decay group (`None` for an unknown name).
    pub fn is_decayed(&self, name: &str) -> Option<bool> {
        Some(self.params[*self.index.get(name)?].decay)
    }

    /// The parameters, in the order given.
    pub fn params(&self) -> impl Iterator<Item = (&str, &Var)> {
        self.params.iter().map(|p| (p.name.as_str(), &p.var))
    }

    /// One AdamW update at learning rate `lr` (usually [`super::LrSchedule::lr_at`] of the
    /// 0-based step number [`AdamW::steps`]) of every parameter with a gradient in `grads`;
    /// see the type's documentation for the formula.
    ///
    /// Everything is checked before anything changes: `lr` (finite, `≥ 0`), that every
    /// gradient names a parameter, and that its shape is the parameter's. Gradients are not
    /// checked for NaN here (use [`Gradients::check_finite`] before stepping).
    pub fn step(&mut self, grads: &Gradients, lr: f64) -> Result<()> {
        config::check_lr(lr)?;
        for name in grads.names() {
            let i = *self
                .index
                .get(name)
                .ok_or_else(|| OptimError::UnknownGradient(name.to_string()))?;
            let (shape, _) = grads
                .get(name)
                .ok_or_else(|| OptimError::UnknownGradient(name.to_string()))?;
            if shape != &self.params[i].shape {
                return Err(OptimError::ShapeMismatch {
                    name: name.to_string(),
                    expected: self.params[i].shape.dims().to_vec(),
                    found: shape.dims().to_vec(),
                });
            }
        }
        let config = self.config;
        self.params.par_iter_mut().try_for_each(|p| {
            let Some((_, g)) = grads.get(&p.name) else {
                return Ok(());
            };
            let moments = p.moments.get_or_insert_with(|| Moments {
                step: 0,
                exp_avg: vec![0.0; g.len()],
                exp_avg_sq: vec![0.0; g.len()],
            });
            let c = Coeffs::new(&config, lr, moments.step + 1, p.decay);
            update_var(&p.var, |values| {
                update(values, g, &mut moments.exp_avg, &mut moments.exp_avg_sq, &c);
            })?;
            moments.step += 1;
            Ok::<(), OptimError>(())
        })?;
        self.steps += 1;
        Ok(())
    }

    /// [`AdamW::step`] at the configured learning rate [`AdamWConfig::lr`].
    pub fn step_with_config_lr(&mut self, grads: &Gradients) -> Result<()> {
        self.step(grads, self.config.lr)
    }
}
