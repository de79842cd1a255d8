//! AVX-512F kernels: 16 f32 lanes; f16 through the AVX-512F conversions, bf16 by integer
//! shifts and rounding.

use std::arch::x86_64::*;

use half::{bf16, f16};

use super::simd::{self, Simd};
use super::Geom;
use crate::element::Element;

/// The AVX-512F instruction set.
pub(super) struct Avx512;

/// Rounding immediate of the f32 -> f16 conversion: to nearest (ties to even), exceptions
/// suppressed.
const TO_NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_f32(p: *const f32) -> __m512 {
        // SAFETY: `p` is valid for 16 f32 (trait contract); unaligned load.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_f16(p: *const f16) -> __m512 {
        // SAFETY: `p` is valid for 16 f16 = 32 bytes; unaligned load.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_bf16(p: *const bf16) -> __m512 {
        // SAFETY: `p` is valid for 16 bf16 = 32 bytes; unaligned load.
        let bits = unsafe { _mm256_loadu_si256(p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_f32(p: *mut f32, v: __m512) {
        // SAFETY: `p` is valid for 16 f32; unaligned store.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_f16(p: *mut f16, v: __m512) {
        let halves = _mm512_cvtps_ph::<TO_NEAREST>(v);
        // SAFETY: `p` is valid for 16 f16 = 32 bytes; unaligned store.
        unsafe { _mm256_storeu_si256(p.cast(), halves) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_bf16(p: *mut bf16, v: __m512) {
        let bits = _mm512_castps_si512(v);
        // Round to nearest even: add 0x7fff plus the lowest kept bit, then keep the top half.
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, bias));
        // NaN: keep the top half and set the quiet bit, as half::bf16::from_f32 does.
        let magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f80_0000));
        let quiet = _mm512_or_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(0x40));
        let out = _mm512_mask_blend_epi32(nan, rounded, quiet);
        // SAFETY: `p` is valid for 16 bf16 = 32 bytes; unaligned store of the low 16 bits of each
        // lane (all values are below 2^16, so truncation keeps them whole).
        unsafe { _mm256_storeu_si256(p.cast(), _mm512_cvtepi32_epi16(out)) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn swap_pairs(v: __m512) -> __m512 {
        // Within each 128-bit lane, take elements (1, 0, 3, 2).
        _mm512_permute_ps::<0b10_11_00_01>(v)
    }
}

/// The AVX-512F chunk kernel.
///
/// # Safety
/// As [`super::ChunkFn`], and the CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rotate_chunk<T: Element>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    // SAFETY: forwarded contract; this function's target features are `Avx512`'s.
    unsafe { simd::rotate_chunk::<Avx512, T>(src, dst, n_rows, g, cos, sin) }
}
