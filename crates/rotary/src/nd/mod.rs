//! Rotary embeddings over N-D positions (images, video, multimodal sequences).
//!
//! A position is a vector `p` in `R^k` and pair `i` rotates by
//!
//! ```text
//! angle_i(p) = sum_k p_k * omega[i][k]
//! ```
//!
//! i.e. `R_p = exp(sum_k p_k B_k)` with commuting block-diagonal skew-symmetric generators
//! `B_k` (one 2x2 block per pair, angle rate `omega[i][k]`). Hence `R_p^T R_q = R_{q-p}`
//! (relativity), and `p` can be read back from `R_p` when `omega` has rank `k` and the angles
//! do not wrap (invertibility). Every variant here only fills `omega`:
//! - axial ([`NdRope::axial`], [`NdRope::axial_2d`]): consecutive runs of pairs, one run per
//!   axis, each with a 1D schedule over its own dims: seed 003's 2D RoPE for two equal halves;
//! - M-RoPE ([`NdRope::mrope`]): Qwen2-VL's sections of the frequency index;
//! - mixed ([`NdRope::new`], [`NdRope::rope_mixed_2d`]): any `omega`, as RoPE-Mixed learns.
//!
//! Angles are computed in f64 and become a [`CosSin`] table, so the rotation runs through the
//! same kernels as 1D RoPE.

mod positions;

pub use positions::NdPositions;

use std::f64::consts::{FRAC_PI_2, PI};

use crate::apply::{check_qk, rotate, rotate_inplace, rotate_qk_inplace, Direction, Shape};
use crate::element::Element;
use crate::error::{checked_product, try_with_capacity, Result, RopeError};
use crate::freqs::{check_finite, check_rotary_dim, inv_freqs, MAX_ROTARY_DIM};
use crate::layout::Layout;
use crate::table::CosSin;

/// The most entries (`pairs x axes`) a frequency matrix `omega` may have: 2^20 (8 MiB of f64),
/// e.g. the widest rotation ([`MAX_ROTARY_DIM`] dims, 32768 pairs) over 32 axes. Larger
/// requests are refused with [`RopeError::TooLarge`] before anything is allocated.
pub const MAX_OMEGA_ENTRIES: usize = 1 << 20;

/// `dims` rotated dims (computed exactly, as a sum of sections may overflow `usize`) when at
/// most [`MAX_ROTARY_DIM`].
fn capped_rotary_dim(dims: u128) -> Result<usize> {
    usize::try_from(dims)
        .ok()
        .filter(|&d| d <= MAX_ROTARY_DIM)
        .ok_or(RopeError::TooLarge {
            what: "rotary dims",
            size: dims,
            limit: MAX_ROTARY_DIM,
        })
}

/// The 1D frequency schedule of one axis of an axial embedding over `d` rotated dims
/// (`d / 2` pairs, index `j`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AxisSchedule {
    /// `theta_j = base^(-2j / d)`: the paper's schedule, for integer positions (token index,
    /// patch row or column).
    Lang {
        /// Frequency base (10 000 in the paper).
        base: f64,
    },
    /// `theta_j = pi * (1 + j (max_freq / 2 - 1) / (d / 2 - 1))`: `d / 2` frequencies spaced
    /// linearly from `pi` to `pi * max_freq / 2` (just `pi` for one pair), for coordinates in
    /// `[-1, 1]` (see [`NdPositions::pixel_grid`]); rotary-embedding-torch's `freqs_for='pixel'`.
    Pixel {
        /// The highest frequency, in cycles over the `[-1, 1]` range.
        max_freq: f64,
    },
}

impl AxisSchedule {
    /// The `dims / 2` inverse frequencies of this schedule over `dims` rotated dims.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] for zero or odd `dims`, [`RopeError::InvalidBase`] for a
    /// bad base, [`RopeError::NonFinite`] for a non-finite `max_freq`.
    pub fn inv_freqs(&self, dims: usize) -> Result<Vec<f64>> {
        match *self {
            AxisSchedule::Lang { base } => inv_freqs(dims, base),
            AxisSchedule::Pixel { max_freq } => {
                check_rotary_dim(dims)?;
                check_finite("max_freq", &[max_freq])?;
                let n = dims / 2;
                let top = max_freq / 2.0;
                Ok((0..n)
                    .map(|j| {
                        let t = if n == 1 {
                            0.0
                        } else {
                            j as f64 / (n - 1) as f64
                        };
                        PI * (1.0 + t * (top - 1.0))
                    })
                    .collect())
            }
        }
    }
}

