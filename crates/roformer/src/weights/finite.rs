//! Finding NaN and infinities in weights: a branch-free scan that the compiler vectorises.
//!
//! A value is non-finite exactly when its exponent bits are all ones (NaN and both
//! infinities), so the scan tests bits and never converts: for `f16` and `bf16` this avoids
//! widening each value to `f32`. Over a block of stored values it or-reduces
//! `(bits & exponent) + lowest exponent bit`, which carries into the sign position exactly
//! for an all-ones exponent: one and, one add and one or per value, no compare, so the loop
//! vectorises to plain integer SIMD. Only a block found to hold a bad value is searched again
//! for its first index.
//!
//! Loading scans each block of [`BLOCK`] stored values (16 KiB of f32) right after copying
//! it into the tensor, while it is in L1, with the widest vector instructions the CPU has (the
//! same loop compiled for AVX-512 or AVX2, chosen at run time by rotary's cached
//! [`Isa::detect`]; portable code otherwise): on a base-size checkpoint this costs about 3.5%
//! of the load time (RELIABILITY.md, "Loading").

use candle_core::{CpuStorage, DType, Storage, Tensor};
use half::{bf16, f16};
use rotary::Isa;

/// Values or-reduced per block before looking for an index.
pub(crate) const BLOCK: usize = 4096;

/// A floating-point type whose non-finite values are told by their exponent bits.
pub(crate) trait FloatBits: Copy {
    /// One stored value: its little-endian bytes.
    type Raw: Copy;
    /// Whether the value is NaN or an infinity.
    fn non_finite(self) -> bool;
    /// Whether any of the stored values `raw` is NaN or an infinity (portable code; see
    /// [`any_non_finite`]).
    fn any_non_finite(raw: &[Self::Raw]) -> bool;
}

macro_rules! float_bits {
    ($t:ty, $n:literal, $bits:ty, $exponent:literal, $lowest:literal) => {
        impl FloatBits for $t {
            type Raw = [u8; $n];

            fn non_finite(self) -> bool {
                self.to_bits() & $exponent == $exponent
            }

            #[inline(always)]
            fn any_non_finite(raw: &[[u8; $n]]) -> bool {
                let carries = raw.iter().fold(0, |acc: $bits, &r| {
                    acc | ((<$bits>::from_le_bytes(r) & $exponent) + $lowest)
                });
                carries & !(<$bits>::MAX >> 1) != 0
            }
        }
    };
}

float_bits!(f32, 4, u32, 0x7f80_0000, 0x0080_0000);
float_bits!(f64, 8, u64, 0x7ff0_0000_0000_0000, 0x0010_0000_0000_0000);
float_bits!(f16, 2, u16, 0x7c00, 0x0400);
float_bits!(bf16, 2, u16, 0x7f80, 0x0080);

/// Whether any of the stored values `raw` is NaN or an infinity, with the instruction set
/// rotary's [`Isa::detect`] chose for this CPU.
pub(crate) fn any_non_finite<T: FloatBits>(raw: &[T::Raw]) -> bool {
    any_non_finite_on::<T>(Isa::detect(), raw)
}

/// [`any_non_finite`] with the instruction set `isa`, or portable code where this CPU does not
/// support it.
fn any_non_finite_on<T: FloatBits>(isa: Isa, raw: &[T::Raw]) -> bool {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F and AVX-512BW (`is_supported` checked just now).
        Isa::Avx512 if isa.is_supported() => unsafe { any_non_finite_avx512::<T>(raw) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (`is_supported` checked just now).
        Isa::Avx2 if isa.is_supported() => unsafe { any_non_finite_avx2::<T>(raw) },
        _ => T::any_non_finite(raw),
    }
}

/// The portable loop, inlined and compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn any_non_finite_avx512<T: FloatBits>(raw: &[T::Raw]) -> bool {
    T::any_non_finite(raw)
}

/// The portable loop, inlined and compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn any_non_finite_avx2<T: FloatBits>(raw: &[T::Raw]) -> bool {
    T::any_non_finite(raw)
}

