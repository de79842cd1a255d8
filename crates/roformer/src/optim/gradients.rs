//! Gradients by parameter name, held as CPU `f32` buffers: accumulation over micro-batches,
//! scaling, global-norm clipping and finiteness checks, each one fused pass over the buffers
//! (rayon over chunks of large tensors).

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Device, Shape, Tensor, Var};
use rayon::prelude::*;

use super::cpu::{add_assign, all_finite, map_in_place, sum_squares, to_f32_vec};
use super::error::{OptimError, Result};

/// The gradient of one parameter: its shape and its values in row-major order.
#[derive(Debug, Clone)]
struct Grad {
    shape: Shape,
    values: Vec<f32>,
}

/// The `ε` added to the norm in [`Gradients::clip_global_norm`], as `torch.nn.utils.clip_grad_norm_`.
pub const CLIP_EPS: f64 = 1e-6;

/// Gradients by parameter name (Hugging Face tensor names), as `f32` values on the CPU, in the
/// order the parameters were given.
///
/// A parameter that received no gradient (e.g. one the loss does not depend on, such as the
/// pooler under a masked-LM loss) has **no entry**, not a zero entry: [`super::AdamW`] then
/// skips it entirely, as `torch.optim.AdamW` skips a parameter whose `.grad` is `None`, and
/// [`Gradients::accumulate`] treats it as zero.
#[derive(Debug, Clone, Default)]
pub struct Gradients {
    names: Vec<String>,
    grads: Vec<Grad>,
    index: HashMap<String, usize>,
}

impl Gradients {
    /// No gradients.
    pub fn new() -> Self {
        Self::default()
    }

