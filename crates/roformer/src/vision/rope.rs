//! The rotation of q and k, made once per pass and shared by every layer.
//!
//! Pair `i` of a head (coordinates `i` and `i + d/2`, transformers' `rotate_half` layout,
//! [`Layout::Half`]) of a token at position `p` turns by
//!
//! ```text
//! angle_i(p) = sum_k p_k omega[i][k]          (positions from `positions`, prefix rows p = 0)
//! ```
//!
//! - fixed frequencies (`rope_axial`, `rope_flat`): `omega` is a [`NdRope`]'s; the fast path
//!   hands a per-token cos/sin table (rows of the prefix tokens the identity) to the fused
//!   attention, which rotates q and k in its own pass; the reference computes the same angles
//!   with candle ops ([`rotary::candle_mixed::mixed_rope`] with `omega` a constant);
//! - learned frequencies (`rope_mixed`): each layer's `omega` `[heads, 2, d/2]` is a tensor of
//!   the graph (a `Var` in training), so q and k turn through `mixed_rope` on either path and
//!   the gradient reaches `omega`.
//!
//! DINOv3 (`rope_axial` over normalised coordinates) is exactly this with
//! `omega[i] = (theta^(-4i/d), 0)` for `i < d/4` and `(0, theta^(-4(i - d/4)/d))` after, and
//! `p = 2 pi c` for patch centres `c` in `[-1, 1]` (y first): transformers' `inv_freq = 1 /
//! theta^(arange(0, 1, 4/d))`, angles `2 pi c inv_freq`, y then x, tiled twice.

use std::f64::consts::TAU;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use rotary::candle_mixed::{mixed_rope, omega_tensor, positions_tensor};
use rotary::{AxisSchedule, Coefficients, Layout, NdRope};

use crate::vision::config::{PositionKind, VisionConfig};
use crate::vision::error::Result;
use crate::vision::positions::{flat_positions, grid_positions, PatchGrid, Placement};

/// The pair layout of every vision rotation: `(j, j + d/2)`, as DINOv3's `rotate_half`.
pub const LAYOUT: Layout = Layout::Half;

/// A model's rotation, fixed when it is built.
#[derive(Debug, Clone)]
pub(crate) enum Rotation {
    /// No rotation (`absolute`, `none`).
    None,
    /// Fixed frequencies (`rope_axial`: two axes; `rope_flat`: one).
    Fixed(NdRope),
    /// Learned frequencies, held by each layer's attention.
    Mixed,
}

/// The rotation of one pass, shared by every layer.
#[derive(Debug, Clone)]
pub(crate) enum PassRotation {
    /// No rotation.
    None,
    /// Fixed frequencies: the per-token table of the fused attention, and the reference's
    /// positions `[t, axes]` and frequencies `[axes, pairs]` (model dtype).
    Fixed {
        /// One row per token, the prefix rows the identity.
        table: Coefficients,
        /// Positions, `[t, axes]`.
        positions: Tensor,
        /// Frequencies, `[axes, pairs]`.
        omega: Tensor,
    },
    /// Learned frequencies (per layer): the positions `[t, 2]` (model dtype).
    Mixed {
        /// Positions, `[t, 2]`.
        positions: Tensor,
    },
}

impl Rotation {
    /// The rotation `cfg` asks for: axial `omega` of schedule `theta^(-4i/d)` per axis over two
    /// halves of the pairs, flat `theta^(-2i/d)` over one axis.
    ///
    /// # Errors
    /// [`crate::vision::VisionError::Rope`] for frequencies [`NdRope`] refuses (a validated
    /// config has none).
    pub(crate) fn of_config(cfg: &VisionConfig) -> Result<Rotation> {
        let d = cfg.head_dim();
        let schedule = AxisSchedule::Lang {
            base: cfg.rope_theta,
        };
        Ok(match cfg.position {
            PositionKind::RopeAxial => {
                Rotation::Fixed(NdRope::axial(d, LAYOUT, &[d / 2, d / 2], schedule)?)
            }
            PositionKind::RopeFlat => Rotation::Fixed(NdRope::axial(d, LAYOUT, &[d], schedule)?),
            PositionKind::RopeMixed => Rotation::Mixed,
            PositionKind::Absolute | PositionKind::None => Rotation::None,
        })
    }

