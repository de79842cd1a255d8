//! Layer normalisation over the last dimension (as `torch.nn.LayerNorm`), differentiable with
//! respect to the input, the weight and the bias.
//!
//! Per row of `D` elements, with `g = dL/dy`:
//!
//! ```text
//! mu = mean(x),  var = mean((x - mu)^2),  r = 1 / sqrt(var + eps),  xh = (x - mu) r
//! y  = xh * w + b
//! dx = r (gw - mean(gw) - xh mean(gw * xh)),   gw = g * w
//! dw = sum_rows g * xh,   db = sum_rows g
//! ```

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use super::element::{
    dispatch, for_each_row, input, is_large, lane_sum, last_dim, rows_per_task, upcast, Element,
    Kernel, Real,
};

/// Layer norm over the last dimension, as `torch.nn.LayerNorm` (population variance):
/// `y = (x - mean) / sqrt(var + eps) * weight + bias`, with `weight` and `bias` of shape
/// `[D]` for `x` of shape `[..., D]`.
///
/// Differentiable with respect to `x`, `weight` and `bias` (see the module formulas); the
/// weight and bias gradients are summed over all leading dimensions. f16/bf16 are computed in
/// f32 and rounded once. On the CPU fused kernels run (rows on rayon when large; inputs that
/// are not contiguous are copied first); elsewhere [`layer_norm_slow`].
///
/// # Errors
/// `weight` or `bias` not of shape `[D]`, dtypes that differ, or a dtype other than f32, f64,
/// f16 and bf16.
pub fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    check_params(x, weight, bias)?;
    if x.device().is_cpu() {
        x.contiguous()?.apply_op3(
            &weight.contiguous()?,
            &bias.contiguous()?,
            LayerNormOp { eps },
        )
    } else {
        layer_norm_slow(x, weight, bias, eps)
    }
}

