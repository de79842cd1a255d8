//! A pre-norm block's branch joined to the residual stream: the layer scale, the stochastic
//! depth (one keep factor per sample) and the residual add as one op on f32 CPU tensors, and
//! its `*_slow` twin of candle ops (any device and dtype).
//!
//! ```text
//! y[s, i] = (a[s, i] * lambda) * f_s + r[s, i]      a, r [samples, ..., width], lambda [width]
//! da = (g f_s) lambda,   dlambda = sum over s, i of (g f_s) a,   dr = g
//! ```
//!
//! `f_s` is sample `s`'s factor of the keep mask (`1 / (1 - p)` kept, 0 dropped), 1 without a
//! mask. The op replaces four nodes of candle's graph (two broadcast products, their
//! broadcasts, the add), whose backward would also make a full-size gradient for the mask's
//! factors and sum the scale's gradient over the leading dims one element at a time.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::autograd::dropout::KeepMask;
use crate::cpu::policy::PASS_CHUNK;
use crate::cpu::rows::column_sums;
use crate::cpu::tensor::{f32_slice, tensor, with_f32};

/// `(a * lambda) * f_s + residual`, `f_s` the factor of sample `s` (dim 0) in `keep` (1 for
/// every sample without it), as one op on f32 CPU tensors.
///
/// # Errors
/// `a` and `residual` of different shapes, a `lambda` that is not `[width]` (the last dim),
/// a mask whose length is not the number of samples; candle errors (tensors that are not f32
/// on the CPU).
pub(crate) fn scaled_residual(
    a: &Tensor,
    lambda: &Tensor,
    residual: &Tensor,
    keep: Option<KeepMask>,
) -> candle_core::Result<Tensor> {
    check(a, lambda, residual, keep.as_ref())?;
    let op = ScaledResidualOp {
        factors: keep.map(|m| m.factors()),
    };
    a.contiguous()?
        .apply_op3(&lambda.contiguous()?, &residual.contiguous()?, op)
}

/// [`scaled_residual`] composed of candle ops, on any device and dtype: the reference.
///
/// # Errors
/// As [`scaled_residual`].
pub(crate) fn scaled_residual_slow(
    a: &Tensor,
    lambda: &Tensor,
    residual: &Tensor,
    keep: Option<KeepMask>,
) -> candle_core::Result<Tensor> {
    check(a, lambda, residual, keep.as_ref())?;
    let scaled = a.broadcast_mul(lambda)?;
    let branch = match keep {
        Some(mask) => {
            let mut dims = vec![1; a.rank()];
            dims[0] = mask.len();
            let factors = Tensor::from_vec(mask.factors(), dims, a.device())?;
            scaled.broadcast_mul(&factors.to_dtype(a.dtype())?)?
        }
        None => scaled,
    };
    branch + residual
}

fn check(
    a: &Tensor,
    lambda: &Tensor,
    residual: &Tensor,
    keep: Option<&KeepMask>,
) -> candle_core::Result<()> {
    if a.shape() != residual.shape() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: a.shape().clone(),
            rhs: residual.shape().clone(),
            op: "scaled-residual",
        });
    }
    let width = a.dims().last().copied();
    if a.rank() < 2 || lambda.dims() != [width.unwrap_or(0)] {
        return Err(candle_core::Error::Msg(format!(
            "scaled residual: a scale of shape {:?} for a branch of shape {:?}",
            lambda.dims(),
            a.dims()
        )));
    }
    match keep {
        Some(mask) if mask.len() != a.dims()[0] => Err(candle_core::Error::Msg(format!(
            "scaled residual: a mask of {} samples for a branch of {}",
            mask.len(),
            a.dims()[0]
        ))),
        _ => Ok(()),
    }
}

/// The op: the factor of each sample, or none (all 1).
struct ScaledResidualOp {
    factors: Option<Vec<f32>>,
}

impl ScaledResidualOp {
    /// The factor of row `i` of `rows_per_sample`-row samples.
    fn factor(&self, i: usize, rows_per_sample: usize) -> f32 {
        self.factors
            .as_ref()
            .map_or(1.0, |f| f[i / rows_per_sample.max(1)])
    }

    /// `out[i] = op(i, row i)` for every row of `width` values, rows in chunks on the threads.
    fn rows(len: usize, width: usize, row: impl Fn(usize, &mut [f32]) + Sync) -> Vec<f32> {
        let mut out = vec![0f32; len];
        if width == 0 {
            return out;
        }
        let per_chunk = (PASS_CHUNK / width).max(1);
        out.par_chunks_mut(per_chunk * width)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (j, o) in chunk.chunks_exact_mut(width).enumerate() {
                    row(c * per_chunk + j, o);
                }
            });
        out
    }
}

impl CustomOp3 for ScaledResidualOp {
    fn name(&self) -> &'static str {
        "scaled-residual"
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
        let a = f32_slice(s1, l1, "scaled residual branch")?;
        let lambda = f32_slice(s2, l2, "scaled residual scale")?;
        let r = f32_slice(s3, l3, "scaled residual stream")?;
        let width = lambda.len();
        let per_sample = a.len() / width.max(1) / l1.dims()[0].max(1);
        let y = Self::rows(a.len(), width, |i, out| {
            let f = self.factor(i, per_sample);
            let (a, r) = (&a[i * width..][..width], &r[i * width..][..width]);
            for (((o, a), l), r) in out.iter_mut().zip(a).zip(lambda).zip(r) {
                *o = a * l * f + r;
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        a: &Tensor,
        lambda: &Tensor,
        _residual: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let width = lambda.dim(0)?;
        let rows = a.elem_count() / width.max(1);
        let per_sample = rows / a.dim(0)?.max(1);
        let what = "scaled residual backward";
        let (da, dlambda) = with_f32(g, what, |g| {
            with_f32(a, what, |a| {
                with_f32(lambda, what, |lambda| {
                    let da = Self::rows(a.len(), width, |i, out| {
                        let f = self.factor(i, per_sample);
                        let g = &g[i * width..][..width];
                        for ((o, g), l) in out.iter_mut().zip(g).zip(lambda) {
                            *o = g * f * l;
                        }
                    });
                    let dlambda = column_sums(rows, width, |i, acc| {
                        let f = self.factor(i, per_sample);
                        let (g, a) = (&g[i * width..][..width], &a[i * width..][..width]);
                        for ((s, g), a) in acc.iter_mut().zip(g).zip(a) {
                            *s += g * f * a;
                        }
                    });
                    Ok((da, dlambda))
                })
            })
        })?;
        Ok((
            Some(tensor(da, a.shape())?),
            Some(tensor(dlambda, lambda.shape())?),
            Some(g.clone()),
        ))
    }
}
