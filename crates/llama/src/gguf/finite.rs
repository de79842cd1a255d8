//! Finding NaN and infinities in stored weights, in one pass over a tensor's bytes as they are
//! read: every value of a float tensor (F32, F16, BF16), and every scale (and minimum) of the
//! blocks of a quantized one. A block's integers are finite by construction; its f16 or f32
//! scales are not, and a NaN there makes every product it enters NaN, or, once the activations
//! are quantized in turn, a silently wrong number.
//!
//! The values are tested by the workspace's one scan, [`rotary::finite`]: bits, never a
//! conversion.

use candle_core::quantized::GgmlDType;
use half::{bf16, f16};
use rotary::finite::{first_non_finite_stored, FloatBits};

/// A stored floating-point field: its width and how to tell and print a non-finite value.
#[derive(Debug, Clone, Copy)]
enum Float {
    F32,
    F16,
    BF16,
}

impl Float {
    fn width(self) -> usize {
        match self {
            Float::F32 => 4,
            Float::F16 | Float::BF16 => 2,
        }
    }

    /// The value stored in `raw` (of [`Float::width`] bytes) when it is NaN or an infinity.
    fn non_finite(self, raw: &[u8]) -> Option<f32> {
        /// The value of type `T` stored in the first `N` bytes of `raw`, when it is not finite.
        fn read<T: FloatBits<Raw = [u8; N]>, const N: usize>(raw: &[u8]) -> Option<f32> {
            let v = T::from_le(*raw.first_chunk::<N>()?);
            v.non_finite().then(|| v.to_f32())
        }
        match self {
            Float::F32 => read::<f32, 4>(raw),
            Float::F16 => read::<f16, 2>(raw),
            Float::BF16 => read::<bf16, 2>(raw),
        }
    }
}

/// The float fields of one block of `dtype`: (byte offset in the block, kind, name as ggml
/// spells it). Layouts as ggml (and candle's `k_quants`) define them.
fn block_fields(dtype: GgmlDType) -> &'static [(usize, Float, &'static str)] {
    use Float::{F16 as H, F32 as S};
    match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q8_0 => &[(0, H, "d")],
        GgmlDType::Q4_1 | GgmlDType::Q5_1 => &[(0, H, "d"), (2, H, "m")],
        GgmlDType::Q8_1 => &[(0, H, "d"), (2, H, "s")],
        GgmlDType::Q2K => &[(80, H, "d"), (82, H, "dmin")],
        GgmlDType::Q3K => &[(108, H, "d")],
        GgmlDType::Q4K | GgmlDType::Q5K => &[(0, H, "d"), (2, H, "dmin")],
        GgmlDType::Q6K => &[(208, H, "d")],
        GgmlDType::Q8K => &[(0, S, "d")],
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => &[],
    }
}

/// The first NaN or infinity stored in `bytes`, the data of a tensor of `dtype` (a whole number
/// of values or blocks): where it lies (`index I`, or `the scale d of block B (values A..E)`)
/// and its value.
pub(super) fn first_non_finite(dtype: GgmlDType, bytes: &[u8]) -> Option<(String, f32)> {
    let float = match dtype {
        GgmlDType::F32 => Some(Float::F32),
        GgmlDType::F16 => Some(Float::F16),
        GgmlDType::BF16 => Some(Float::BF16),
        _ => None,
    };
    if let Some(float) = float {
        // The workspace's one scan: blocks found clean by a branch-free test are skipped.
        let bad = match float {
            Float::F32 => first_non_finite_stored::<f32>(bytes.as_chunks::<4>().0),
            Float::F16 => first_non_finite_stored::<f16>(bytes.as_chunks::<2>().0),
            Float::BF16 => first_non_finite_stored::<bf16>(bytes.as_chunks::<2>().0),
        }?;
        return Some((format!("index {}", bad.index), bad.value));
    }
    let fields = block_fields(dtype);
    let (size, per_block) = (dtype.type_size(), dtype.block_size());
    bytes.chunks_exact(size).enumerate().find_map(|(b, block)| {
        fields.iter().find_map(|&(at, float, name)| {
            let value = float.non_finite(&block[at..at + float.width()])?;
            let values = b * per_block..(b + 1) * per_block;
            Some((
                format!("the scale `{name}` of block {b} (values {values:?})"),
                value,
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rotary::finite::BLOCK;

    #[test]
    fn every_half_precision_bit_pattern_agrees_with_is_finite() {
        for bits in 0..=u16::MAX {
            let raw = bits.to_le_bytes();
            let h = f16::from_bits(bits).to_f32();
            assert_eq!(Float::F16.non_finite(&raw).is_some(), !h.is_finite());
            let b = bf16::from_bits(bits).to_f32();
            assert_eq!(Float::BF16.non_finite(&raw).is_some(), !b.is_finite());
        }
        for v in [
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
            1e-45,
            f32::NAN,
            -f32::INFINITY,
        ] {
            let found = Float::F32.non_finite(&v.to_le_bytes()).is_some();
            assert_eq!(found, !v.is_finite(), "{v}");
        }
    }

    #[test]
    fn float_tensors_name_the_first_bad_index() {
        let mut values = vec![1.5f32; 9];
        assert_eq!(first_non_finite(GgmlDType::F32, &f32_bytes(&values)), None);
        values[7] = f32::NEG_INFINITY;
        values[8] = f32::NAN;
        let (place, value) = first_non_finite(GgmlDType::F32, &f32_bytes(&values)).unwrap();
        assert_eq!((place.as_str(), value), ("index 7", f32::NEG_INFINITY));
        for at in [BLOCK - 1, BLOCK, 2 * BLOCK + 3] {
            let mut values = vec![-2.5f32; 3 * BLOCK];
            values[at] = f32::INFINITY;
            let (place, _) = first_non_finite(GgmlDType::F32, &f32_bytes(&values)).unwrap();
            assert_eq!(place, format!("index {at}"));
        }
        let halves: Vec<u8> = [1.0, 2.0, f32::NAN]
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let (place, value) = first_non_finite(GgmlDType::F16, &halves).unwrap();
        assert!(place == "index 2" && value.is_nan());
    }

    #[test]
    fn every_block_type_is_checked_at_each_of_its_scales() {
        let types = [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q8_1,
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
            GgmlDType::Q8K,
        ];
        for dtype in types {
            let size = dtype.type_size();
            // Three blocks of 0xff bytes but zero (finite) scales: the integers are not read.
            let mut bytes = vec![0xffu8; 3 * size];
            for b in 0..3 {
                for &(at, float, _) in block_fields(dtype) {
                    bytes[b * size + at..b * size + at + float.width()].fill(0);
                }
            }
            assert_eq!(first_non_finite(dtype, &bytes), None, "{dtype:?}");
            for &(at, float, name) in block_fields(dtype) {
                let mut bad = bytes.clone();
                let nan: &[u8] = match float {
                    Float::F32 => &[0, 0, 0xc0, 0x7f],
                    _ => &[0, 0x7e],
                };
                bad[2 * size + at..2 * size + at + float.width()].copy_from_slice(nan);
                let (place, value) = first_non_finite(dtype, &bad).unwrap();
                let n = dtype.block_size();
                let want = format!(
                    "the scale `{name}` of block 2 (values {}..{})",
                    2 * n,
                    3 * n
                );
                assert_eq!(place, want, "{dtype:?}");
                assert!(value.is_nan(), "{dtype:?}");
            }
        }
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}