/// The index of the first NaN or infinity in `values`.
pub(crate) fn first_non_finite<T: FloatBits>(values: &[T]) -> Option<usize> {
    values
        .chunks(BLOCK)
        .enumerate()
        .find(|(_, block)| block.iter().fold(false, |bad, v| bad | v.non_finite()))
        .and_then(|(b, block)| {
            let i = block.iter().position(|v| v.non_finite())?;
            Some(b * BLOCK + i)
        })
}

/// The flat index of the first NaN or infinity of a contiguous float tensor on the CPU; `None`
/// for integer tensors and tensors elsewhere.
///
/// # Errors
/// A non-contiguous tensor.
pub(crate) fn first_non_finite_in(t: &Tensor) -> candle_core::Result<Option<usize>> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Ok(None);
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("scanning a non-contiguous tensor");
    };
    fn scan<T: FloatBits>(all: &[T], start: usize, end: usize) -> Option<usize> {
        all.get(start..end).and_then(first_non_finite)
    }
    Ok(match (t.dtype(), cpu) {
        (DType::F32, CpuStorage::F32(v)) => scan(v, start, end),
        (DType::F64, CpuStorage::F64(v)) => scan(v, start, end),
        (DType::F16, CpuStorage::F16(v)) => scan(v, start, end),
        (DType::BF16, CpuStorage::BF16(v)) => scan(v, start, end),
        _ => None,
    })
}

