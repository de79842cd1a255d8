//! Softmax over the last dimension, differentiable.
//!
//! ```text
//! y_i  = exp(x_i - m) / sum_k exp(x_k - m),   m = max_k x_k
//! dx_i = y_i (g_i - sum_k g_k y_k)            (g = dL/dy)
//! ```

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor, D};

use super::element::{
    dispatch, for_each_row, input, lane_max, lane_sum, last_dim, upcast, Element, Kernel, Real,
};

/// Softmax over the last dimension: `y_i = exp(x_i - m) / sum_k exp(x_k - m)` with
/// `m = max_k x_k` (subtracting the row maximum keeps `exp` from overflowing).
///
/// Differentiable: the gradient with respect to `x` is `y * (g - sum_lastdim(g * y))`.
/// f16/bf16 rows are computed in f32 and rounded once. On the CPU a fused kernel runs (rows on
/// rayon when the tensor is large; a non-contiguous `x` is copied first); elsewhere
/// [`softmax_last_dim_slow`].
///
/// # Errors
/// A scalar `x`, or a dtype other than f32, f64, f16 and bf16.
pub fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    x.dim(D::Minus1)?;
    if x.device().is_cpu() {
        x.contiguous()?.apply_op1(SoftmaxOp)
    } else {
        softmax_last_dim_slow(x)
    }
}

/// [`softmax_last_dim`] composed of candle's differentiable primitives (max, subtract, exp,
/// sum, divide), computed in f32 for f16/bf16: the path off the CPU and the tests' reference.
///
/// # Errors
/// As [`softmax_last_dim`].
pub fn softmax_last_dim_slow(x: &Tensor) -> candle_core::Result<Tensor> {
    let xf = upcast(x)?;
    // The maximum only shifts the exponent; its gradient contribution is zero, so it is
    // detached rather than differentiated through a max reduction.
    let max = xf.max_keepdim(D::Minus1)?.detach();
    let e = xf.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)?.to_dtype(x.dtype())
}

/// The gradient of [`softmax_last_dim`] with respect to its input, from its output `y` and the
/// gradient `g` of the loss with respect to `y`: `dx = y * (g - sum_lastdim(g * y))`.
///
/// Not itself differentiable (no second derivatives).
///
/// # Errors
/// Shapes or dtypes of `y` and `g` that differ, or a dtype other than f32, f64, f16 and bf16.
pub fn softmax_last_dim_backward(y: &Tensor, g: &Tensor) -> candle_core::Result<Tensor> {
    if y.shape() != g.shape() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: y.shape().clone(),
            rhs: g.shape().clone(),
            op: "softmax-backward",
        });
    }
    y.dim(D::Minus1)?;
    let (y, g) = (y.detach(), g.detach());
    if y.device().is_cpu() {
        y.contiguous()?
            .apply_op2_no_bwd(&g.contiguous()?, &SoftmaxBackwardOp)
    } else {
        softmax_backward_primitives(&y, &g)
    }
}

/// `y * (g - sum_lastdim(g * y))` from candle primitives (f32 for f16/bf16): the backward
/// off the CPU.
pub(super) fn softmax_backward_primitives(y: &Tensor, g: &Tensor) -> candle_core::Result<Tensor> {
    let (yf, gf) = (upcast(y)?, upcast(g)?);
    let dot = (&gf * &yf)?.sum_keepdim(D::Minus1)?;
    (yf * gf.broadcast_sub(&dot)?)?.to_dtype(y.dtype())
}

/// The forward custom op (CPU).
struct SoftmaxOp;

impl CustomOp1 for SoftmaxOp {
    fn name(&self) -> &'static str {
        "softmax-last-dim"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let kernel = SoftmaxKernel {
            dim: last_dim(layout, self.name())?,
        };
        let out = dispatch(&kernel, &[(storage, layout)])?;
        Ok((out, layout.shape().clone()))
    }

    /// `dx = y * (g - sum_lastdim(g * y))`.
    fn bwd(
        &self,
        _arg: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        softmax_last_dim_backward(res, grad_res).map(Some)
    }
}

/// The backward custom op (CPU), on `(y, g)`.
struct SoftmaxBackwardOp;

impl CustomOp2 for SoftmaxBackwardOp {
    fn name(&self) -> &'static str {
        "softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let kernel = SoftmaxBackwardKernel {
            dim: last_dim(l1, self.name())?,
        };
        let out = dispatch(&kernel, &[(s1, l1), (s2, l2)])?;
        Ok((out, l1.shape().clone()))
    }
}

/// Softmax of each row of `dim` elements.
struct SoftmaxKernel {
    dim: usize,
}

impl Kernel for SoftmaxKernel {
    const NAME: &'static str = "softmax-last-dim";

    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>> {
        let x = input(inputs, 0, Self::NAME)?;
        let dim = self.dim;
        let mut out = vec![T::store(T::Acc::ZERO); x.len()];
        let scratch = || vec![T::Acc::ZERO; dim];
        for_each_row(&mut out, dim, scratch, |e: &mut Vec<T::Acc>, r, out| {
            let x = &x[r * dim..(r + 1) * dim];
            let max = lane_max(x);
            for (e, v) in e.iter_mut().zip(x) {
                *e = (v.load() - max).exp_nonpositive();
            }
            let inv = T::Acc::ONE / lane_sum(dim, |i| e[i]);
            for (o, e) in out.iter_mut().zip(e.iter()) {
                *o = T::store(*e * inv);
            }
        });
        Ok(out)
    }
}

/// `dx = y * (g - sum(g * y))` for each row of `dim` elements, from `(y, g)`.
struct SoftmaxBackwardKernel {
    dim: usize,
}

impl Kernel for SoftmaxBackwardKernel {
    const NAME: &'static str = "softmax-backward";

    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>> {
        let (y, g) = (input(inputs, 0, Self::NAME)?, input(inputs, 1, Self::NAME)?);
        let dim = self.dim;
        let mut out = vec![T::store(T::Acc::ZERO); y.len()];
        for_each_row(
            &mut out,
            dim,
            || (),
            |_, r, out| {
                let (y, g) = (&y[r * dim..(r + 1) * dim], &g[r * dim..(r + 1) * dim]);
                let dot = lane_sum(dim, |i| y[i].load() * g[i].load());
                for ((o, y), g) in out.iter_mut().zip(y).zip(g) {
                    let y = y.load();
                    *o = T::store(y * (g.load() - dot));
                }
            },
        );
        Ok(out)
    }
}