/// A rotary embedding over positions in `R^axes`: pair `i` of a head at position `p` rotates by
/// `amplitude`-scaled `angle_i(p) = sum_k p_k * omega[i][k]`, in [`Layout::Interleaved`] or
/// [`Layout::Half`] pairs, over the first `rotary_dim = 2 * pairs` of `head_dim` coordinates.
///
/// One `omega` serves every head (per-head frequencies, as RoPE-Mixed trains them, are the
/// `candle` feature's `candle_mixed` module).
#[derive(Debug, Clone, PartialEq)]
pub struct NdRope {
    head_dim: usize,
    layout: Layout,
    axes: usize,
    /// `omega[i * axes + k]`: angle per unit of axis `k` for pair `i`.
    omega: Vec<f64>,
    amplitude: f64,
}

impl NdRope {
    /// The general (mixed-frequency) form: `omega` holds `pairs * axes` values, row-major by
    /// pair (`omega[i * axes + k]` for pair `i`, axis `k`), so `rotary_dim = 2 * pairs`.
    ///
    /// # Errors
    /// [`RopeError::NdFrequencies`] for zero axes or a length that is not a non-zero multiple of
    /// `axes`, [`RopeError::TooLarge`] for more than [`MAX_ROTARY_DIM`] rotated dims or
    /// [`MAX_OMEGA_ENTRIES`] values, [`RopeError::RotaryDimTooLarge`], [`RopeError::NonFinite`].
    pub fn new(head_dim: usize, layout: Layout, axes: usize, omega: Vec<f64>) -> Result<NdRope> {
        if axes == 0 || omega.is_empty() || !omega.len().is_multiple_of(axes) {
            return Err(RopeError::NdFrequencies(format!(
                "{} omega values do not make a non-empty pairs x {axes} axes matrix",
                omega.len()
            )));
        }
        if omega.len() > MAX_OMEGA_ENTRIES {
            return Err(RopeError::TooLarge {
                what: "omega entries",
                size: omega.len() as u128,
                limit: MAX_OMEGA_ENTRIES,
            });
        }
        let rotary_dim = capped_rotary_dim(2 * (omega.len() / axes) as u128)?;
        if rotary_dim > head_dim {
            return Err(RopeError::RotaryDimTooLarge {
                rotary_dim,
                head_dim,
            });
        }
        check_finite("omega", &omega)?;
        Ok(NdRope {
            head_dim,
            layout,
            axes,
            omega,
            amplitude: 1.0,
        })
    }

    /// Axial embedding: axis `k` owns the next `dims_per_axis[k] / 2` pairs and rotates them by
    /// `p_k * theta_j` with `schedule` over its own `dims_per_axis[k]` dims; the other axes do
    /// not move them. `rotary_dim = sum(dims_per_axis)`. With one axis this is 1D RoPE.
    ///
    /// # Errors
    /// [`RopeError::NdFrequencies`] for no axes, [`RopeError::InvalidRotaryDim`] for an odd or
    /// zero section, [`RopeError::TooLarge`] for more than [`MAX_ROTARY_DIM`] dims in all or an
    /// `omega` of more than [`MAX_OMEGA_ENTRIES`], and the errors of
    /// [`AxisSchedule::inv_freqs`] and [`NdRope::new`].
    pub fn axial(
        head_dim: usize,
        layout: Layout,
        dims_per_axis: &[usize],
        schedule: AxisSchedule,
    ) -> Result<NdRope> {
        let axes = dims_per_axis.len();
        if axes == 0 {
            return Err(RopeError::NdFrequencies(
                "an axial embedding needs an axis".into(),
            ));
        }
        // Sizes first: the sum of the sections, then the matrix, before anything is allocated.
        let rotary_dim = capped_rotary_dim(dims_per_axis.iter().map(|&d| d as u128).sum::<u128>())?;
        let entries = checked_product("omega entries", rotary_dim / 2, axes, MAX_OMEGA_ENTRIES)?;
        let mut omega = try_with_capacity("omega", entries)?;
        for (k, &dims) in dims_per_axis.iter().enumerate() {
            for theta in schedule.inv_freqs(dims)? {
                let mut row = vec![0.0; axes];
                row[k] = theta;
                omega.extend(row);
            }
        }
        NdRope::new(head_dim, layout, axes, omega)
    }

