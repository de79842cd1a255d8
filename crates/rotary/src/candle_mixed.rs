//! Mixed-frequency N-D RoPE as differentiable candle ops (feature `candle`), so that the
//! frequencies `omega` can be trained (a candle `Var`), as RoPE-Mixed (Heo et al., 2024) does.
//!
//! ```text
//! angles[.., t, i] = sum_k positions[.., t, k] * omega[.., k, i]        (positions @ omega)
//! y[.., j] = x[.., j] cos(angles[pair(j)]) + x[.., partner(j)] sign(j) sin(angles[pair(j)])
//! ```
//!
//! for coordinates `j < 2 * pairs` of each head (the rest pass through), with `sign = -1` on the
//! first coordinate of each pair and `+1` on the second, in [`Layout::Interleaved`] or
//! [`Layout::Half`] pairs: the rotation [`NdRope`] applies with the kernels,
//! written with candle tensor ops (matmul, cos, sin, index_select, mul, add) so that candle's
//! autograd reaches `omega` (and `positions`). Angles are computed in `omega`'s dtype (use f64
//! for exact angles); cos and sin are then cast to `x`'s dtype.

use candle_core::{DType, Device, Tensor};

use crate::error::RopeError;
use crate::layout::Layout;
use crate::nd::{NdPositions, NdRope};

fn error(e: RopeError) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// Rotates `x` (`[batch, heads, seq, head_dim]`) by the angles `positions @ omega`.
///
/// - `positions`: `[seq, axes]` shared by the batch, or `[batch, seq, axes]`;
/// - `omega`: `[axes, pairs]` shared by the heads, or `[heads, axes, pairs]` per head
///   (RoPE-Mixed learns one per head); `2 * pairs <= head_dim`.
///
/// # Errors
/// A candle error wrapping [`RopeError::NdPositions`], [`RopeError::NdFrequencies`] or
/// [`RopeError::RotaryDimTooLarge`] for shapes that do not fit together, or candle's own.
pub fn mixed_rope(
    x: &Tensor,
    positions: &Tensor,
    omega: &Tensor,
    layout: Layout,
) -> candle_core::Result<Tensor> {
    let (batch, heads, seq, head_dim) = x.dims4()?;
    // [pb, 1, seq, axes] with pb in {1, batch}.
    let pos = match positions.rank() {
        2 => positions.unsqueeze(0)?.unsqueeze(0)?,
        3 => positions.unsqueeze(1)?,
        r => {
            return Err(error(RopeError::NdPositions(format!(
                "rank {r}, need 2 or 3"
            ))))
        }
    };
    // [1, oh, axes, pairs] with oh in {1, heads}.
    let om = match omega.rank() {
        2 => omega.unsqueeze(0)?.unsqueeze(0)?,
        3 => omega.unsqueeze(0)?,
        r => {
            return Err(error(RopeError::NdFrequencies(format!(
                "rank {r}, need 2 or 3"
            ))))
        }
    };
    let (pb, _, ps, axes) = pos.dims4()?;
    let (_, oh, o_axes, pairs) = om.dims4()?;
    if ps != seq || (pb != 1 && pb != batch) || axes != o_axes {
        return Err(error(RopeError::NdPositions(format!(
            "positions {:?} do not fit x {:?} and omega {:?}",
            positions.dims(),
            x.dims(),
            omega.dims()
        ))));
    }
    if oh != 1 && oh != heads {
        return Err(error(RopeError::NdFrequencies(format!(
            "omega {:?} has {oh} heads, x has {heads}",
            omega.dims()
        ))));
    }
    let rotary_dim = 2 * pairs;
    if rotary_dim == 0 || rotary_dim > head_dim {
        return Err(error(RopeError::RotaryDimTooLarge {
            rotary_dim,
            head_dim,
        }));
    }
    let device = x.device();
    let (pair_of, partner, sign) = coordinate_maps(layout, rotary_dim);
    let pair_of = Tensor::from_vec(pair_of, rotary_dim, device)?;
    let partner = Tensor::from_vec(partner, rotary_dim, device)?;
    let sign = Tensor::from_vec(sign, rotary_dim, device)?.to_dtype(omega.dtype())?;

    // [pb or 1, oh, seq, pairs] -> one angle per rotated coordinate: [.., seq, rotary_dim].
    let angles = pos.to_dtype(omega.dtype())?.broadcast_matmul(&om)?;
    let angles = angles.contiguous()?.index_select(&pair_of, 3)?;
    let cos = angles.cos()?.to_dtype(x.dtype())?;
    let sin = angles.sin()?.broadcast_mul(&sign)?.to_dtype(x.dtype())?;

    let x_rot = x.narrow(3, 0, rotary_dim)?.contiguous()?;
    let x_partner = x_rot.index_select(&partner, 3)?;
    let y = (x_rot.broadcast_mul(&cos)? + x_partner.broadcast_mul(&sin)?)?;
    if rotary_dim < head_dim {
        Tensor::cat(&[y, x.narrow(3, rotary_dim, head_dim - rotary_dim)?], 3)
    } else {
        Ok(y)
    }
}

/// For each rotated coordinate `j`: its pair, its partner coordinate, and the sign of its
/// sine term.
fn coordinate_maps(layout: Layout, rotary_dim: usize) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
    let mut pair_of = vec![0u32; rotary_dim];
    let mut partner = vec![0u32; rotary_dim];
    let mut sign = vec![0f32; rotary_dim];
    for i in 0..rotary_dim / 2 {
        let (a, b) = layout.pair(i, rotary_dim);
        pair_of[a] = i as u32;
        pair_of[b] = i as u32;
        partner[a] = b as u32;
        partner[b] = a as u32;
        sign[a] = -1.0;
        sign[b] = 1.0;
    }
    (pair_of, partner, sign)
}

/// `rope`'s frequencies as an `[axes, pairs]` tensor of `dtype`: the initial value of a
/// trainable `omega` for [`mixed_rope`] (e.g. from [`NdRope::rope_mixed_2d`]).
///
/// # Errors
/// candle's, for an unsupported dtype or device.
pub fn omega_tensor(rope: &NdRope, dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
    Tensor::from_slice(rope.omega(), (rope.pairs(), rope.axes()), device)?
        .t()?
        .contiguous()?
        .to_dtype(dtype)
}

/// `positions` as a `[rows, axes]` tensor of `dtype`, for [`mixed_rope`].
///
/// # Errors
/// candle's, for an unsupported dtype or device.
pub fn positions_tensor(
    positions: &NdPositions,
    dtype: DType,
    device: &Device,
) -> candle_core::Result<Tensor> {
    Tensor::from_slice(
        positions.as_slice(),
        (positions.rows(), positions.axes()),
        device,
    )?
    .to_dtype(dtype)
}
