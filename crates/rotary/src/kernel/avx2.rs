//! AVX2 kernels: 8 f32 lanes; f16 through F16C, bf16 by integer shifts and rounding.

use std::arch::x86_64::*;

use half::{bf16, f16};

use super::simd::{self, Simd};
use super::Geom;
use crate::element::Element;

/// The AVX2 + F16C instruction set.
pub(super) struct Avx2;

/// Rounding immediate of the F16C f32 -> f16 conversion: to nearest, ties to even.
const TO_NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT;

impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load_f32(p: *const f32) -> __m256 {
        // SAFETY: `p` is valid for 8 f32 (trait contract); unaligned load.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        // SAFETY: `p` is valid for 8 f16 = 16 bytes; unaligned load.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load_bf16(p: *const bf16) -> __m256 {
        // SAFETY: `p` is valid for 8 bf16 = 16 bytes; unaligned load.
        let bits = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)))
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn store_f32(p: *mut f32, v: __m256) {
        // SAFETY: `p` is valid for 8 f32; unaligned store.
        unsafe { _mm256_storeu_ps(p, v) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn store_f16(p: *mut f16, v: __m256) {
        let halves = _mm256_cvtps_ph::<TO_NEAREST>(v);
        // SAFETY: `p` is valid for 8 f16 = 16 bytes; unaligned store.
        unsafe { _mm_storeu_si128(p.cast(), halves) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn store_bf16(p: *mut bf16, v: __m256) {
        let bits = _mm256_castps_si256(v);
        // Round to nearest even: add 0x7fff plus the lowest kept bit, then keep the top half.
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
        let bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(bits, bias));
        // NaN: keep the top half and set the quiet bit, as half::bf16::from_f32 does.
        let magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff_ffff));
        let nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f80_0000));
        let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(0x40));
        let out = _mm256_blendv_epi8(rounded, quiet, nan);
        // Every lane is below 2^16, so the unsigned saturating pack keeps it whole.
        let packed = _mm_packus_epi32(
            _mm256_castsi256_si128(out),
            _mm256_extracti128_si256::<1>(out),
        );
        // SAFETY: `p` is valid for 8 bf16 = 16 bytes; unaligned store.
        unsafe { _mm_storeu_si128(p.cast(), packed) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn swap_pairs(v: __m256) -> __m256 {
        // Within each 128-bit lane, take elements (1, 0, 3, 2).
        _mm256_permute_ps::<0b10_11_00_01>(v)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prefetch(p: *const u8) {
        // A hint: never faults, whatever `p` is.
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
}

/// The AVX2 chunk kernel.
///
/// # Safety
/// As [`super::ChunkFn`], and the CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn rotate_chunk<T: Element>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    // SAFETY: forwarded contract; this function's target features are `Avx2`'s.
    unsafe { simd::rotate_chunk::<Avx2, T>(src, dst, n_rows, g, cos, sin) }
}