    /// The rotation of a pass over `grid` (after `cfg.prefix_tokens()` unrotated tokens), with
    /// tensors in `dtype` on `device`.
    ///
    /// # Errors
    /// Rotary errors for tables memory cannot hold; candle errors.
    pub(crate) fn for_pass(
        &self,
        cfg: &VisionConfig,
        grid: PatchGrid,
        dtype: DType,
        device: &Device,
    ) -> Result<PassRotation> {
        let prefix = cfg.prefix_tokens();
        let placement = Placement {
            coordinates: cfg.coordinates,
            config_grid: cfg.config_grid(),
        };
        Ok(match self {
            Rotation::None => PassRotation::None,
            Rotation::Fixed(rope) => {
                let positions = match rope.axes() {
                    1 => flat_positions(grid, prefix, placement)?,
                    _ => grid_positions(grid, prefix, placement)?,
                };
                let table = Arc::new(rope.table(&positions)?);
                PassRotation::Fixed {
                    table: Coefficients::Cached {
                        rows: table.rows(),
                        table,
                        start: 0,
                    },
                    positions: positions_tensor(&positions, dtype, device)?,
                    omega: omega_tensor(rope, dtype, device)?,
                }
            }
            Rotation::Mixed => PassRotation::Mixed {
                positions: positions_tensor(
                    &grid_positions(grid, prefix, placement)?,
                    dtype,
                    device,
                )?,
            },
        })
    }
}

/// The fixed rotation of `cfg` as an [`NdRope`] over the head, the one its model turns q and
/// k by (`rope_axial`: two axes, `theta^(-4i/d)` on each half of the pairs; `rope_flat`: one
/// axis, `theta^(-2i/d)`); `None` for the kinds without fixed frequencies (`rope_mixed` learns
/// them, `absolute` and `none` have none).
///
/// # Errors
/// [`crate::vision::VisionError::Rope`] for frequencies [`NdRope`] refuses (a validated config
/// has none).
pub fn fixed_rope(cfg: &VisionConfig) -> Result<Option<NdRope>> {
    Ok(match Rotation::of_config(cfg)? {
        Rotation::Fixed(rope) => Some(rope),
        Rotation::None | Rotation::Mixed => None,
    })
}

/// Turns head-major `x` (`[b, heads, t, d]`) by `positions @ omega` with candle ops (any
/// device and dtype, differentiable in `x` and `omega`): `omega` `[axes, pairs]` shared by the
/// heads or `[heads, axes, pairs]`.
///
/// # Errors
/// Shapes that do not fit; candle errors.
pub(crate) fn rotate_heads(
    x: &Tensor,
    positions: &Tensor,
    omega: &Tensor,
) -> candle_core::Result<Tensor> {
    mixed_rope(x, positions, omega, LAYOUT)
}

/// The direction of RoPE-Mixed's initial frequencies for head `head` of layer `layer` of a
/// model of `heads` heads: `2 pi frac(n phi)` for `n = layer * heads + head` and the golden
/// ratio `phi`, a sequence spread evenly over the circle (Heo et al. draw it at random; a
/// formula keeps a fresh model the same from run to run).
pub fn mixed_direction(layer: usize, head: usize, heads: usize) -> f64 {
    const PHI: f64 = 1.618_033_988_749_895;
    let n = (layer * heads + head) as f64;
    TAU * (n * PHI).fract()
}

/// RoPE-Mixed's initial frequencies of layer `layer`, `[heads, 2, d/2]` (head, axis, pair):
/// per head, [`NdRope::rope_mixed_2d`] with `theta` and [`mixed_direction`].
///
/// # Errors
/// Rotary errors for a head dim that does not divide by 4 or a bad `theta` (a validated config
/// has neither); candle errors.
pub fn mixed_frequencies(
    cfg: &VisionConfig,
    layer: usize,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let (heads, d) = (cfg.num_attention_heads, cfg.head_dim());
    let per_head = (0..heads)
        .map(|h| {
            let a = mixed_direction(layer, h, heads);
            let rope = NdRope::rope_mixed_2d(d, d, LAYOUT, cfg.rope_theta, a)?;
            Ok(omega_tensor(&rope, dtype, device)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Tensor::stack(&per_head, 0)?)
}
