//! Context-extension scalings: the inverse frequencies and attention factor a checkpoint's
//! `config.json` declares, computed in f64 as transformers' `modeling_rope_utils` defines them.
//!
//! With `dim = floor(head_dim * partial_rotary_factor)` and the paper's frequencies
//! `theta_i = base^(-2i / dim)` for `i < ceil(dim / 2)`:
//!
//! | scaling | inverse frequency `w_i` | attention factor |
//! |---|---|---|
//! | default | `theta_i` | 1 |
//! | linear | `theta_i / factor` | 1 |
//! | NTK-aware (static, this crate's own) | `theta'_i` with `base' = base factor^(dim / (dim - 2))` | 1 |
//! | dynamic NTK | `theta'_i` with `base' = base (factor s / L - (factor - 1))^(dim / (dim - 2))`, `s = max(seq_len, L)` | 1 |
//! | YaRN | `theta_i (1 - e_i) / factor + theta_i e_i`, `e_i = 1 - ramp_i` | `0.1 ln(factor) + 1` (or from `mscale`s) |
//! | Llama 3 | `theta_i`, `theta_i / factor` or a blend, by wavelength | 1 |
//! | LongRoPE | `theta_i / f_i`, `f` = long factors if `seq_len > L_orig` else short | `sqrt(1 + ln(factor) / ln(L_orig))` |
//!
//! (`L = max_position_embeddings`, `L_orig = original_max_position_embeddings`.) A schedule
//! enters the kernels through [`Rope::from_inv_freq`], the attention factor as the amplitude
//! of every cos and sin; [`by_length::ScaledRope`] keeps the table of each pass length where
//! the schedule follows it. [`xpos`] is the length-extrapolatable variant that scales q and k.

pub mod by_length;
mod compute;
mod error;
mod hf;
pub mod xpos;

pub use error::ConfigError;
pub use xpos::Xpos;

use crate::error::{Result, RopeError};
use crate::freqs::{check_finite, MAX_ROTARY_DIM};
use crate::layout::Layout;
use crate::rope::Rope;

/// A rotary schedule as a checkpoint declares it, read with [`RopeSpec::from_hf_config`].
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    /// Elements per head.
    pub head_dim: usize,
    /// `floor(head_dim * partial_rotary_factor)`: the frequency exponents are `2i / dim` for
    /// `i < ceil(dim / 2)`, so `2 * ceil(dim / 2)` coordinates rotate.
    pub dim: usize,
    /// Frequency base (`rope_theta`).
    pub base: f64,
    /// How the frequencies are scaled.
    pub scaling: Scaling,
}

/// The scaling schemes (transformers' `rope_type`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Scaling {
    /// The paper's frequencies.
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// Context extension factor.
        factor: f64,
    },
    /// NTK-aware (static): the base raised to `base factor^(dim / (dim - 2))`, the same at every
    /// length. This crate's own (transformers has no such `rope_type`; its dynamic form is
    /// [`Scaling::Dynamic`]).
    NtkAware {
        /// Context extension factor.
        factor: f64,
    },
    /// Dynamic NTK: the base grows with the current sequence length past `max_position_embeddings`.
    Dynamic {
        /// Context extension factor.
        factor: f64,
        /// `max_position_embeddings` of the config.
        max_position_embeddings: f64,
    },
    /// YaRN (Peng et al., 2023).
    Yarn(Yarn),
    /// Llama 3.1's wavelength-dependent interpolation.
    Llama3(Llama3),
    /// LongRoPE (Ding et al., 2024) as Phi-3 uses it.
    LongRope(LongRope),
}

impl Scaling {
    /// transformers' `rope_type` for this scheme (`ntk` for [`Scaling::NtkAware`], which has
    /// none).
    pub fn name(&self) -> &'static str {
        match self {
            Scaling::Default => "default",
            Scaling::Linear { .. } => "linear",
            Scaling::NtkAware { .. } => "ntk",
            Scaling::Dynamic { .. } => "dynamic",
            Scaling::Yarn(_) => "yarn",
            Scaling::Llama3(_) => "llama3",
            Scaling::LongRope(_) => "longrope",
        }
    }
}