    /// Seed 003's 2D RoPE: the first `rotary_dim / 2` rotated dims (the first half of the pairs)
    /// rotate by `x` and the second half by `y`, each with the paper's schedule
    /// `base^(-2j / (rotary_dim / 2))` over its half:
    /// `R_{x,y} = diag(R_x, R_y)`.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] unless `rotary_dim` is a non-zero multiple of 4, and the
    /// errors of [`NdRope::axial`].
    pub fn axial_2d(
        head_dim: usize,
        rotary_dim: usize,
        base: f64,
        layout: Layout,
    ) -> Result<NdRope> {
        if !rotary_dim.is_multiple_of(4) {
            return Err(RopeError::InvalidRotaryDim(rotary_dim));
        }
        let half = rotary_dim / 2;
        NdRope::axial(head_dim, layout, &[half, half], AxisSchedule::Lang { base })
    }

    /// Multimodal RoPE as Qwen2-VL declares it: the paper's frequencies
    /// `theta_i = base^(-2i / rotary_dim)` over `rotary_dim = 2 * sum(mrope_section)`, and the
    /// frequency index split into consecutive sections, section `k` (`mrope_section[k]` pairs)
    /// rotating by axis `k` (temporal, height, width for `[16, 24, 24]`). Tokens whose axes all
    /// hold the same position (text) rotate exactly as 1D RoPE.
    ///
    /// # Errors
    /// [`RopeError::NdFrequencies`] for no sections or an empty one, [`RopeError::TooLarge`]
    /// for more than [`MAX_ROTARY_DIM`] rotated dims or an `omega` of more than
    /// [`MAX_OMEGA_ENTRIES`], and the errors of [`inv_freqs`] and [`NdRope::new`].
    pub fn mrope(
        head_dim: usize,
        layout: Layout,
        base: f64,
        mrope_section: &[usize],
    ) -> Result<NdRope> {
        let axes = mrope_section.len();
        if axes == 0 || mrope_section.contains(&0) {
            return Err(RopeError::NdFrequencies(format!(
                "mrope_section {mrope_section:?} needs non-empty sections"
            )));
        }
        let rotary_dim =
            capped_rotary_dim(2 * mrope_section.iter().map(|&n| n as u128).sum::<u128>())?;
        let pairs = rotary_dim / 2;
        let theta = inv_freqs(rotary_dim, base)?;
        let entries = checked_product("omega entries", pairs, axes, MAX_OMEGA_ENTRIES)?;
        let mut omega = vec![0.0; entries];
        let mut i = 0;
        for (k, &n) in mrope_section.iter().enumerate() {
            for _ in 0..n {
                omega[i * axes + k] = theta[i];
                i += 1;
            }
        }
        NdRope::new(head_dim, layout, axes, omega)
    }

    /// RoPE-Mixed's initialisation for 2D positions (Heo et al., 2024, "Rotary Position
    /// Embedding for Vision Transformer"): with `n = rotary_dim / 4` and magnitudes
    /// `r_t = theta^(-4t / rotary_dim)`, pair `t` gets `omega = r_t (cos a, sin a)` and pair
    /// `n + t` gets `omega = r_t (cos(a + pi/2), sin(a + pi/2))`, for a direction `a` (drawn at
    /// random per head there; `theta = 10` in that work). The result is meant to be trained.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] unless `rotary_dim` is a non-zero multiple of 4,
    /// [`RopeError::InvalidBase`] for a bad `theta`, [`RopeError::NonFinite`] for a bad `a`.
    pub fn rope_mixed_2d(
        head_dim: usize,
        rotary_dim: usize,
        layout: Layout,
        theta: f64,
        direction: f64,
    ) -> Result<NdRope> {
        if !rotary_dim.is_multiple_of(4) {
            return Err(RopeError::InvalidRotaryDim(rotary_dim));
        }
        // inv_freqs(rotary_dim / 2, theta)[t] = theta^(-2t / (rotary_dim / 2)) = r_t.
        let magnitudes = inv_freqs(rotary_dim / 2, theta)?;
        check_finite("direction", &[direction])?;
        let mut omega = Vec::with_capacity(rotary_dim);
        for a in [direction, direction + FRAC_PI_2] {
            for &r in &magnitudes {
                omega.extend([r * a.cos(), r * a.sin()]);
            }
        }
        NdRope::new(head_dim, layout, 2, omega)
    }

