//! Inference-time context extension of a rotary model: the encoder's frequencies rescaled so
//! that a model trained on `L` positions reads longer inputs, without retraining.
//!
//! With the paper's frequencies `theta_i = base^(-2i / d)` (`d` the head dim, `i < d / 2`), a
//! factor `s >= 1` and the training length `L`:
//!
//! | scaling | frequencies | attention factor |
//! |---|---|---|
//! | linear (position interpolation, Chen et al. 2023) | `theta_i / s` | 1 |
//! | NTK-aware (static) | `theta_i` with `base' = base s^(d / (d - 2))` | 1 |
//! | dynamic NTK (transformers' `dynamic`) | NTK-aware with `s' = s n / L - (s - 1)` when `n > L`, unscaled when `n <= L` | 1 |
//! | YaRN (Peng et al. 2023) | `theta_i ((1 - e_i) / s + e_i)`, `e_i` a ramp from 1 (pairs turning more than 32 times over `L`) to 0 (less than once) | `0.1 ln s + 1` |
//!
//! `n` is the length of the pass (the largest position + 1), so dynamic NTK's table is rebuilt
//! per length (and kept: rotary's [`ScaledRope`]). Position interpolation maps position `m s` onto
//! the unscaled angle of `m`: `(m s)(theta_i / s) = m theta_i`. YaRN's attention factor
//! multiplies every cos and sin, so a score `q . k` grows by its square, as in transformers.
//! The frequencies are those of `rotary::scaling` ([`RopeSpec`]); a factor of exactly 1 for
//! the static schemes is no scaling (the model's own table, bit for bit).

use rotary::scaling::{RopeSpec, Scaling, Yarn};
use rotary::{Layout, Rope, ScaledRope, DEFAULT_BASE};

use crate::error::{ModelError, Result};

/// An inference-time rescaling of the encoder's rotary frequencies: one of rotary's schemes
/// (see the module's table), [`Scaling::Linear`] (position interpolation),
/// [`Scaling::NtkAware`], [`Scaling::Dynamic`] (its `max_position_embeddings` the training
/// length `L`) or [`Scaling::Yarn`] (its `original_max_position_embeddings` `L`), each with its
/// factor `s`.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling(pub Scaling);

impl RopeScaling {
    /// The schemes of the module's table at factor `s` for a model trained on `l` positions, in
    /// the order the experiments report them: position interpolation, NTK-aware, dynamic NTK,
    /// YaRN (with transformers' defaults: `beta_fast` 32, `beta_slow` 1, the attention factor
    /// `0.1 ln s + 1`).
    pub fn schemes(s: f64, l: usize) -> [RopeScaling; 4] {
        let l = l as f64;
        [
            Scaling::Linear { factor: s },
            Scaling::NtkAware { factor: s },
            Scaling::Dynamic {
                factor: s,
                max_position_embeddings: l,
            },
            Scaling::Yarn(Yarn {
                factor: s,
                original_max_position_embeddings: l,
                beta_fast: 32.0,
                beta_slow: 1.0,
                truncate: true,
                attention_factor: None,
                mscale: None,
                mscale_all_dim: None,
            }),
        ]
        .map(RopeScaling)
    }