/// YaRN parameters (`rope_type: "yarn"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    /// Context extension factor.
    pub factor: f64,
    /// Pre-training context length `L_orig`.
    pub original_max_position_embeddings: f64,
    /// Rotations over `L_orig` above which a frequency is kept (32 by default).
    pub beta_fast: f64,
    /// Rotations over `L_orig` below which a frequency is fully interpolated (1 by default).
    pub beta_slow: f64,
    /// Whether the ramp bounds are rounded outwards to integers (true by default).
    pub truncate: bool,
    /// An explicit attention factor, overriding the one derived from `factor` and the mscales.
    pub attention_factor: Option<f64>,
    /// DeepSeek's `mscale` (used with `mscale_all_dim`, when both are non-zero).
    pub mscale: Option<f64>,
    /// DeepSeek's `mscale_all_dim`.
    pub mscale_all_dim: Option<f64>,
}

/// Llama 3.1 parameters (`rope_type: "llama3"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Llama3 {
    /// Factor dividing low frequencies (8 for Llama 3.1).
    pub factor: f64,
    /// Wavelengths above `L_orig / low_freq_factor` are divided by `factor`.
    pub low_freq_factor: f64,
    /// Wavelengths below `L_orig / high_freq_factor` are kept.
    pub high_freq_factor: f64,
    /// Pre-training context length `L_orig`.
    pub original_max_position_embeddings: f64,
}

/// LongRoPE parameters (`rope_type: "longrope"`, formerly `"su"`).
#[derive(Debug, Clone, PartialEq)]
pub struct LongRope {
    /// Per-frequency divisors for sequences up to `L_orig` (`ceil(dim / 2)` values).
    pub short_factor: Vec<f64>,
    /// Per-frequency divisors for sequences longer than `L_orig`.
    pub long_factor: Vec<f64>,
    /// Context extension factor (from the config, or `L / L_orig`).
    pub factor: f64,
    /// Pre-training context length `L_orig`.
    pub original_max_position_embeddings: f64,
    /// An explicit attention factor, overriding the derived one.
    pub attention_factor: Option<f64>,
}

/// What a schedule produces: inverse frequencies (radians per position, f64) and the factor
/// multiplying every cos and sin.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledFreqs {
    /// `w_i`, `ceil(dim / 2)` values.
    pub inv_freq: Vec<f64>,
    /// Amplitude of cos and sin (1 except for YaRN and LongRoPE).
    pub attention_factor: f64,
}

impl RopeSpec {
    /// Number of inverse frequencies, `ceil(dim / 2)`.
    pub fn pairs(&self) -> usize {
        self.dim.div_ceil(2)
    }

    /// Inverse frequencies and attention factor for a sequence of `seq_len` tokens (only
    /// dynamic NTK and LongRoPE depend on it; `None` is transformers' initial state: dynamic at
    /// `max_position_embeddings`, LongRoPE's short factors).
    ///
    /// # Errors
    /// [`crate::RopeError::TooLarge`] for a `dim` above [`MAX_ROTARY_DIM`],
    /// [`crate::RopeError::NonFinite`] if the parameters produce a non-finite value (a spec
    /// read by [`RopeSpec::from_hf_config`] does neither).
    pub fn freqs(&self, seq_len: Option<usize>) -> Result<ScaledFreqs> {
        if self.dim > MAX_ROTARY_DIM {
            return Err(RopeError::TooLarge {
                what: "rotary dims",
                size: self.dim as u128,
                limit: MAX_ROTARY_DIM,
            });
        }
        let freqs = compute::freqs(self, seq_len);
        check_finite("inverse frequency", &freqs.inv_freq)?;
        check_finite("attention factor", &[freqs.attention_factor])?;
        Ok(freqs)
    }

    /// A [`Rope`] with this schedule at `seq_len`, the attention factor as its amplitude.
    ///
    /// # Errors
    /// The errors of [`RopeSpec::freqs`] and [`Rope::from_inv_freq`].
    pub fn rope(&self, layout: Layout, seq_len: Option<usize>) -> Result<Rope> {
        let f = self.freqs(seq_len)?;
        Rope::from_inv_freq(self.head_dim, layout, f.inv_freq, f.attention_factor)
    }
}
