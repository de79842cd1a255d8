//! Finding NaN and infinities: the one scan every crate of the workspace uses, over values
//! (`f32`, `f64`, `f16`, `bf16`), over their stored little-endian bytes, and (with the `candle`
//! feature) over tensors.
//!
//! A value is non-finite exactly when its exponent bits are all ones (NaN and both
//! infinities), so the scan tests bits and never converts: for `f16` and `bf16` this avoids
//! widening each value to `f32`. Over a block of stored values it or-reduces
//! `(bits & exponent) + lowest exponent bit`, which carries into the sign position exactly
//! for an all-ones exponent: one and, one add and one or per value, no compare, so the loop
//! vectorises to plain integer SIMD. Only a block found to hold a bad value is searched again
//! for its first index.
//!
//! The block test over stored bytes ([`any_non_finite`]) runs with the widest vector
//! instructions the CPU has (the same loop compiled for AVX-512 or AVX2, chosen at run time by
//! the cached [`Isa::detect`]; portable code otherwise).
//!
//! ```
//! use rotary::finite::{first_non_finite, NonFinite};
//! assert_eq!(first_non_finite(&[1.0f32, 2.0]), None);
//! let bad = first_non_finite(&[1.0f32, f32::INFINITY, f32::NAN]).unwrap();
//! assert_eq!(bad, NonFinite { index: 1, value: f32::INFINITY });
//! assert_eq!(bad.position(&[1, 2]), [0, 1]);
//! ```

use half::{bf16, f16};

use crate::Isa;

/// Values or-reduced per block before looking for an index (16 KiB of f32).
pub const BLOCK: usize = 4096;

/// The first NaN or infinity of a scan: its flat (row-major) index and its value.
///
/// Every non-finite value of `f64`, `f16` and `bf16` is one of `f32` too, so the value is kept
/// as an `f32` whatever the scanned type.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("non-finite value {value} at index {index}")]
pub struct NonFinite {
    /// The flat index in the scanned values (row-major for a tensor).
    pub index: usize,
    /// The value: NaN, `inf` or `-inf`.
    pub value: f32,
}

impl NonFinite {
    /// The index per dimension of [`NonFinite::index`] in a row-major array of shape `dims`.
    pub fn position(&self, dims: &[usize]) -> Vec<usize> {
        let mut flat = self.index;
        let mut index = vec![0; dims.len()];
        for (i, &d) in dims.iter().enumerate().rev() {
            if d > 0 {
                index[i] = flat % d;
                flat /= d;
            }
        }
        index
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A floating-point type whose non-finite values are told by their exponent bits.
///
/// Sealed: implemented for `f32`, `f64`, `half::f16` and `half::bf16`.
pub trait FloatBits: Copy + sealed::Sealed {
    /// One stored value: its little-endian bytes.
    type Raw: Copy;
    /// The value stored as `raw`.
    fn from_le(raw: Self::Raw) -> Self;
    /// Whether the value is NaN or an infinity (its exponent bits all ones).
    fn non_finite(self) -> bool;
    /// The value as an `f32` (exact for every non-finite value).
    fn to_f32(self) -> f32;
    /// Whether any of the stored values `raw` is NaN or an infinity, by the branch-free carry
    /// test (portable code; [`any_non_finite`] picks the instruction set).
    fn any_non_finite_portable(raw: &[Self::Raw]) -> bool;
}

macro_rules! float_bits {
    ($t:ty, $n:literal, $bits:ty, $exponent:literal, $lowest:literal, $to_f32:expr) => {
        impl FloatBits for $t {
            type Raw = [u8; $n];

            fn from_le(raw: [u8; $n]) -> Self {
                <$t>::from_le_bytes(raw)
            }

            fn non_finite(self) -> bool {
                self.to_bits() & $exponent == $exponent
            }

            fn to_f32(self) -> f32 {
                $to_f32(self)
            }

            #[inline(always)]
            fn any_non_finite_portable(raw: &[[u8; $n]]) -> bool {
                let carries = raw.iter().fold(0, |acc: $bits, &r| {
                    acc | ((<$bits>::from_le_bytes(r) & $exponent) + $lowest)
                });
                carries & !(<$bits>::MAX >> 1) != 0
            }
        }
    };
}

float_bits!(f32, 4, u32, 0x7f80_0000, 0x0080_0000, |v: f32| v);
float_bits!(
    f64,
    8,
    u64,
    0x7ff0_0000_0000_0000,
    0x0010_0000_0000_0000,
    |v: f64| v as f32
);
float_bits!(f16, 2, u16, 0x7c00, 0x0400, f16::to_f32);
float_bits!(bf16, 2, u16, 0x7f80, 0x0080, bf16::to_f32);

/// Whether any of the stored values `raw` is NaN or an infinity, with the instruction set
/// [`Isa::detect`] chose for this CPU.
pub fn any_non_finite<T: FloatBits>(raw: &[T::Raw]) -> bool {
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
        _ => T::any_non_finite_portable(raw),
    }
}

/// The portable loop, inlined and compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn any_non_finite_avx512<T: FloatBits>(raw: &[T::Raw]) -> bool {
    T::any_non_finite_portable(raw)
}

/// The portable loop, inlined and compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn any_non_finite_avx2<T: FloatBits>(raw: &[T::Raw]) -> bool {
    T::any_non_finite_portable(raw)
}