    /// A short name: `pi`, `ntk`, `dynamic-ntk`, `yarn` (rotary's name for another scheme).
    pub fn name(&self) -> &'static str {
        match self.0 {
            Scaling::Linear { .. } => "pi",
            Scaling::Dynamic { .. } => "dynamic-ntk",
            _ => self.0.name(),
        }
    }

    /// The extension factor `s`.
    pub fn factor(&self) -> f64 {
        match &self.0 {
            Scaling::Linear { factor }
            | Scaling::NtkAware { factor }
            | Scaling::Dynamic { factor, .. } => *factor,
            Scaling::Yarn(y) => y.factor,
            _ => 1.0,
        }
    }

    /// The training length `L` of dynamic NTK, past which its table follows the pass's length.
    fn dynamic_length(&self) -> Option<usize> {
        match self.0 {
            Scaling::Dynamic {
                max_position_embeddings,
                ..
            } => Some(max_position_embeddings as usize),
            _ => None,
        }
    }

    /// Checks the factor and the training length.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for a scheme other than the four of
    /// [`RopeScaling::schemes`], a factor below 1 or not finite, or a length below 1.
    fn validate(&self) -> Result<()> {
        if !matches!(
            self.0,
            Scaling::Linear { .. }
                | Scaling::NtkAware { .. }
                | Scaling::Dynamic { .. }
                | Scaling::Yarn(_)
        ) {
            return Err(ModelError::InvalidConfig {
                field: "rope_scaling.rope_type",
                reason: format!("{} is not one of pi, ntk, dynamic-ntk, yarn", self.name()),
            });
        }
        let factor = self.factor();
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(ModelError::InvalidConfig {
                field: "rope_scaling.factor",
                reason: format!("{factor} is not a finite number >= 1"),
            });
        }
        let length = match &self.0 {
            Scaling::Dynamic {
                max_position_embeddings: l,
                ..
            } => *l,
            Scaling::Yarn(y) => y.original_max_position_embeddings,
            _ => 1.0,
        };
        if length.is_nan() || length < 1.0 {
            return Err(ModelError::InvalidConfig {
                field: "rope_scaling.original_max_position_embeddings",
                reason: format!("{length} is not a length (the training length, at least 1)"),
            });
        }
        Ok(())
    }

    /// The schedule of [`rotary::scaling`] for heads of `head_dim` (the rotary spec's `dim`)
    /// and frequency `base`.
    pub fn spec(&self, head_dim: usize, base: f64) -> RopeSpec {
        RopeSpec {
            head_dim,
            dim: head_dim,
            base,
            scaling: self.0.clone(),
        }
    }
}

/// The paper's table for heads of `head_dim` (interleaved pairs, base 10000).
///
/// # Errors
/// [`ModelError::InvalidConfig`] for an odd or too large head dim.
fn paper_rope(head_dim: usize) -> Result<Rope> {
    Rope::new(head_dim, head_dim, DEFAULT_BASE, Layout::Interleaved)
        .map_err(|e| invalid("num_attention_heads", &e))
}

/// The encoder's rotary table for heads of `head_dim` under `scaling`: the paper's table
/// (`None`, or a static scheme at factor exactly 1), the scheme's table, or for dynamic NTK
/// the paper's table up to the training length and the scheme's at each longer pass length
/// (rotary's [`ScaledRope`] keeps them).
///
/// # Errors
/// [`ModelError::InvalidConfig`] for an odd or too large head dim, a scheme other than the
/// four of [`RopeScaling::schemes`], a factor below 1 or not finite, or a training length of
/// 0.
pub(crate) fn rotary_table(head_dim: usize, scaling: Option<&RopeScaling>) -> Result<ScaledRope> {
    let own = paper_rope(head_dim)?;
    let Some(scaling) = scaling else {
        return Ok(ScaledRope::fixed(own));
    };
    scaling.validate()?;
    let spec = scaling.spec(head_dim, DEFAULT_BASE);
    Ok(match scaling.dynamic_length() {
        Some(length) => ScaledRope::by_length(own, spec, Layout::Interleaved, length),
        None if scaling.factor() == 1.0 => ScaledRope::fixed(own),
        None => ScaledRope::fixed(
            spec.rope(Layout::Interleaved, None)
                .map_err(|e| invalid("rope_scaling.factor", &e))?,
        ),
    })
}

/// A rotary error as an invalid `field`.
fn invalid(field: &'static str, e: &rotary::RopeError) -> ModelError {
    ModelError::InvalidConfig {
        field,
        reason: e.to_string(),
    }
}
