//! Dropout from a packed [`KeepMask`], alone or fused with the residual add.
//!
//! ```text
//! y = x * f           f_i = scale if kept, 0 if dropped;   dx = g * f
//! z = y * f + r       (dropout, then residual)               dy = g * f,  dr = g
//! ```

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{all_cpu_f32, f32_slice, tensor, with_f32, PASS_CHUNK};
use crate::mode::KeepMask;

/// `x * f`, `f` the factors of `mask` (one per element of `x`, row-major).
///
/// # Errors
/// A mask whose length is not `x`'s element count; candle errors.
pub(crate) fn dropout(x: &Tensor, mask: KeepMask) -> candle_core::Result<Tensor> {
    check_len(x, &mask)?;
    if all_cpu_f32(&[x]) {
        x.contiguous()?.apply_op1(DropoutOp {
            mask: Arc::new(mask),
        })
    } else {
        x.mul(&factors(x, &mask)?)
    }
}

/// `y * f + residual`, `f` the factors of `mask`.
///
/// # Errors
/// Shapes that differ, a mask of the wrong length; candle errors.
pub(crate) fn dropout_add(
    y: &Tensor,
    residual: &Tensor,
    mask: KeepMask,
) -> candle_core::Result<Tensor> {
    check_len(y, &mask)?;
    if y.shape() != residual.shape() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: y.shape().clone(),
            rhs: residual.shape().clone(),
            op: "dropout-add",
        });
    }
    if all_cpu_f32(&[y, residual]) {
        y.contiguous()?.apply_op2(
            &residual.contiguous()?,
            DropoutAddOp {
                mask: Arc::new(mask),
            },
        )
    } else {
        y.mul(&factors(y, &mask)?)? + residual
    }
}

fn check_len(x: &Tensor, mask: &KeepMask) -> candle_core::Result<()> {
    if mask.len() == x.elem_count() {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "dropout: a mask of {} elements for a tensor of {}",
            mask.len(),
            x.elem_count()
        )))
    }
}

/// The factors of `mask` as a tensor shaped and typed like `x` (the composite path).
fn factors(x: &Tensor, mask: &KeepMask) -> candle_core::Result<Tensor> {
    Tensor::from_vec(mask.factors(), x.shape(), x.device())?.to_dtype(x.dtype())
}

/// `out = x * f (+ r)` over chunks of elements on the threads.
fn scaled(mask: &KeepMask, x: &[f32], residual: Option<&[f32]>) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(PASS_CHUNK)
        .zip(x.par_chunks(PASS_CHUNK))
        .enumerate()
        .for_each(|(c, (o, x))| {
            let start = c * PASS_CHUNK;
            mask.scale_into(start, x, o);
            if let Some(r) = residual {
                for (o, r) in o.iter_mut().zip(&r[start..start + x.len()]) {
                    *o += r;
                }
            }
        });
    out
}

/// The dropout op.
struct DropoutOp {
    mask: Arc<KeepMask>,
}

impl CustomOp1 for DropoutOp {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l, "dropout")?;
        Ok((
            CpuStorage::F32(scaled(&self.mask, x, None)),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dx = with_f32(g, "dropout backward", |g| Ok(scaled(&self.mask, g, None)))?;
        Ok(Some(tensor(dx, x.shape())?))
    }
}

/// The dropout-then-residual op.
struct DropoutAddOp {
    mask: Arc<KeepMask>,
}

impl CustomOp2 for DropoutAddOp {
    fn name(&self) -> &'static str {
        "dropout-add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = f32_slice(s1, l1, "dropout-add")?;
        let r = f32_slice(s2, l2, "dropout-add")?;
        Ok((
            CpuStorage::F32(scaled(&self.mask, y, Some(r))),
            l1.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        y: &Tensor,
        _residual: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = with_f32(g, "dropout-add backward", |g| {
            Ok(scaled(&self.mask, g, None))
        })?;
        Ok((Some(tensor(dy, y.shape())?), Some(g.clone())))
    }
}
