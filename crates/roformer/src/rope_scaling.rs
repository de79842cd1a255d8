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
//! per length (and cached: [`RotaryTable`]). Position interpolation maps position `m s` onto
//! the unscaled angle of `m`: `(m s)(theta_i / s) = m theta_i`. YaRN's attention factor
//! multiplies every cos and sin, so a score `q . k` grows by its square, as in transformers.
//! The frequencies are those of `rotary::scaling` ([`RopeSpec`]); a factor of exactly 1 for
//! the static schemes is no scaling (the model's own table, bit for bit).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rotary::scaling::{RopeSpec, Scaling, Yarn};
use rotary::{Coefficients, Layout, Positions, Rope, DEFAULT_BASE};

use crate::error::{ModelError, Result};

/// Dynamic NTK tables kept at once (one per pass length); past this the cache starts afresh.
const MAX_CACHED_LENGTHS: usize = 32;

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

/// The encoder's rotary embedding: the model's own [`Rope`], or a scaled one (per pass length
/// for dynamic NTK, cached by length).
#[derive(Debug)]
pub struct RotaryTable {
    /// The table of every pass (for dynamic NTK: of passes up to the training length).
    rope: Arc<Rope>,
    /// The scaling, if any.
    scaling: Option<RopeScaling>,
    /// Dynamic NTK's tables by pass length, past the training length.
    by_length: Mutex<BTreeMap<usize, Arc<Rope>>>,
}

impl RotaryTable {
    /// The paper's table for heads of `head_dim` (interleaved pairs, base 10000).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for an odd or too large head dim.
    pub fn new(head_dim: usize) -> Result<RotaryTable> {
        let rope = Rope::new(head_dim, head_dim, DEFAULT_BASE, Layout::Interleaved)
            .map_err(|e| invalid("num_attention_heads", &e))?;
        Ok(RotaryTable {
            rope: Arc::new(rope),
            scaling: None,
            by_length: Mutex::new(BTreeMap::new()),
        })
    }

    /// The same heads under `scaling` (`None`: the paper's table again).
    ///
    /// # Errors
    /// As [`RotaryTable::new`]; [`ModelError::InvalidConfig`] for a factor below 1 or a
    /// training length of 0.
    pub fn scaled(&self, scaling: Option<RopeScaling>) -> Result<RotaryTable> {
        let head_dim = self.rope.head_dim();
        let unscaled = RotaryTable::new(head_dim)?;
        let Some(scaling) = scaling else {
            return Ok(unscaled);
        };
        scaling.validate()?;
        let rope = match scaling.dynamic_length() {
            Some(_) => unscaled.rope,
            None if scaling.factor() == 1.0 => unscaled.rope,
            _ => scaling
                .spec(head_dim, DEFAULT_BASE)
                .rope(Layout::Interleaved, None)
                .map_err(|e| invalid("rope_scaling.factor", &e))
                .map(Arc::new)?,
        };
        Ok(RotaryTable {
            rope,
            scaling: Some(scaling),
            by_length: Mutex::new(BTreeMap::new()),
        })
    }

    /// The scaling in force (`None`: the paper's frequencies).
    pub fn scaling(&self) -> Option<&RopeScaling> {
        self.scaling.as_ref()
    }

    /// The table of passes up to the training length (of every pass, but for dynamic NTK).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The table of a pass whose largest position is `end - 1`: [`RotaryTable::rope`], or for
    /// dynamic NTK past the training length the one rebuilt at `end` (cached).
    ///
    /// # Errors
    /// [`ModelError::Input`] if the frequencies at `end` are not finite.
    pub fn rope_at(&self, end: usize) -> Result<Arc<Rope>> {
        let dynamic = match &self.scaling {
            Some(s) if s.dynamic_length().is_some_and(|l| end > l) => s,
            _ => return Ok(Arc::clone(&self.rope)),
        };
        let mut cache = match self.by_length.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(rope) = cache.get(&end) {
            return Ok(Arc::clone(rope));
        }
        if cache.len() >= MAX_CACHED_LENGTHS {
            cache.clear();
        }
        let rope = dynamic
            .spec(self.rope.head_dim(), DEFAULT_BASE)
            .rope(Layout::Interleaved, Some(end))
            .map_err(|e| ModelError::Input(format!("dynamic NTK at {end} positions: {e}")))?;
        let rope = Arc::new(rope);
        cache.insert(end, Arc::clone(&rope));
        Ok(rope)
    }

    /// The coefficients of a `batch x seq` pass at `positions`.
    ///
    /// # Errors
    /// [`ModelError::Input`] for positions that do not fit the batch.
    pub fn coefficients(
        &self,
        positions: Positions<'_>,
        batch: usize,
        seq: usize,
    ) -> Result<Coefficients> {
        let input = |e: rotary::RopeError| ModelError::Input(e.to_string());
        let rows = positions.rows(batch, seq).map_err(input)?;
        let dynamic = self
            .scaling
            .as_ref()
            .is_some_and(|s| s.dynamic_length().is_some());
        let rope = if dynamic {
            self.rope_at(end_of(positions, rows))?
        } else {
            Arc::clone(&self.rope)
        };
        rope.coefficients(positions, batch, seq).map_err(input)
    }
}

/// The largest position + 1 of `rows` positions (for fractional ones, of the largest rounded
/// down; 0 for none).
fn end_of(positions: Positions<'_>, rows: usize) -> usize {
    positions.integer_end(rows).unwrap_or_else(|| {
        let largest = (0..rows)
            .map(|r| positions.get(r))
            .fold(f64::NEG_INFINITY, f64::max);
        if largest >= 0.0 {
            (largest.floor() as usize).saturating_add(1)
        } else {
            0
        }
    })
}

/// A rotary error as an invalid `field`.
fn invalid(field: &'static str, e: &rotary::RopeError) -> ModelError {
    ModelError::InvalidConfig {
        field,
        reason: e.to_string(),
    }
}
