//! AVX-512 (F + BW) kernels: 16 f32 lanes; f16 through the AVX-512F conversions, bf16 by
//! 16-bit word permutes (BW) and integer rounding.

use std::arch::x86_64::*;

use half::{bf16, f16};

use super::simd::{self, Simd};
use super::Geom;
use crate::element::Element;

/// The AVX-512F + AVX-512BW instruction set.
pub(super) struct Avx512;

/// Rounding immediate of the f32 -> f16 conversion: to nearest (ties to even), exceptions
/// suppressed.
const TO_NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// The odd 16-bit words of a 512-bit vector: the high halves of its 32-bit lanes.
const ODD_WORDS: __mmask32 = 0xaaaa_aaaa;

/// Word permutation that moves word `i` to word `2i + 1` (`i < 16`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn widen_index() -> __m512i {
    // Lane i holds (i << 16) | i: both of its words select word i.
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    _mm512_or_si512(lanes, _mm512_slli_epi32::<16>(lanes))
}

/// Word permutation that moves word `2i + 1` to word `i` (`i < 16`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn narrow_index() -> __m512i {
    // Word i (i < 16) selects word 2i + 1: lane j holds words 2j and 2j + 1, i.e. 4j + 1 and
    // 4j + 3; the upper 256 bits are not stored.
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0);
    let four = _mm512_slli_epi32::<2>(lanes);
    let low = _mm512_add_epi32(four, _mm512_set1_epi32(1));
    let high = _mm512_add_epi32(four, _mm512_set1_epi32(3));
    _mm512_or_si512(low, _mm512_slli_epi32::<16>(high))
}

impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load_f32(p: *const f32) -> __m512 {
        // SAFETY: `p` is valid for 16 f32 (trait contract); unaligned load.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load_f16(p: *const f16) -> __m512 {
        // SAFETY: `p` is valid for 16 f16 = 32 bytes; unaligned load.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load_bf16(p: *const bf16) -> __m512 {
        // SAFETY: `p` is valid for 16 bf16 = 32 bytes; unaligned load.
        let bits = _mm512_castsi256_si512(unsafe { _mm256_loadu_si256(p.cast()) });
        // Word 2i + 1 (the high half of lane i) takes bf16 i; the masked-off even words are 0.
        _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(
            ODD_WORDS,
            widen_index(),
            bits,
        ))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store_f32(p: *mut f32, v: __m512) {
        // SAFETY: `p` is valid for 16 f32; unaligned store.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store_f16(p: *mut f16, v: __m512) {
        let halves = _mm512_cvtps_ph::<TO_NEAREST>(v);
        // SAFETY: `p` is valid for 16 f16 = 32 bytes; unaligned store.
        unsafe { _mm256_storeu_si256(p.cast(), halves) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store_bf16(p: *mut bf16, v: __m512) {
        let bits = _mm512_castps_si512(v);
        // Round to nearest even: add 0x7fff, plus 1 where the lowest kept bit (bit 16) is set.
        let odd = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x1_0000));
        let biased = _mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff));
        let rounded = _mm512_mask_add_epi32(biased, odd, biased, _mm512_set1_epi32(1));
        // NaN: keep the top half and set the quiet bit, as half::bf16::from_f32 does.
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        let out = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x0040_0000));
        // The high half of each lane, in order, into the low 256 bits.
        let words = _mm512_permutexvar_epi16(narrow_index(), out);
        // SAFETY: `p` is valid for 16 bf16 = 32 bytes; unaligned store.
        unsafe { _mm256_storeu_si256(p.cast(), _mm512_castsi512_si256(words)) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn swap_pairs(v: __m512) -> __m512 {
        // Within each 128-bit lane, take elements (1, 0, 3, 2).
        _mm512_permute_ps::<0b10_11_00_01>(v)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn prefetch(p: *const u8) {
        // A hint: never faults, whatever `p` is.
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
}

/// The AVX-512F chunk kernel.
///
/// # Safety
/// As [`super::ChunkFn`], and the CPU supports AVX-512F.
#[target_feature(enable = "avx512f,avx512bw")]
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
