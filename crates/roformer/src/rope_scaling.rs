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

/// The context-extension schemes of [`RopeScaling`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingKind {
    /// Linear position interpolation: every frequency divided by the factor.
    Linear,
    /// NTK-aware: the base raised to `base s^(d / (d - 2))`, the same at every length.
    NtkAware,
    /// Dynamic NTK: NTK-aware at `s' = s n / L - (s - 1)` for a pass of `n > L` positions.
    DynamicNtk,
    /// YaRN: per-pair interpolation by wavelength, and the attention factor `0.1 ln s + 1`.
    Yarn,
}

impl ScalingKind {
    /// Every scheme, in the order the experiments report them.
    pub const ALL: [ScalingKind; 4] = [
        ScalingKind::Linear,
        ScalingKind::NtkAware,
        ScalingKind::DynamicNtk,
        ScalingKind::Yarn,
    ];

    /// A short name (`pi`, `ntk`, `dynamic-ntk`, `yarn`).
    pub fn name(self) -> &'static str {
        match self {
            ScalingKind::Linear => "pi",
            ScalingKind::NtkAware => "ntk",
            ScalingKind::DynamicNtk => "dynamic-ntk",
            ScalingKind::Yarn => "yarn",
        }
    }
}

/// An inference-time rescaling of the encoder's rotary frequencies (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeScaling {
    /// The scheme.
    pub kind: ScalingKind,
    /// The extension factor `s` (at least 1).
    pub factor: f64,
    /// The length `L` the model was trained on (at least 1).
    pub original_length: usize,
}

impl RopeScaling {
    /// Checks the factor and the training length.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for a factor below 1 or not finite, or a length of 0.
    fn validate(&self) -> Result<()> {
        if !(self.factor.is_finite() && self.factor >= 1.0) {
            return Err(ModelError::InvalidConfig {
                field: "rope_scaling.factor",
                reason: format!("{} is not a finite number >= 1", self.factor),
            });
        }
        if self.original_length == 0 {
            return Err(ModelError::InvalidConfig {
                field: "rope_scaling.original_max_position_embeddings",
                reason: "0 is not a length (the training length, at least 1)".into(),
            });
        }
        Ok(())
    }

    /// The schedule of [`rotary::scaling`] for heads of `head_dim` (the rotary spec's `dim`)
    /// and frequency `base`.
    pub fn spec(&self, head_dim: usize, base: f64) -> RopeSpec {
        let (s, d, l) = (self.factor, head_dim as f64, self.original_length as f64);
        let (base, scaling) = match self.kind {
            ScalingKind::Linear => (base, Scaling::Linear { factor: s }),
            ScalingKind::NtkAware => (base * s.powf(d / (d - 2.0)), Scaling::Default),
            ScalingKind::DynamicNtk => (
                base,
                Scaling::Dynamic {
                    factor: s,
                    max_position_embeddings: l,
                },
            ),
            ScalingKind::Yarn => (
                base,
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
            ),
        };
        RopeSpec {
            head_dim,
            dim: head_dim,
            base,
            scaling,
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
        let rope = match scaling.kind {
            ScalingKind::DynamicNtk => unscaled.rope,
            _ if scaling.factor == 1.0 => unscaled.rope,
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
    pub fn scaling(&self) -> Option<RopeScaling> {
        self.scaling
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
        let dynamic = match self.scaling {
            Some(s) if s.kind == ScalingKind::DynamicNtk && end > s.original_length => s,
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
            .is_some_and(|s| s.kind == ScalingKind::DynamicNtk);
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