/// The first NaN or infinity in `values`: blocks of [`BLOCK`] tested without a branch per
/// value, the first bad block searched.
pub fn first_non_finite<T: FloatBits>(values: &[T]) -> Option<NonFinite> {
    values
        .chunks(BLOCK)
        .enumerate()
        .find(|(_, block)| block.iter().fold(false, |bad, v| bad | v.non_finite()))
        .and_then(|(b, block)| {
            let i = block.iter().position(|v| v.non_finite())?;
            Some(NonFinite {
                index: b * BLOCK + i,
                value: block[i].to_f32(),
            })
        })
}

/// The first NaN or infinity among the stored values `raw`: blocks of [`BLOCK`] tested by
/// [`any_non_finite`], the first bad block searched.
pub fn first_non_finite_stored<T: FloatBits>(raw: &[T::Raw]) -> Option<NonFinite> {
    raw.chunks(BLOCK)
        .enumerate()
        .filter(|(_, block)| any_non_finite::<T>(block))
        .find_map(|(b, block)| {
            block.iter().enumerate().find_map(|(i, &r)| {
                let v = T::from_le(r);
                v.non_finite().then(|| NonFinite {
                    index: b * BLOCK + i,
                    value: v.to_f32(),
                })
            })
        })
}

/// The first NaN or infinity of a float tensor (row-major over its shape, whatever its layout
/// or device); `None` for integer tensors. A contiguous tensor on the CPU is scanned in place,
/// in its own dtype; any other is copied to the CPU first.
///
/// # Errors
/// candle's errors from copying the tensor.
#[cfg(feature = "candle")]
pub fn first_non_finite_in(t: &candle_core::Tensor) -> candle_core::Result<Option<NonFinite>> {
    use candle_core::{CpuStorage, DType, Device, Storage};
    if !t.dtype().is_float() {
        return Ok(None);
    }
    if !t.device().is_cpu() || !t.is_contiguous() {
        let copy = t.to_device(&Device::Cpu)?.contiguous()?;
        return first_non_finite_in(&copy);
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("a tensor on the CPU without CPU storage");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("scanning a non-contiguous tensor");
    };
    fn scan<T: FloatBits>(all: &[T], start: usize, end: usize) -> Option<NonFinite> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain reference: the standard library's `is_finite` after widening.
    fn slow(values: &[f32]) -> Option<usize> {
        values.iter().position(|v| !v.is_finite())
    }

    fn index<T: FloatBits>(values: &[T]) -> Option<usize> {
        first_non_finite(values).map(|bad| bad.index)
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
                    assert_eq!(index(&v), slow(&v), "{n} {at} {bad}");
                    let raw: Vec<[u8; 4]> = v.iter().map(|x| x.to_le_bytes()).collect();
                    for found in [first_non_finite_stored::<f32>(&raw), first_non_finite(&v)] {
                        let found = found.expect("a bad value");
                        assert_eq!(found.index, at, "{n} {at}");
                        assert_eq!(found.value.to_bits(), bad.to_bits(), "{n} {at}");
                    }
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
            assert_eq!(f16::any_non_finite_portable(&raw), h.non_finite());
            let b = bf16::from_bits(bits);
            assert_eq!(b.non_finite(), !b.to_f32().is_finite(), "{bits:#06x}");
            assert_eq!(bf16::any_non_finite_portable(&raw), b.non_finite());
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
                        assert_eq!(f32::any_non_finite_portable(&raw), !v.is_finite());
                        let d = f64::from(v);
                        let raw = [d.to_le_bytes()];
                        assert_eq!(f64::any_non_finite_portable(&raw), !d.is_finite());
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
    fn positions_unravel_row_major() {
        let bad = NonFinite {
            index: 4,
            value: f32::NAN,
        };
        assert_eq!(bad.position(&[1, 2, 3]), [0, 1, 1]);
        assert_eq!(bad.position(&[]), Vec::<usize>::new());
        assert_eq!(bad.position(&[5]), [4]);
    }

    #[cfg(feature = "candle")]
    #[test]
    fn tensors_are_scanned_in_their_dtype_whatever_their_layout() {
        use candle_core::{DType, Device, Tensor};
        let dev = Device::Cpu;
        let t = Tensor::new(&[1f32, 2.0, f32::INFINITY, 4.0], &dev).unwrap();
        assert_eq!(first_non_finite_in(&t).unwrap().map(|b| b.index), Some(2));
        let h = t.to_dtype(DType::F16).unwrap();
        assert_eq!(first_non_finite_in(&h).unwrap().map(|b| b.index), Some(2));
        let big = Tensor::new(&[1e5f32], &dev).unwrap();
        let h = big.to_dtype(DType::F16).unwrap();
        assert_eq!(first_non_finite_in(&h).unwrap().map(|b| b.index), Some(0));
        let ints = Tensor::new(&[1u32, 2], &dev).unwrap();
        assert_eq!(first_non_finite_in(&ints).unwrap(), None);
        // [[0, 1, 2], [3, nan, 5]] transposed: row-major over [3, 2], the NaN at [1, 1].
        let m = Tensor::from_vec(vec![0f32, 1.0, 2.0, 3.0, f32::NAN, 5.0], (2, 3), &dev)
            .unwrap()
            .t()
            .unwrap();
        let bad = first_non_finite_in(&m).unwrap().unwrap();
        assert_eq!((bad.index, bad.position(m.dims())), (3, vec![1, 1]));
        assert!(bad.value.is_nan());
    }
}