    /// The same rotation with every cos and sin multiplied by `amplitude` (an attention factor).
    ///
    /// # Errors
    /// [`RopeError::NonFinite`] for a non-finite amplitude.
    pub fn with_amplitude(mut self, amplitude: f64) -> Result<NdRope> {
        check_finite("amplitude", &[amplitude])?;
        self.amplitude = amplitude;
        Ok(self)
    }

    /// Elements per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Rotated coordinates per head.
    pub fn rotary_dim(&self) -> usize {
        2 * self.pairs()
    }

    /// Number of rotated pairs.
    pub fn pairs(&self) -> usize {
        self.omega.len() / self.axes
    }

    /// Number of position axes.
    pub fn axes(&self) -> usize {
        self.axes
    }

    /// Pair layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The frequencies, `pairs x axes` row-major (`omega()[i * axes + k]`).
    pub fn omega(&self) -> &[f64] {
        &self.omega
    }

    /// Amplitude multiplying cos and sin.
    pub fn amplitude(&self) -> f64 {
        self.amplitude
    }

    /// `angle_i(p) = sum_k p_k * omega[i][k]` in f64, for `position` of `axes()` coordinates
    /// (extra coordinates are ignored, missing ones count as 0) and `pair < pairs()`.
    pub fn angle(&self, position: &[f64], pair: usize) -> f64 {
        let row = pair
            .checked_mul(self.axes)
            .and_then(|start| self.omega.get(start..start.checked_add(self.axes)?))
            .unwrap_or(&[]);
        row.iter().zip(position).map(|(w, p)| w * p).sum()
    }

    /// The cos/sin rows of `positions`, one per position, for the kernels.
    ///
    /// # Errors
    /// [`RopeError::NdPositions`] if the positions have a different number of axes, and the
    /// errors of [`CosSin::from_angles`].
    pub fn table(&self, positions: &NdPositions) -> Result<CosSin> {
        if positions.axes() != self.axes {
            return Err(RopeError::NdPositions(format!(
                "{}-axis positions given to a {}-axis rotation",
                positions.axes(),
                self.axes
            )));
        }
        let coords = positions.as_slice();
        let axes = self.axes;
        CosSin::from_angles(
            self.layout,
            self.rotary_dim(),
            positions.rows(),
            self.amplitude,
            |row, pair| self.angle(&coords[row * axes..(row + 1) * axes], pair),
        )
    }

    /// Rotates `x` (of `shape`) in place; `positions` holds `seq` rows shared by the batch or
    /// `batch * seq` rows.
    ///
    /// # Errors
    /// [`RopeError::HeadDimMismatch`], and the errors of [`NdRope::table`] and
    /// [`rotate_inplace`].
    pub fn apply_inplace<T: Element>(
        &self,
        x: &mut [T],
        shape: Shape,
        positions: &NdPositions,
        direction: Direction,
    ) -> Result<()> {
        shape.check_head_dim("x", self.head_dim)?;
        rotate_inplace(x, shape, self.table(positions)?.view(), direction)
    }

    /// Rotates `src` into `dst` (both of `shape`).
    ///
    /// # Errors
    /// As [`NdRope::apply_inplace`] and [`rotate`].
    pub fn apply<T: Element>(
        &self,
        src: &[T],
        dst: &mut [T],
        shape: Shape,
        positions: &NdPositions,
        direction: Direction,
    ) -> Result<()> {
        shape.check_head_dim("src", self.head_dim)?;
        rotate(src, dst, shape, self.table(positions)?.view(), direction)
    }

    /// Rotates q and k in place in one fused call (head counts may differ).
    ///
    /// # Errors
    /// As [`NdRope::apply_inplace`] and [`rotate_qk_inplace`].
    pub fn apply_qk_inplace<T: Element>(
        &self,
        q: &mut [T],
        q_shape: Shape,
        k: &mut [T],
        k_shape: Shape,
        positions: &NdPositions,
        direction: Direction,
    ) -> Result<()> {
        check_qk(&q_shape, &k_shape)?;
        q_shape.check_head_dim("q", self.head_dim)?;
        let table = self.table(positions)?;
        rotate_qk_inplace(q, q_shape, k, k_shape, table.view(), direction)
    }
}