/// [`layer_norm`] composed of candle's differentiable primitives (mean, subtract, square,
/// sqrt, divide, multiply, add), computed in f32 for f16/bf16 and rounded once: the path off
/// the CPU and the tests' reference.
///
/// # Errors
/// As [`layer_norm`].
pub fn layer_norm_slow(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    check_params(x, weight, bias)?;
    let xf = upcast(x)?;
    let centred = xf.broadcast_sub(&xf.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centred.broadcast_div(&(var + eps)?.sqrt()?)?;
    normed
        .broadcast_mul(&upcast(weight)?)?
        .broadcast_add(&upcast(bias)?)?
        .to_dtype(x.dtype())
}

/// `weight` and `bias` are `[D]` for `x` of shape `[..., D]`.
fn check_params(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<()> {
    let dim = x.dim(D::Minus1)?;
    for (what, t) in [("weight", weight), ("bias", bias)] {
        if t.dims() != [dim] {
            return Err(candle_core::Error::Msg(format!(
                "layer-norm: {what} has shape {:?}, expected [{dim}] for x of shape {:?}",
                t.dims(),
                x.dims()
            )));
        }
    }
    Ok(())
}

/// The gradients `(dx, dw, db)` of [`layer_norm`] at `x` with `weight`, from the gradient `g`
/// of the loss with respect to the output.
pub(super) fn layer_norm_backward(
    x: &Tensor,
    weight: &Tensor,
    g: &Tensor,
    eps: f64,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let dim = x.dim(D::Minus1)?;
    let (x, weight, g) = (x.detach(), weight.detach(), g.detach());
    if x.device().is_cpu() {
        let packed = x.contiguous()?.apply_op3_no_bwd(
            &weight.contiguous()?,
            &g.contiguous()?,
            &LayerNormBackwardOp { eps },
        )?;
        let n = x.elem_count();
        let dx = packed.narrow(0, 0, n)?.reshape(x.shape())?;
        let dw = packed.narrow(0, n, dim)?;
        let db = packed.narrow(0, n + dim, dim)?;
        return Ok((dx, dw, db));
    }
    layer_norm_backward_primitives(&x, &weight, &g, eps)
}

/// `(dx, dw, db)` as [`layer_norm_backward`], from candle primitives (f32 for f16/bf16): the
/// backward off the CPU.
pub(super) fn layer_norm_backward_primitives(
    x: &Tensor,
    weight: &Tensor,
    g: &Tensor,
    eps: f64,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let dim = x.dim(D::Minus1)?;
    let (xf, gf) = (
        upcast(x)?.reshape(((), dim))?,
        upcast(g)?.reshape(((), dim))?,
    );
    let centred = xf.broadcast_sub(&xf.mean_keepdim(D::Minus1)?)?;
    let r = (centred.sqr()?.mean_keepdim(D::Minus1)? + eps)?
        .sqrt()?
        .recip()?;
    let xh = centred.broadcast_mul(&r)?;
    let gw = gf.broadcast_mul(&upcast(weight)?)?;
    let mean_gw = gw.mean_keepdim(D::Minus1)?;
    let mean_gw_xh = (&gw * &xh)?.mean_keepdim(D::Minus1)?;
    let dx = gw
        .broadcast_sub(&mean_gw)?
        .sub(&xh.broadcast_mul(&mean_gw_xh)?)?
        .broadcast_mul(&r)?;
    let dw = (&gf * &xh)?.sum(0)?;
    let db = gf.sum(0)?;
    let dtype = x.dtype();
    Ok((
        dx.reshape(x.shape())?.to_dtype(dtype)?,
        dw.to_dtype(dtype)?,
        db.to_dtype(dtype)?,
    ))
}

/// The forward custom op (CPU), on `(x, weight, bias)`.
struct LayerNormOp {
    eps: f64,
}

impl CustomOp3 for LayerNormOp {
    fn name(&self) -> &'static str {
        "layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let kernel = LayerNormKernel {
            dim: last_dim(l1, self.name())?,
            eps: self.eps,
        };
        let out = dispatch(&kernel, &[(s1, l1), (s2, l2), (s3, l3)])?;
        Ok((out, l1.shape().clone()))
    }

    /// `(dx, dw, db)` as in the module formulas.
    fn bwd(
        &self,
        x: &Tensor,
        weight: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = layer_norm_backward(x, weight, grad_res, self.eps)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// The backward custom op (CPU), on `(x, weight, g)`; its output packs `dx` (as many elements
/// as `x`), then `dw` and `db` (`D` each) into one flat tensor.
struct LayerNormBackwardOp {
    eps: f64,
}

impl CustomOp3 for LayerNormBackwardOp {
    fn name(&self) -> &'static str {
        "layer-norm-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dim = last_dim(l1, self.name())?;
        let kernel = LayerNormBackwardKernel { dim, eps: self.eps };
        let out = dispatch(&kernel, &[(s1, l1), (s2, l2), (s3, l3)])?;
        let len = l1.shape().elem_count() + 2 * dim;
        Ok((out, Shape::from(len)))
    }
}

/// `(mean, 1 / sqrt(var + eps))` of a row (two passes: the variance of the centred values).
#[inline]
fn moments<T: Element>(x: &[T], eps: T::Acc) -> (T::Acc, T::Acc) {
    let n = T::Acc::from_f64(x.len() as f64);
    let mean = lane_sum(x.len(), |i| x[i].load()) / n;
    let var = lane_sum(x.len(), |i| {
        let c = x[i].load() - mean;
        c * c
    }) / n;
    (mean, T::Acc::ONE / (var + eps).sqrt())
}

/// `y = (x - mean) r * w + b` for each row of `dim` elements, from `(x, w, b)`.
struct LayerNormKernel {
    dim: usize,
    eps: f64,
}

impl Kernel for LayerNormKernel {
    const NAME: &'static str = "layer-norm";

    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>> {
        let x = input(inputs, 0, Self::NAME)?;
        let w = input(inputs, 1, Self::NAME)?;
        let b = input(inputs, 2, Self::NAME)?;
        let (dim, eps) = (self.dim, T::Acc::from_f64(self.eps));
        let mut out = vec![T::store(T::Acc::ZERO); x.len()];
        for_each_row(
            &mut out,
            dim,
            || (),
            |_, r, out| {
                let x = &x[r * dim..(r + 1) * dim];
                let (mean, rstd) = moments(x, eps);
                for (((o, x), w), b) in out.iter_mut().zip(x).zip(w).zip(b) {
                    *o = T::store((x.load() - mean) * rstd * w.load() + b.load());
                }
            },
        );
        Ok(out)
    }
}

/// `dx` of each row, then `dw` and `db` summed over rows, from `(x, w, g)`.
struct LayerNormBackwardKernel {
    dim: usize,
    eps: f64,
}

impl LayerNormBackwardKernel {
    /// Writes `dx` of the rows of `x` and `g` into `dx` and adds their `g * xh` and `g` to
    /// `dw` and `db`.
    fn rows<T: Element>(
        &self,
        x: &[T],
        w: &[T],
        g: &[T],
        dx: &mut [T],
        dw: &mut [T::Acc],
        db: &mut [T::Acc],
    ) {
        let (dim, eps) = (self.dim, T::Acc::from_f64(self.eps));
        let n = T::Acc::from_f64(dim as f64);
        for ((x, g), dx) in x
            .chunks_exact(dim)
            .zip(g.chunks_exact(dim))
            .zip(dx.chunks_exact_mut(dim))
        {
            let (mean, rstd) = moments(x, eps);
            let xh = |i: usize| (x[i].load() - mean) * rstd;
            let mean_gw = lane_sum(dim, |i| g[i].load() * w[i].load()) / n;
            let mean_gw_xh = lane_sum(dim, |i| g[i].load() * w[i].load() * xh(i)) / n;
            for (i, dx) in dx.iter_mut().enumerate() {
                let (gi, xhi) = (g[i].load(), xh(i));
                *dx = T::store(rstd * (gi * w[i].load() - mean_gw - xhi * mean_gw_xh));
                dw[i] += gi * xhi;
                db[i] += gi;
            }
        }
    }
}

impl Kernel for LayerNormBackwardKernel {
    const NAME: &'static str = "layer-norm-backward";

    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>> {
        let x = input(inputs, 0, Self::NAME)?;
        let w = input(inputs, 1, Self::NAME)?;
        let g = input(inputs, 2, Self::NAME)?;
        let dim = self.dim;
        let n = x.len();
        let zero = T::store(T::Acc::ZERO);
        let mut out = vec![zero; n + 2 * dim];
        if dim == 0 {
            return Ok(out);
        }
        let (dx, params) = out.split_at_mut(n);
        let sums = || (vec![T::Acc::ZERO; dim], vec![T::Acc::ZERO; dim]);
        let (dw, db) = if is_large(n) {
            // Tasks of a fixed number of rows, their partial sums added in task order: the
            // same result on any thread count (rayon's `reduce` groups by its splits).
            let chunk = rows_per_task(dim) * dim;
            let partials: Vec<_> = dx
                .par_chunks_mut(chunk)
                .enumerate()
                .map(|(task, dx)| {
                    let (mut dw, mut db) = sums();
                    let rows = task * chunk..task * chunk + dx.len();
                    self.rows(&x[rows.clone()], w, &g[rows], dx, &mut dw, &mut db);
                    (dw, db)
                })
                .collect();
            partials
                .into_iter()
                .fold(sums(), |(mut dw, mut db), (dw2, db2)| {
                    dw.iter_mut().zip(dw2).for_each(|(a, b)| *a += b);
                    db.iter_mut().zip(db2).for_each(|(a, b)| *a += b);
                    (dw, db)
                })
        } else {
            let (mut dw, mut db) = sums();
            self.rows(x, w, g, dx, &mut dw, &mut db);
            (dw, db)
        };
        let (dw_out, db_out) = params.split_at_mut(dim);
        for (o, v) in dw_out.iter_mut().zip(dw) {
            *o = T::store(v);
        }
        for (o, v) in db_out.iter_mut().zip(db) {
            *o = T::store(v);
        }
        Ok(out)
    }
}
