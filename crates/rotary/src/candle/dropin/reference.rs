//! The drop-in's rotation from plain candle ops (narrow, multiply, subtract, add, concatenate),
//! so that candle's autograd differentiates it on any device: the path for devices other than
//! the CPU (and f64) when a gradient may be needed, where candle-nn's fast op has no backward.
//!
//! The same arithmetic as candle-nn's op, element by element in the tensors' dtype:
//! `y_a = x_a c - x_b s`, `y_b = x_a s + x_b c`.

use candle_core::Tensor;

use super::Convention;
use crate::apply::Order;
use crate::layout::Layout;

/// `y = R x` for contiguous `xs` and `cos`/`sin` exactly `[t, d/2]` or `[b, t, d/2]` (checked by
/// the caller).
pub(super) fn rotate(
    xs: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    convention: Convention,
) -> candle_core::Result<Tensor> {
    let (a, b, c, d) = xs.dims4()?;
    let pairs = d / 2;
    // cos/sin broadcast against the pairs of `xs`: [pb, 1, t, d/2] head-major,
    // [pb, t, 1, d/2] token-major, pb = 1 or b.
    let heads_axis = match convention.order() {
        Order::HeadMajor => 1,
        Order::TokenMajor => 2,
    };
    let spread = |cs: &Tensor| -> candle_core::Result<Tensor> {
        let cs = if cs.rank() == 2 {
            cs.unsqueeze(0)?
        } else {
            cs.clone()
        };
        cs.unsqueeze(heads_axis)
    };
    let (cos, sin) = (spread(cos)?, spread(sin)?);
    let turn = |xa: &Tensor, xb: &Tensor, cos: &Tensor, sin: &Tensor| {
        let ya = (xa.broadcast_mul(cos)? - xb.broadcast_mul(sin)?)?;
        let yb = (xa.broadcast_mul(sin)? + xb.broadcast_mul(cos)?)?;
        candle_core::Result::Ok((ya, yb))
    };
    match convention.layout() {
        Layout::Half => {
            let (xa, xb) = (xs.narrow(3, 0, pairs)?, xs.narrow(3, pairs, pairs)?);
            let (ya, yb) = turn(&xa, &xb, &cos, &sin)?;
            Tensor::cat(&[ya, yb], 3)
        }
        Layout::Interleaved => {
            let x = xs.reshape((a, b, c, pairs, 2))?;
            let (xa, xb) = (x.narrow(4, 0, 1)?, x.narrow(4, 1, 1)?);
            let (cos, sin) = (cos.unsqueeze(4)?, sin.unsqueeze(4)?);
            let (ya, yb) = turn(&xa, &xb, &cos, &sin)?;
            Tensor::cat(&[ya, yb], 4)?.reshape((a, b, c, d))
        }
    }
}
