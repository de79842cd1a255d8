//! Checking what the model computes: activations before a quantized product, and logits.
//!
//! candle's quantized products (and our Q4_1 kernel, bit for bit the same) first quantize the
//! activations to blocks of 32 8-bit integers with one f16 scale, `d = max|x| / 127`. A NaN in
//! a block is skipped by the `max` and then cast to 0, and a magnitude above
//! `65504 * 127` makes `d` an f16 infinity: either way the product is a wrong number and
//! nothing says so. So the input of every quantized product is checked first: finite, and of
//! magnitude at most [`Q8_LIMIT`] (or, for the K-quant types, whose activation blocks keep an
//! f32 scale, finite). The scan reads each input once, a small cost next to the product that
//! reads every weight.

use candle_core::quantized::GgmlDType;
use candle_core::{CpuStorage, DType, Storage, Tensor};

use crate::error::Result;

/// The largest activation magnitude an 8-bit block with an f16 scale holds: `f16::MAX * 127`.
pub(crate) const Q8_LIMIT: f32 = 65504.0 * 127.0;

/// The largest activation magnitude a product with weights of `dtype` takes.
pub(crate) fn activation_limit(dtype: GgmlDType) -> f32 {
    match dtype {
        GgmlDType::Q4_0
        | GgmlDType::Q4_1
        | GgmlDType::Q5_0
        | GgmlDType::Q5_1
        | GgmlDType::Q8_0
        | GgmlDType::Q8_1 => Q8_LIMIT,
        _ => f32::MAX,
    }
}

/// The flat index and value of the first element of `t` that is NaN, infinite or of magnitude
/// above `limit`.
///
/// # Errors
/// A candle error from reading the tensor.
pub(crate) fn first_out_of_range(t: &Tensor, limit: f32) -> Result<Option<(usize, f32)>> {
    // NaN fails `is_finite`; infinities fail both tests.
    let bad = |v: &f32| !v.is_finite() || v.abs() > limit;
    if t.dtype() == DType::F32 {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(all)), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            if let Some(values) = all.get(start..end) {
                return Ok(values.iter().position(bad).map(|i| (i, values[i])));
            }
        }
    }
    let values = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok(values.iter().position(bad).map(|i| (i, values[i])))
}
