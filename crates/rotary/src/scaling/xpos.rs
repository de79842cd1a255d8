//! xPos (Sun et al., 2022, "A Length-Extrapolatable Transformer"): RoPE with an exponential
//! decay per pair, applied as magnitudes of the cos/sin tables.
//!
//! With `zeta_i = (2i / r + gamma) / (1 + gamma)` (`gamma = 0.4`), a query at position `m` is
//! rotated and scaled by `zeta_i^((m - c) / B)` and a key at `n` by `zeta_i^(-(n - c) / B)`,
//! `B` the scale base and `c` a centre that keeps the powers small. Pair `i` of a score then
//! carries `zeta_i^((m - n) / B)`: it depends on positions only through `n - m`, and decays with
//! distance for `m > n` (causal attention). rotary-embedding-torch (`use_xpos=True`) uses
//! `B = 512` and `c = floor(seq / 2)`, interleaved pairs.

use crate::apply::{check_qk, rotate_inplace, Direction, Shape};
use crate::element::Element;
use crate::error::{Result, RopeError};
use crate::freqs::{check_finite, check_rotary_dim, inv_freqs};
use crate::layout::Layout;
use crate::positions::Positions;
use crate::table::CosSin;

/// xPos over 1D positions: the paper's frequencies `theta_i = base^(-2i / r)` on the first
/// `r = rotary_dim` of `head_dim` coordinates, q and k scaled per pair as the module describes.
#[derive(Debug, Clone, PartialEq)]
pub struct Xpos {
    head_dim: usize,
    layout: Layout,
    inv_freq: Vec<f64>,
    scale_base: f64,
    gamma: f64,
}

impl Xpos {
    /// xPos's `gamma`.
    pub const GAMMA: f64 = 0.4;

    /// xPos with frequency base `base` and scale base `scale_base` (`B`, 512 in
    /// rotary-embedding-torch).
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`], [`RopeError::RotaryDimTooLarge`],
    /// [`RopeError::InvalidBase`] for a bad `base` or a `scale_base` that is not finite and > 0.
    pub fn new(
        head_dim: usize,
        rotary_dim: usize,
        base: f64,
        layout: Layout,
        scale_base: f64,
    ) -> Result<Xpos> {
        check_rotary_dim(rotary_dim)?;
        if rotary_dim > head_dim {
            return Err(RopeError::RotaryDimTooLarge {
                rotary_dim,
                head_dim,
            });
        }
        if !(scale_base.is_finite() && scale_base > 0.0) {
            return Err(RopeError::InvalidBase(scale_base));
        }
        Ok(Xpos {
            head_dim,
            layout,
            inv_freq: inv_freqs(rotary_dim, base)?,
            scale_base,
            gamma: Xpos::GAMMA,
        })
    }

    /// The centre rotary-embedding-torch uses for a call of `seq` tokens: `floor(seq / 2)`.
    pub fn default_center(seq: usize) -> f64 {
        (seq / 2) as f64
    }

    /// Rotated coordinates per head.
    pub fn rotary_dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `zeta_i = (2i / r + gamma) / (1 + gamma)`, one per pair.
    pub fn zeta(&self) -> Vec<f64> {
        let r = self.rotary_dim() as f64;
        (0..self.inv_freq.len())
            .map(|i| ((2 * i) as f64 / r + self.gamma) / (1.0 + self.gamma))
            .collect()
    }

    /// The q and k tables for `positions` of a `batch x seq` call around centre `center`:
    /// q rows `(zeta_i^((m - c) / B), m theta_i)`, k rows `(zeta_i^(-(m - c) / B), m theta_i)`
    /// as (magnitude, angle).
    ///
    /// # Errors
    /// The errors of [`Positions::rows`], [`RopeError::NonFinite`] for a non-finite centre or a
    /// magnitude that overflows.
    pub fn tables(
        &self,
        positions: Positions<'_>,
        batch: usize,
        seq: usize,
        center: f64,
    ) -> Result<(CosSin, CosSin)> {
        check_finite("xpos center", &[center])?;
        let rows = positions.rows(batch, seq)?;
        let zeta = self.zeta();
        let table = |sign: f64| {
            CosSin::from_polar(self.layout, self.rotary_dim(), rows, |row, i| {
                let m = positions.get(row);
                let power = sign * (m - center) / self.scale_base;
                (zeta[i].powf(power), m * self.inv_freq[i])
            })
        };
        Ok((table(1.0)?, table(-1.0)?))
    }

    /// Rotates and scales q and k in place (`Direction::Forward` only: the scaled map is not
    /// orthogonal, so there is no transpose to undo it). Head counts may differ.
    ///
    /// # Errors
    /// [`RopeError::QkMismatch`], [`RopeError::HeadDimMismatch`], and the errors of
    /// [`Xpos::tables`] and [`rotate_inplace`].
    pub fn apply_qk_inplace<T: Element>(
        &self,
        q: &mut [T],
        q_shape: Shape,
        k: &mut [T],
        k_shape: Shape,
        positions: Positions<'_>,
        center: f64,
    ) -> Result<()> {
        check_qk(&q_shape, &k_shape)?;
        q_shape.check_head_dim("q", self.head_dim)?;
        // Lengths before tables: a shape far larger than its slice must fail here, not after
        // building tables for all its positions.
        q_shape.check_len("q", q.len())?;
        k_shape.check_len("k", k.len())?;
        let (q_table, k_table) = self.tables(positions, q_shape.batch, q_shape.seq, center)?;
        rotate_inplace(q, q_shape, q_table.view(), Direction::Forward)?;
        rotate_inplace(k, k_shape, k_table.view(), Direction::Forward)
    }
}
