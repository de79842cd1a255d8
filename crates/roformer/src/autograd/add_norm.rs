//! A sub-layer's tail, `LayerNorm(Dropout(y) + residual)`, as one op on f32 CPU tensors (the
//! CPU layer's [`AddNorm`] kernels), and its `*_slow` twin, the two ops it replaces:
//! [`dropout_add_slow`] (or the plain add), then [`layer_norm`], on any device and dtype.
//!
//! ```text
//! s = y * f + r,   f = 1 / (1 - p) where kept, 0 where dropped (1 without a mask)
//! out = (s - mean) / sqrt(var + eps) * gamma + beta
//! dr = ds = rstd (g gamma - mean(g gamma) - z mean(g gamma z)),   dy = ds * f
//! dgamma = sum_rows g z,   dbeta = sum_rows g
//! ```
//!
//! One node instead of two: the backward writes `dy`, `dr`, `dgamma` and `dbeta` in one pass,
//! and `s`, its gradient and their zero-then-add accumulation are never materialised. `gamma`
//! and `beta` enter the op side by side as one `[2 h]` tensor (candle's custom ops take at most
//! three operands); its gradient is split back by candle's `cat` backward.

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor, D};

use super::dropout::{dropout_add_slow, KeepMask};
use super::layer_norm;
use crate::cpu::add_norm::{AddNorm, Dropout, Moments};
use crate::cpu::tensor::{f32_slice, tensor, Held};

/// `LayerNorm(Dropout(y) + residual)` with `weight` (`gamma`) and `bias` (`beta`) of shape
/// `[h]` for `y` and `residual` of shape `[..., h]`, the dropout the factors of `mask` (none
/// when `None`), as one op on f32 CPU tensors; differentiable with respect to `y`, `residual`,
/// `weight` and `bias` (see the module formulas).
///
/// # Errors
/// `y` and `residual` of different shapes, a mask of the wrong length, `weight` or `bias` not
/// of shape `[h]`; candle errors (tensors that are not f32 on the CPU).
pub(crate) fn add_norm(
    y: &Tensor,
    residual: &Tensor,
    mask: Option<KeepMask>,
    (weight, bias): (&Tensor, &Tensor),
    eps: f64,
) -> candle_core::Result<Tensor> {
    check(y, residual, mask.as_ref())?;
    let params = Tensor::cat(&[weight, bias], 0)?;
    y.contiguous()?.apply_op3(
        &residual.contiguous()?,
        &params,
        AddNormOp {
            mask,
            eps: eps as f32,
            moments: OnceLock::new(),
        },
    )
}

/// [`add_norm`] as the two ops it replaces, on any device and dtype: [`dropout_add_slow`] (or
/// `y + residual` without a mask), then [`layer_norm`].
///
/// # Errors
/// As [`add_norm`].
pub(crate) fn add_norm_slow(
    y: &Tensor,
    residual: &Tensor,
    mask: Option<KeepMask>,
    (weight, bias): (&Tensor, &Tensor),
    eps: f64,
) -> candle_core::Result<Tensor> {
    check(y, residual, mask.as_ref())?;
    let sum = match mask {
        Some(mask) => dropout_add_slow(y, residual, mask)?,
        None => (y + residual)?,
    };
    layer_norm(&sum, weight, bias, eps)
}

/// `y` and `residual` of one shape, the mask (if any) of their element count.
fn check(y: &Tensor, residual: &Tensor, mask: Option<&KeepMask>) -> candle_core::Result<()> {
    if y.shape() != residual.shape() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: y.shape().clone(),
            rhs: residual.shape().clone(),
            op: "add-norm",
        });
    }
    match mask {
        Some(mask) if mask.len() != y.elem_count() => Err(candle_core::Error::Msg(format!(
            "add-norm: a dropout mask of {} elements for a tensor of {}",
            mask.len(),
            y.elem_count()
        ))),
        _ => Ok(()),
    }
}

/// The op on `(y, residual, [gamma; beta])`; `moments` holds the forward's row moments for
/// the backward.
struct AddNormOp {
    mask: Option<KeepMask>,
    eps: f32,
    moments: OnceLock<Vec<Moments>>,
}

impl AddNormOp {
    /// Runs `f` on the kernel for rows of `width` with `params = [gamma; beta]`.
    fn with_kernel<R>(
        &self,
        width: usize,
        params: &[f32],
        f: impl FnOnce(&AddNorm<'_>) -> candle_core::Result<R>,
    ) -> candle_core::Result<R> {
        if params.len() != 2 * width {
            return Err(candle_core::Error::Msg(format!(
                "add-norm: {} weight and bias elements for rows of {width}",
                params.len()
            )));
        }
        with_kernel(params.split_at(width), self.eps, self.mask.as_ref(), f)
    }
}

/// Runs `f` on the [`AddNorm`] kernel of `LayerNorm(Dropout(y) + r)` with `(gamma, beta)`
/// (rows of their width), epsilon `eps` and the dropout factors of `mask` (none when `None`).
pub(crate) fn with_kernel<R>(
    (weight, bias): (&[f32], &[f32]),
    eps: f32,
    mask: Option<&KeepMask>,
    f: impl FnOnce(&AddNorm<'_>) -> R,
) -> R {
    let scale = mask
        .map(|mask| move |start: usize, x: &[f32], out: &mut [f32]| mask.scale_into(start, x, out));
    let dropout = scale.as_ref().map(|scale| scale as Dropout<'_>);
    f(&AddNorm {
        width: weight.len(),
        weight,
        bias,
        eps,
        dropout,
    })
}

impl CustomOp3 for AddNormOp {
    fn name(&self) -> &'static str {
        "add-norm"
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
        let y = f32_slice(s1, l1, "add-norm y")?;
        let r = f32_slice(s2, l2, "add-norm residual")?;
        let params = f32_slice(s3, l3, "add-norm weight and bias")?;
        let width = l1.shape().dim(D::Minus1)?;
        let (out, moments) = self.with_kernel(width, params, |k| k.forward(y, r))?;
        // A fresh op per call: the cell is empty.
        let _ = self.moments.set(moments);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// `(dy, dr, [dgamma; dbeta])` as in the module formulas.
    fn bwd(
        &self,
        y: &Tensor,
        residual: &Tensor,
        params: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let moments = self.moments.get().ok_or_else(|| {
            candle_core::Error::Msg("add-norm backward: no saved row moments".into())
        })?;
        let g = g.contiguous()?;
        let held = [y, residual, params, &g].map(Held::new);
        let [y_data, r, p, g_data] = held.each_ref().map(Held::f32s);
        let (Some(y_data), Some(r), Some(p), Some(g_data)) = (y_data, r, p, g_data) else {
            return Err(candle_core::Error::Msg(
                "add-norm backward: expected contiguous f32 CPU tensors".into(),
            ));
        };
        let width = y.dim(D::Minus1)?;
        let grads = self.with_kernel(width, p, |k| k.backward(y_data, r, moments, g_data))?;
        let dr = tensor(grads.dr, y.shape())?;
        let dy = match grads.dy {
            Some(dy) => tensor(dy, y.shape())?,
            None => dr.clone(),
        };
        let mut dparams = grads.dweight;
        dparams.extend(grads.dbias);
        Ok((Some(dy), Some(dr), Some(tensor(dparams, params.shape())?)))
    }
}
