//! The weightless RMS norm of RoFormer-V2 over the last dimension, differentiable.
//!
//! Per row of `D` elements, with `g = dL/dy`:
//!
//! ```text
//! r  = 1 / sqrt(mean(x^2) + eps),   y = x r
//! dx = r (g - y mean(g * y))
//! ```

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor, D};

use super::element::{
    dispatch, for_each_row, input, lane_sum, last_dim, upcast, Element, Kernel, Real,
};

/// Weightless RMS norm over the last dimension: `y = x / sqrt(mean(x^2) + eps)`.
///
/// Differentiable: the gradient with respect to `x` is `r (g - y mean(g * y))` with
/// `r = 1 / sqrt(mean(x^2) + eps)`. f16/bf16 are computed in f32 and rounded once. On the CPU
/// fused kernels run (rows on rayon when large; a non-contiguous `x` is copied first);
/// elsewhere [`rms_norm_slow`].
///
/// # Errors
/// A scalar `x`, or a dtype other than f32, f64, f16 and bf16.
pub fn rms_norm(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    x.dim(D::Minus1)?;
    if x.device().is_cpu() {
        x.contiguous()?.apply_op1(RmsNormOp { eps })
    } else {
        rms_norm_slow(x, eps)
    }
}

/// [`rms_norm`] composed of candle's differentiable primitives (square, mean, add, sqrt,
/// divide), computed in f32 for f16/bf16: the path off the CPU and the tests' reference.
///
/// # Errors
/// As [`rms_norm`].
pub fn rms_norm_slow(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let xf = upcast(x)?;
    let mean_square = xf.sqr()?.mean_keepdim(D::Minus1)?;
    xf.broadcast_div(&(mean_square + eps)?.sqrt()?)?
        .to_dtype(x.dtype())
}

/// The gradient of [`rms_norm`] at `x`, from the gradient `g` of the loss with respect to its
/// output: `dx = r (g - y mean(g * y))`.
pub(super) fn rms_norm_backward(x: &Tensor, g: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let (x, g) = (x.detach(), g.detach());
    if x.device().is_cpu() {
        return x
            .contiguous()?
            .apply_op2_no_bwd(&g.contiguous()?, &RmsNormBackwardOp { eps });
    }
    rms_norm_backward_primitives(&x, &g, eps)
}

/// `dx = r (g - y mean(g * y))` from candle primitives (f32 for f16/bf16): the backward off
/// the CPU.
pub(super) fn rms_norm_backward_primitives(
    x: &Tensor,
    g: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let (xf, gf) = (upcast(x)?, upcast(g)?);
    let r = (xf.sqr()?.mean_keepdim(D::Minus1)? + eps)?
        .sqrt()?
        .recip()?;
    let y = xf.broadcast_mul(&r)?;
    let mean_gy = (&gf * &y)?.mean_keepdim(D::Minus1)?;
    gf.sub(&y.broadcast_mul(&mean_gy)?)?
        .broadcast_mul(&r)?
        .to_dtype(x.dtype())
}

/// The forward custom op (CPU).
struct RmsNormOp {
    eps: f64,
}

impl CustomOp1 for RmsNormOp {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let kernel = RmsKernel {
            dim: last_dim(layout, self.name())?,
            eps: self.eps,
            backward: false,
        };
        let out = dispatch(&kernel, &[(storage, layout)])?;
        Ok((out, layout.shape().clone()))
    }

    /// `dx = r (g - y mean(g * y))`.
    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        rms_norm_backward(arg, grad_res, self.eps).map(Some)
    }
}

/// The backward custom op (CPU), on `(x, g)`.
struct RmsNormBackwardOp {
    eps: f64,
}

impl CustomOp2 for RmsNormBackwardOp {
    fn name(&self) -> &'static str {
        "rms-norm-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let kernel = RmsKernel {
            dim: last_dim(l1, self.name())?,
            eps: self.eps,
            backward: true,
        };
        let out = dispatch(&kernel, &[(s1, l1), (s2, l2)])?;
        Ok((out, l1.shape().clone()))
    }
}

/// The forward (`y` from `x`) or backward (`dx` from `(x, g)`) of each row of `dim` elements.
struct RmsKernel {
    dim: usize,
    eps: f64,
    backward: bool,
}

impl Kernel for RmsKernel {
    const NAME: &'static str = "rms-norm";

    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>> {
        let x = input(inputs, 0, Self::NAME)?;
        let g = if self.backward {
            Some(input(inputs, 1, Self::NAME)?)
        } else {
            None
        };
        let (dim, eps) = (self.dim, T::Acc::from_f64(self.eps));
        let n = T::Acc::from_f64(dim as f64);
        let mut out = vec![T::store(T::Acc::ZERO); x.len()];
        for_each_row(
            &mut out,
            dim,
            || (),
            |_, r, out| {
                let x = &x[r * dim..(r + 1) * dim];
                let mean_square = lane_sum(dim, |i| x[i].load() * x[i].load()) / n;
                let rstd = T::Acc::ONE / (mean_square + eps).sqrt();
                match g {
                    None => {
                        for (o, x) in out.iter_mut().zip(x) {
                            *o = T::store(x.load() * rstd);
                        }
                    }
                    Some(g) => {
                        let g = &g[r * dim..(r + 1) * dim];
                        let mean_gy = lane_sum(dim, |i| g[i].load() * x[i].load()) * rstd / n;
                        for ((o, x), g) in out.iter_mut().zip(x).zip(g) {
                            *o = T::store(rstd * (g.load() - x.load() * rstd * mean_gy));
                        }
                    }
                }
            },
        );
        Ok(out)
    }
}
