//! AdamW hyper-parameters and the weight-decay rule by parameter name.

use crate::optim::error::{OptimError, Result};

/// AdamW hyper-parameters (the defaults are `torch.optim.AdamW`'s, with Hugging Face's usual
/// `weight_decay = 0.01`).
///
/// Per parameter with gradient `g`, at its 1-based step `t`, with learning rate `lr` and
/// `λ = weight_decay` (0 outside the decay group, see [`decays`]):
///
/// ```text
/// p ← p · (1 − lr·λ)
/// m ← β1·m + (1 − β1)·g
/// v ← β2·v + (1 − β2)·g²
/// p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + ε)
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// The learning rate used by [`super::AdamW::step_with_config_lr`] (usually the schedule's
    /// peak); [`super::AdamW::step`] takes the step's learning rate explicitly. Finite, `≥ 0`.
    pub lr: f64,
    /// `β1`, the decay of the first-moment average `m`; in `[0, 1)`.
    pub beta1: f64,
    /// `β2`, the decay of the second-moment average `v`; in `[0, 1)`.
    pub beta2: f64,
    /// `ε`, added to the bias-corrected `sqrt(v)`; finite, `≥ 0`.
    pub eps: f64,
    /// `λ`, the decoupled weight decay `p ← p·(1 − lr·λ)` of the decay group; finite, `≥ 0`.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    /// `lr = 1e-3, β1 = 0.9, β2 = 0.999, ε = 1e-8, λ = 0.01`.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl AdamWConfig {
    /// The defaults with learning rate `lr`.
    pub fn with_lr(lr: f64) -> Self {
        Self {
            lr,
            ..Self::default()
        }
    }

    /// Checks every field against its domain (see the field docs); the first violation is
    /// reported as [`OptimError::InvalidSetting`].
    pub fn validate(&self) -> Result<()> {
        check_lr(self.lr)?;
        for (field, value) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&value) {
                return Err(OptimError::InvalidSetting {
                    field,
                    value,
                    reason: "must be in [0, 1)",
                });
            }
        }
        for (field, value) in [("eps", self.eps), ("weight_decay", self.weight_decay)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(OptimError::InvalidSetting {
                    field,
                    value,
                    reason: "must be finite and non-negative",
                });
            }
        }
        Ok(())
    }
}

/// Checks a learning rate: finite and `≥ 0`.
pub(crate) fn check_lr(lr: f64) -> Result<()> {
    if lr.is_finite() && lr >= 0.0 {
        Ok(())
    } else {
        Err(OptimError::InvalidSetting {
            field: "lr",
            value: lr,
            reason: "must be finite and non-negative",
        })
    }
}

/// The default weight-decay rule (Hugging Face's `no_decay = ["bias", "LayerNorm.weight"]`,
/// widened to every normalisation layer): a parameter decays **unless**
///
/// * its last dot-separated component is `bias` (every `*.bias`, including
///   `cls.predictions.bias`), or
/// * any dot-separated component contains `norm`, case-insensitively (`LayerNorm`,
///   `layer_norm`, `norm`, `rms_norm`, …).
///
/// Everything else decays: dense and attention weights, the embedding tables, the MLM
/// decoder weight.
pub fn decays(name: &str) -> bool {
    let last_is_bias = name.rsplit('.').next() == Some("bias");
    let is_norm = name
        .split('.')
        .any(|part| part.to_ascii_lowercase().contains("norm"));
    !(last_is_bias || is_norm)
}
