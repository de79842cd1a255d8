//! Learning-rate schedules with linear warm-up, as Hugging Face's
//! `get_linear_schedule_with_warmup`, `get_cosine_schedule_with_warmup` (one half cosine) and
//! `get_constant_schedule_with_warmup`.

use super::error::{OptimError, Result};

/// What follows the warm-up (`"linear"`, `"cosine"` or `"constant"` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    /// Linear decay to 0 at `total_steps`: factor `max(0, (total − step) / (total − warmup))`.
    Linear,
    /// Half-cosine decay to 0 at `total_steps`: factor `max(0, ½·(1 + cos(π·progress)))`,
    /// `progress = (step − warmup) / (total − warmup)`.
    Cosine,
    /// The peak, constantly: factor 1.
    Constant,
}

/// A learning-rate schedule: linear warm-up from 0 to `peak_lr` over `warmup_steps`, then
/// [`Decay`] until `total_steps`.
///
/// `step` is 0-based as Hugging Face's `LambdaLR` sees it: the learning rate of optimiser
/// update number `k` (0-based, i.e. [`super::AdamW::steps`] before the update) is
/// `lr_at(k)`; the first update uses `lr_at(0)`, which is 0 when there is a warm-up.
///
/// ```text
/// lr_at(step) = peak · step / warmup                      if step < warmup
///             = peak · max(0, (total − step) / (total − warmup))   Linear
///             = peak · max(0, ½(1 + cos(π · (step − warmup) / (total − warmup))))   Cosine
///             = peak                                             Constant
/// ```
///
/// The updates of a run are `0..total_steps`, where this equals Hugging Face. From
/// `total_steps` on, Linear and Cosine give 0 (Hugging Face's cosine would rise again past
/// the end, and gives 1 at `step = total` when `warmup = total`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    /// The learning rate at the end of the warm-up; finite, `≥ 0`.
    pub peak_lr: f64,
    /// The number of warm-up steps; at most `total_steps`.
    pub warmup_steps: u64,
    /// The number of optimiser updates of the whole run; at least 1.
    pub total_steps: u64,
    /// What follows the warm-up.
    pub decay: Decay,
}

impl LrSchedule {
    /// A checked schedule (see [`LrSchedule::validate`]).
    pub fn new(peak_lr: f64, warmup_steps: u64, total_steps: u64, decay: Decay) -> Result<Self> {
        let s = Self {
            peak_lr,
            warmup_steps,
            total_steps,
            decay,
        };
        s.validate()?;
        Ok(s)
    }

    /// Checks the fields: `peak_lr` finite and `≥ 0`, `total_steps ≥ 1`,
    /// `warmup_steps ≤ total_steps`; [`OptimError::InvalidSchedule`] otherwise.
    pub fn validate(&self) -> Result<()> {
        if !(self.peak_lr.is_finite() && self.peak_lr >= 0.0) {
            return Err(OptimError::InvalidSchedule(format!(
                "peak_lr {} is not finite and non-negative",
                self.peak_lr
            )));
        }
        if self.total_steps == 0 {
            return Err(OptimError::InvalidSchedule("total_steps is 0".into()));
        }
        if self.warmup_steps > self.total_steps {
            return Err(OptimError::InvalidSchedule(format!(
                "warmup_steps {} exceed total_steps {}",
                self.warmup_steps, self.total_steps
            )));
        }
        Ok(())
    }

    /// The multiplier of `peak_lr` at `step` (0-based), in `[0, 1]` (see the type's formula).
    pub fn factor_at(&self, step: u64) -> f64 {
        let (warmup, total) = (self.warmup_steps, self.total_steps);
        if step < warmup {
            return step as f64 / warmup.max(1) as f64;
        }
        if self.decay == Decay::Constant {
            return 1.0;
        }
        if step >= total {
            return 0.0;
        }
        let span = (total - warmup).max(1) as f64;
        match self.decay {
            Decay::Constant => 1.0,
            Decay::Linear => ((total - step) as f64 / span).max(0.0),
            Decay::Cosine => {
                let progress = (step - warmup) as f64 / span;
                (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
            }
        }
    }

    /// The learning rate of optimiser update number `step` (0-based):
    /// `peak_lr · factor_at(step)`.
    pub fn lr_at(&self, step: u64) -> f64 {
        self.peak_lr * self.factor_at(step)
    }
}