    /// The gradients of `params` found in `store` (the result of `loss.backward()`), converted
    /// to `f32` on the CPU. A parameter with no gradient in `store` gets no entry (see the type's
    /// documentation). Gradients of a repeated name are summed, and must have the same shape.
    pub fn from_store(store: &GradStore, params: &[(String, Var)]) -> Result<Self> {
        let found: Vec<Option<(Shape, Vec<f32>)>> = params
            .par_iter()
            .map(|(_, var)| match store.get(var.as_tensor()) {
                Some(g) => Ok(Some((g.shape().clone(), to_f32_vec(g)?))),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let mut out = Self::new();
        for ((name, _), grad) in params.iter().zip(found) {
            if let Some((shape, values)) = grad {
                out.add_values(name, shape, values)?;
            }
        }
        Ok(out)
    }

    /// Builds gradients from named tensors (any dtype or device; converted to CPU `f32`).
    /// Gradients of a repeated name are summed, and must have the same shape.
    pub fn from_tensors<'a>(
        tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    ) -> Result<Self> {
        let tensors: Vec<(&str, &Tensor)> = tensors.into_iter().collect();
        let values: Vec<Vec<f32>> = tensors
            .par_iter()
            .map(|(_, t)| to_f32_vec(t))
            .collect::<Result<_>>()?;
        let mut out = Self::new();
        for ((name, t), values) in tensors.into_iter().zip(values) {
            out.add_values(name, t.shape().clone(), values)?;
        }
        Ok(out)
    }

    /// Adds `values` (of `shape`) to the gradient of `name`, creating it when absent.
    fn add_values(&mut self, name: &str, shape: Shape, values: Vec<f32>) -> Result<()> {
        match self.index.get(name) {
            Some(&i) => {
                let g = &mut self.grads[i];
                if g.shape != shape {
                    return Err(OptimError::ShapeMismatch {
                        name: name.to_string(),
                        expected: g.shape.dims().to_vec(),
                        found: shape.dims().to_vec(),
                    });
                }
                add_assign(&mut g.values, &values);
            }
            None => {
                self.index.insert(name.to_string(), self.grads.len());
                self.names.push(name.to_string());
                self.grads.push(Grad { shape, values });
            }
        }
        Ok(())
    }

    /// Gradient accumulation: `self[name] ← self[name] + other[name]` for every gradient of
    /// `other` (an entry absent from `self` counts as zero and is copied). Sum the gradients of
    /// micro-batches, then [`Gradients::scale`] by `1 / micro_batches` when each micro-batch loss
    /// is a mean. Fails, leaving `self` unchanged, when a shape differs.
    pub fn accumulate(&mut self, other: &Gradients) -> Result<()> {
        for (name, g) in other.names.iter().zip(&other.grads) {
            if let Some(&i) = self.index.get(name) {
                if self.grads[i].shape != g.shape {
                    return Err(OptimError::ShapeMismatch {
                        name: name.clone(),
                        expected: self.grads[i].shape.dims().to_vec(),
                        found: g.shape.dims().to_vec(),
                    });
                }
            }
        }
        for (name, g) in other.names.iter().zip(&other.grads) {
            self.add_values(name, g.shape.clone(), g.values.clone())?;
        }
        Ok(())
    }

    /// `g ← factor · g` for every gradient (`factor` rounded to `f32`, as torch multiplies an
    /// `f32` tensor by a Python float).
    pub fn scale(&mut self, factor: f64) {
        let f = factor as f32;
        self.grads
            .par_iter_mut()
            .for_each(|g| map_in_place(&mut g.values, |x| x * f));
    }

    /// The global L2 norm `‖g‖ = sqrt(Σ_params Σ_i g_i²)`, squares summed in `f64` in a fixed
    /// order (deterministic whatever the thread count). NaN or infinite when a gradient is.
    pub fn global_norm(&self) -> f64 {
        let per_param: Vec<f64> = self
            .grads
            .par_iter()
            .map(|g| sum_squares(&g.values))
            .collect();
        per_param.iter().sum::<f64>().sqrt()
    }

    /// Global-norm clipping as `torch.nn.utils.clip_grad_norm_`: with `n =` [`Self::global_norm`],
    /// when `n > max_norm` every gradient is scaled by `max_norm / (n + 1e-6)`; otherwise nothing
    /// changes. Returns the norm before clipping. A non-finite norm leaves the gradients as they
    /// are (check [`Self::first_non_finite`] and stop training). `max_norm` must be finite and
    /// non-negative.
    pub fn clip_global_norm(&mut self, max_norm: f64) -> Result<f64> {
        if !(max_norm.is_finite() && max_norm >= 0.0) {
            return Err(OptimError::InvalidSetting {
                field: "max_norm",
                value: max_norm,
                reason: "must be finite and non-negative",
            });
        }
        let norm = self.global_norm();
        if norm.is_finite() && norm > max_norm {
            self.scale(max_norm / (norm + CLIP_EPS));
        }
        Ok(norm)
    }

    /// Whether every gradient value is finite (no NaN, no infinity).
    pub fn is_finite(&self) -> bool {
        self.first_non_finite().is_none()
    }

    /// The name of the first parameter (in insertion order) whose gradient holds a NaN or an
    /// infinity, if any.
    pub fn first_non_finite(&self) -> Option<&str> {
        let bad = self
            .grads
            .par_iter()
            .position_first(|g| !all_finite(&g.values))?;
        Some(self.names[bad].as_str())
    }

    /// `Ok(())` when every gradient is finite, else [`OptimError::NonFinite`] naming the first
    /// offending parameter.
    pub fn check_finite(&self) -> Result<()> {
        match self.first_non_finite() {
            None => Ok(()),
            Some(name) => Err(OptimError::NonFinite(name.to_string())),
        }
    }

    /// The number of parameters with a gradient.
    pub fn len(&self) -> usize {
        self.grads.len()
    }

    /// Whether there is no gradient at all.
    pub fn is_empty(&self) -> bool {
        self.grads.is_empty()
    }

    /// Whether `name` has a gradient.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The names with a gradient, in insertion order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The gradient of `name` as a row-major `f32` slice, with its shape.
    pub fn get(&self, name: &str) -> Option<(&Shape, &[f32])> {
        let g = &self.grads[*self.index.get(name)?];
        Some((&g.shape, &g.values))
    }

    /// The gradient of `name` as an `f32` tensor on `device` (a copy).
    pub fn to_tensor(&self, name: &str, device: &Device) -> Result<Option<Tensor>> {
        match self.get(name) {
            None => Ok(None),
            Some((shape, values)) => Ok(Some(Tensor::from_slice(values, shape, device)?)),
        }
    }
}
