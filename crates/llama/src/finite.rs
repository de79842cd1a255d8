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
    if t.dtype() == DType::F32 {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(all)), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            if let Some(values) = all.get(start..end) {
                return Ok(first_bad(values, limit).map(|i| (i, values[i])));
            }
        }
    }
    let values = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok(first_bad(&values, limit).map(|i| (i, values[i])))
}

/// Values per chunk of [`first_bad`]'s first pass.
const CHUNK: usize = 256;

/// The index of the first value that is NaN, infinite or of magnitude above `limit`.
///
/// Chunk by chunk, first a test of every value with no early exit, which the compiler
/// vectorizes: `|v| > min(limit, f32::MAX) or v is NaN` is true exactly for those values (an
/// infinity exceeds `f32::MAX`, a finite value never does). Only a chunk that holds one is then
/// searched value by value.
fn first_bad(values: &[f32], limit: f32) -> Option<usize> {
    // NaN fails `is_finite`; infinities fail both tests.
    let bad = |v: &f32| !v.is_finite() || v.abs() > limit;
    let bound = limit.min(f32::MAX);
    for (c, chunk) in values.chunks(CHUNK).enumerate() {
        if chunk
            .iter()
            .fold(false, |any, &v| any | (v.abs() > bound) | v.is_nan())
        {
            if let Some(i) = chunk.iter().position(bad) {
                return Some(c * CHUNK + i);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{first_bad, CHUNK, Q8_LIMIT};

    /// The plain scan [`first_bad`] must agree with.
    fn first_bad_slow(values: &[f32], limit: f32) -> Option<usize> {
        values
            .iter()
            .position(|v| !v.is_finite() || v.abs() > limit)
    }

    #[test]
    fn the_chunked_scan_finds_the_first_bad_value() {
        let limits = [Q8_LIMIT, f32::MAX, f32::INFINITY, 1.0, 0.0, -1.0, f32::NAN];
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -f32::MAX,
            Q8_LIMIT,
            -Q8_LIMIT * 1.0001,
            1.0,
            -1.0,
            0.0,
            -0.0,
            1e-40,
        ];
        let mut state = 0x1234_5678_u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            for _ in 0..40 {
                let mut values: Vec<f32> = (0..len)
                    .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                // Up to three special values at random places.
                for _ in 0..next() % 4 {
                    if len > 0 {
                        let at = next() as usize % len;
                        values[at] = specials[next() as usize % specials.len()];
                    }
                }
                for limit in limits {
                    assert_eq!(
                        first_bad(&values, limit),
                        first_bad_slow(&values, limit),
                        "len {len}, limit {limit}, values {values:?}"
                    );
                }
            }
        }
    }
}
