//! Dropout from a packed [`KeepMask`], alone or fused with the residual add: one op each on
//! f32 CPU tensors, and their `*_slow` twins of candle ops (any device and dtype).
//!
//! ```text
//! y = x * f           f_i = scale if kept, 0 if dropped;   dx = g * f
//! z = y * f + r       (dropout, then residual)               dy = g * f,  dr = g
//! ```

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::cpu::policy::PASS_CHUNK;
use crate::cpu::tensor::{f32_slice, tensor, with_f32};

/// `x * f`, `f` the factors of `mask` (one per element of `x`, row-major), as one op on an f32
/// CPU tensor.
///
/// # Errors
/// A mask whose length is not `x`'s element count; candle errors (a tensor that is not f32 on
/// the CPU).
pub(crate) fn dropout(x: &Tensor, mask: KeepMask) -> candle_core::Result<Tensor> {
    check_len(x, &mask)?;
    x.contiguous()?.apply_op1(DropoutOp {
        mask: Arc::new(mask),
    })
}

/// [`dropout`] composed of candle ops, on any device and dtype.
///
/// # Errors
/// As [`dropout`].
pub(crate) fn dropout_slow(x: &Tensor, mask: KeepMask) -> candle_core::Result<Tensor> {
    check_len(x, &mask)?;
    x.mul(&factors(x, &mask)?)
}

/// `y * f + residual`, `f` the factors of `mask`, as one op on f32 CPU tensors.
///
/// # Errors
/// Shapes that differ, a mask of the wrong length; candle errors (tensors that are not f32 on
/// the CPU).
pub(crate) fn dropout_add(
    y: &Tensor,
    residual: &Tensor,
    mask: KeepMask,
) -> candle_core::Result<Tensor> {
    check_add(y, residual, &mask)?;
    y.contiguous()?.apply_op2(
        &residual.contiguous()?,
        DropoutAddOp {
            mask: Arc::new(mask),
        },
    )
}

/// [`dropout_add`] composed of candle ops, on any device and dtype.
///
/// # Errors
/// As [`dropout_add`].
pub(crate) fn dropout_add_slow(
    y: &Tensor,
    residual: &Tensor,
    mask: KeepMask,
) -> candle_core::Result<Tensor> {
    check_add(y, residual, &mask)?;
    y.mul(&factors(y, &mask)?)? + residual
}

fn check_add(y: &Tensor, residual: &Tensor, mask: &KeepMask) -> candle_core::Result<()> {
    check_len(y, mask)?;
    if y.shape() != residual.shape() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: y.shape().clone(),
            rhs: residual.shape().clone(),
            op: "dropout-add",
        });
    }
    Ok(())
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

/// The factors of `mask` as a tensor shaped and typed like `x` (the slow path).
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

/// Which elements of a tensor a dropout keeps, packed 64 to a word (bit `i % 64` of word
/// `i / 64` for element `i`, row-major), and the factor `1 / (1 - p)` of the kept ones.
#[derive(Debug, Clone)]
pub struct KeepMask {
    bits: Vec<u64>,
    len: usize,
    scale: f32,
}

impl KeepMask {
    /// The mask of `len` elements whose bits are `bits` (element `i` kept when bit `i % 64` of
    /// word `i / 64` is set), each kept one scaled by `scale`.
    pub(crate) fn new(bits: Vec<u64>, len: usize, scale: f32) -> KeepMask {
        KeepMask { bits, len, scale }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mask covers no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The factor of a kept element, `1 / (1 - p)` (0 when `p >= 1`).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Whether element `i` is kept.
    pub fn keeps(&self, i: usize) -> bool {
        i < self.len && (self.bits[i / 64] >> (i % 64)) & 1 == 1
    }

    /// The factor of each element: the scale where kept, 0 where dropped.
    pub fn factors(&self) -> Vec<f32> {
        (0..self.len)
            .map(|i| if self.keeps(i) { self.scale } else { 0.0 })
            .collect()
    }

    /// `out[j] = x[j] * factor(start + j)` for the elements `start..start + x.len()`.
    pub(crate) fn scale_into(&self, start: usize, x: &[f32], out: &mut [f32]) {
        self.for_each_factor(start, x.len(), |j, f| out[j] = x[j] * f);
    }

    /// `x[j] *= factor(start + j)` for the elements `start..start + x.len()`.
    pub(crate) fn scale_in_place(&self, start: usize, x: &mut [f32]) {
        self.for_each_factor(start, x.len(), |j, f| x[j] *= f);
    }

    /// Calls `f(j, factor(start + j))` for `j` in `0..n`, a word of bits at a time.
    #[inline(always)]
    fn for_each_factor(&self, start: usize, n: usize, mut f: impl FnMut(usize, f32)) {
        let mut j = 0;
        while j < n {
            let i = start + j;
            let (word, bit) = (i / 64, i % 64);
            let run = (64 - bit).min(n - j);
            let bits = self.bits[word] >> bit;
            for r in 0..run {
                f(
                    j + r,
                    if (bits >> r) & 1 == 1 {
                        self.scale
                    } else {
                        0.0
                    },
                );
            }
            j += run;
        }
    }
}