/// `t` (checked finite when it is a float tensor) in `dtype`, refusing values the conversion
/// turns into infinities (e.g. 1e5 as `f16`).
///
/// # Errors
/// A message naming the first such value and its flat index, or candle's conversion error.
pub(crate) fn to_dtype_finite(t: &Tensor, dtype: DType) -> Result<Tensor, String> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let converted = t.to_dtype(dtype).map_err(|e| e.to_string())?;
    let Some(index) = first_non_finite_in(&converted).map_err(|e| e.to_string())? else {
        return Ok(converted);
    };
    let value = t
        .flatten_all()
        .and_then(|flat| flat.get(index)?.to_dtype(DType::F64)?.to_scalar::<f64>())
        .map_err(|e| e.to_string())?;
    Err(format!(
        "value {value} at flat index {index} does not fit in {dtype:?}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain reference: the standard library's `is_finite` after widening.
    fn slow(values: &[f32]) -> Option<usize> {
        values.iter().position(|v| !v.is_finite())
    }

    #[test]
    fn finds_the_first_bad_value_at_awkward_sizes_and_places() {
        for n in [
            0,
            1,
            2,
            15,
            16,
            17,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 5,
        ] {
            let clean = vec![1.5f32; n];
            assert_eq!(first_non_finite(&clean), None, "{n}");
            for at in [0, n / 2, n.saturating_sub(1)]
                .into_iter()
                .filter(|&i| i < n)
            {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    if at + 1 < n {
                        v[n - 1] = f32::NAN;
                    }
                    assert_eq!(first_non_finite(&v), slow(&v), "{n} {at} {bad}");
                }
            }
        }
    }

    #[test]
    fn large_finite_values_and_subnormals_are_finite() {
        let v = [f32::MAX, f32::MIN, f32::MIN_POSITIVE / 2.0, 0.0, -0.0, 3e38];
        assert_eq!(first_non_finite(&v), None);
        let h = [f16::MAX, f16::MIN, f16::from_bits(1), f16::NEG_ZERO];
        assert_eq!(first_non_finite(&h), None);
        let b = [bf16::MAX, bf16::MIN, bf16::from_bits(1)];
        assert_eq!(first_non_finite(&b), None);
        assert_eq!(first_non_finite(&[f64::MAX, f64::MIN_POSITIVE]), None);
    }

    #[test]
    fn every_half_precision_bit_pattern_agrees_with_is_finite() {
        for bits in 0..=u16::MAX {
            let raw = [bits.to_le_bytes()];
            let h = f16::from_bits(bits);
            assert_eq!(h.non_finite(), !h.to_f32().is_finite(), "{bits:#06x}");
            assert_eq!(f16::any_non_finite(&raw), h.non_finite(), "{bits:#06x}");
            let b = bf16::from_bits(bits);
            assert_eq!(b.non_finite(), !b.to_f32().is_finite(), "{bits:#06x}");
            assert_eq!(bf16::any_non_finite(&raw), b.non_finite(), "{bits:#06x}");
        }
    }

    #[test]
    fn the_carry_scan_of_stored_bytes_agrees_with_is_finite() {
        // Every exponent with low, high and random mantissas and both signs.
        let mut x = 0x2545_f491_u32;
        for exponent in 0..=0xffu32 {
            for mantissa in [0, 1, 0x7f_ffff, 0x40_0000] {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                for m in [mantissa, x & 0x7f_ffff] {
                    for sign in [0, 1u32 << 31] {
                        let v = f32::from_bits(sign | exponent << 23 | m);
                        let raw = [v.to_le_bytes()];
                        assert_eq!(f32::any_non_finite(&raw), !v.is_finite(), "{v:e}");
                        let d = f64::from(v);
                        let raw = [d.to_le_bytes()];
                        assert_eq!(f64::any_non_finite(&raw), !d.is_finite(), "{d:e}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_instruction_set_agrees_with_the_portable_scan_at_awkward_sizes() {
        let sizes = (0..18).chain([31, 32, 33, 63, 64, 65, BLOCK - 1, BLOCK]);
        for isa in Isa::supported() {
            for n in sizes.clone() {
                let clean32 = vec![1.5f32.to_le_bytes(); n];
                let clean16 = vec![f16::ONE.to_le_bytes(); n];
                let clean_b = vec![bf16::ONE.to_le_bytes(); n];
                let clean64 = vec![1.5f64.to_le_bytes(); n];
                assert!(!any_non_finite_on::<f32>(isa, &clean32), "{isa:?} {n}");
                assert!(!any_non_finite_on::<f16>(isa, &clean16), "{isa:?} {n}");
                assert!(!any_non_finite_on::<bf16>(isa, &clean_b), "{isa:?} {n}");
                assert!(!any_non_finite_on::<f64>(isa, &clean64), "{isa:?} {n}");
                for at in [0, n / 2, n.saturating_sub(1)]
                    .into_iter()
                    .filter(|&i| i < n)
                {
                    let mut v = clean32.clone();
                    v[at] = f32::NEG_INFINITY.to_le_bytes();
                    assert!(any_non_finite_on::<f32>(isa, &v), "{isa:?} {n} {at}");
                    let mut v = clean16.clone();
                    v[at] = f16::NAN.to_le_bytes();
                    assert!(any_non_finite_on::<f16>(isa, &v), "{isa:?} {n} {at}");
                    let mut v = clean_b.clone();
                    v[at] = bf16::INFINITY.to_le_bytes();
                    assert!(any_non_finite_on::<bf16>(isa, &v), "{isa:?} {n} {at}");
                    let mut v = clean64.clone();
                    v[at] = f64::NAN.to_le_bytes();
                    assert!(any_non_finite_on::<f64>(isa, &v), "{isa:?} {n} {at}");
                }
            }
        }
    }

    #[test]
    fn tensors_are_scanned_in_their_dtype() {
        let dev = candle_core::Device::Cpu;
        let t = Tensor::new(&[1f32, 2.0, f32::INFINITY, 4.0], &dev).unwrap();
        assert_eq!(first_non_finite_in(&t).unwrap(), Some(2));
        let h = t.to_dtype(DType::F16).unwrap();
        assert_eq!(first_non_finite_in(&h).unwrap(), Some(2));
        let big = Tensor::new(&[1e5f32], &dev).unwrap();
        let h = big.to_dtype(DType::F16).unwrap();
        assert_eq!(first_non_finite_in(&h).unwrap(), Some(0));
        let ints = Tensor::new(&[1u32, 2], &dev).unwrap();
        assert_eq!(first_non_finite_in(&ints).unwrap(), None);
    }

    #[test]
    fn conversions_that_overflow_are_refused() {
        let dev = candle_core::Device::Cpu;
        let t = Tensor::new(&[1f32, 65504.0, 1e5], &dev).unwrap();
        let err = to_dtype_finite(&t, DType::F16).unwrap_err();
        assert!(err.contains("100000") && err.contains("index 2"), "{err}");
        assert!(to_dtype_finite(&t, DType::BF16).is_ok());
        let fits = Tensor::new(&[1f32, 65504.0], &dev).unwrap();
        assert!(to_dtype_finite(&fits, DType::F16).is_ok());
    }
}
