//! The CPU op: `y = R x` with candle-nn's per-pair `cos`/`sin` on this crate's kernels, and its
//! backward.
//!
//! The forward widens `cos`/`sin` into a [`CosSin`] table
//! ([`CosSin::from_pair_tables`], one pass over `t * d/2` values, or `b * t * d/2` per
//! sequence) and rotates `xs` with [`rotate_uninit`] straight into the output's fresh
//! capacity (candle-nn zero-fills its output first). For pair `(a, b)` of token `m`, with
//! `c = cos[m, i]`, `s = sin[m, i]`, the rotation and its derivatives are
//!
//! ```text
//! forward:  y_a = x_a c - x_b s,   y_b = x_b c + x_a s
//! dL/dx   = R^T dy:   dx_a = dy_a c + dy_b s,   dx_b = dy_b c - dy_a s   (the inverse rotation)
//! dL/dc   = sum over heads (and the batch, for 2D cos) of  x_a dy_a + x_b dy_b
//! dL/ds   = sum over heads (and the batch, for 2D sin) of  x_a dy_b - x_b dy_a
//! ```
//!
//! (for the inverse rotation, which is the backward of the forward, `dL/ds` changes sign). The
//! gradient with respect to `xs` runs on the kernels (the op with the other direction); those
//! with respect to `cos` and `sin`, rarely wanted, are candle ops in f32, computed only when
//! `cos` or `sin` is tracked.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape as CandleShape, Tensor};

use super::Convention;
use crate::apply::{Direction, Order, Shape};
use crate::candle::{contiguous, rotated};
use crate::element::Element;
use crate::layout::Layout as PairLayout;
use crate::table::CosSin;

/// `y = R x` (or `R^T x`) for one of candle-nn's conventions, on contiguous CPU tensors of one
/// dtype among f32, f16 and bf16, `cos`/`sin` exactly `[t, d/2]` or `[b, t, d/2]`.
pub(super) struct DropInOp {
    convention: Convention,
    direction: Direction,
}

impl DropInOp {
    pub(super) fn new(convention: Convention, direction: Direction) -> DropInOp {
        DropInOp {
            convention,
            direction,
        }
    }

    /// The op of the transposed rotation.
    fn transposed(&self) -> DropInOp {
        let direction = match self.direction {
            Direction::Forward => Direction::Inverse,
            Direction::Inverse => Direction::Forward,
        };
        DropInOp::new(self.convention, direction)
    }

    fn run<T: Element>(
        &self,
        (xs, l_xs): (&[T], &Layout),
        (cos, l_cos): (&[T], &Layout),
        (sin, l_sin): (&[T], &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let xs = contiguous(xs, l_xs, "rotary::candle rope: xs")?;
        let (cos, sin) = (
            contiguous(cos, l_cos, "rotary::candle rope: cos")?,
            contiguous(sin, l_sin, "rotary::candle rope: sin")?,
        );
        let (a, b, c, d) = l_xs.shape().dims4()?;
        let shape = match self.convention.order() {
            Order::HeadMajor => Shape::head_major(a, b, c, d),
            Order::TokenMajor => Shape::token_major(a, b, c, d),
        };
        let n = xs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let table = CosSin::from_pair_tables(self.convention.layout(), d, cos, sin)
            .map_err(candle_core::Error::wrap)?;
        rotated(xs, shape, table.view(), self.direction)
    }
}

impl CustomOp3 for DropInOp {
    fn name(&self) -> &'static str {
        self.convention.name()
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, CandleShape)> {
        use CpuStorage::{BF16, F16, F32};
        let out = match (s1, s2, s3) {
            (F32(x), F32(c), F32(s)) => F32(self.run((x, l1), (c, l2), (s, l3))?),
            (F16(x), F16(c), F16(s)) => F16(self.run((x, l1), (c, l2), (s, l3))?),
            (BF16(x), BF16(c), BF16(s)) => BF16(self.run((x, l1), (c, l2), (s, l3))?),
            _ => candle_core::bail!(
                "{}: unsupported dtypes {:?}, {:?}, {:?} (f32, f16 or bf16, one for all)",
                self.name(),
                s1.dtype(),
                s2.dtype(),
                s3.dtype()
            ),
        };
        Ok((out, l1.shape().clone()))
    }

    fn bwd(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dx = if xs.track_op() {
            Some(grad.contiguous()?.apply_op3(cos, sin, self.transposed())?)
        } else {
            None
        };
        let (dcos, dsin) = if cos.track_op() || sin.track_op() {
            let (dc, ds) = self.coefficient_grads(xs, grad, cos.rank())?;
            let dtype = cos.dtype();
            (Some(dc.to_dtype(dtype)?), Some(ds.to_dtype(dtype)?))
        } else {
            (None, None)
        };
        Ok((dx, dcos, dsin))
    }
}

impl DropInOp {
    /// `dL/dcos` and `dL/dsin` (module docs) in f32, `[t, d/2]` for `cos_rank` 2 and
    /// `[b, t, d/2]` for 3.
    fn coefficient_grads(
        &self,
        xs: &Tensor,
        grad: &Tensor,
        cos_rank: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let layout = self.convention.layout();
        let (xa, xb) = split_pairs(xs, layout)?;
        let (ga, gb) = split_pairs(grad, layout)?;
        let dc = ((&xa * &ga)? + (&xb * &gb)?)?;
        let ds = ((&xa * &gb)? - (&xb * &ga)?)?;
        let ds = match self.direction {
            Direction::Forward => ds,
            Direction::Inverse => ds.neg()?,
        };
        let heads_axis = match self.convention.order() {
            Order::HeadMajor => 1,
            Order::TokenMajor => 2,
        };
        // [b, t, d/2] after summing the heads; the batch too for a table shared by it.
        let reduce = |g: Tensor| -> candle_core::Result<Tensor> {
            let g = g.sum(heads_axis)?;
            if cos_rank == 2 {
                g.sum(0)
            } else {
                Ok(g)
            }
        };
        Ok((reduce(dc)?, reduce(ds)?))
    }
}

/// The first and second coordinates of every pair of a 4D tensor, in f32: `[.., d/2]` each.
fn split_pairs(x: &Tensor, layout: PairLayout) -> candle_core::Result<(Tensor, Tensor)> {
    let x = x.to_dtype(DType::F32)?.contiguous()?;
    let (a, b, c, d) = x.dims4()?;
    let pairs = d / 2;
    match layout {
        PairLayout::Half => Ok((x.narrow(3, 0, pairs)?, x.narrow(3, pairs, pairs)?)),
        PairLayout::Interleaved => {
            let x = x.reshape((a, b, c, pairs, 2))?;
            Ok((
                x.narrow(4, 0, 1)?.squeeze(4)?,
                x.narrow(4, 1, 1)?.squeeze(4)?,
            ))
        }
    }
}
