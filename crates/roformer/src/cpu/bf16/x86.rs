//! The AVX512-BF16 micro-kernel: an `MR x NR` tile of C in 24 registers, one `vdpbf16ps`
//! per (row, vector) and pair of `k`.

use std::arch::x86_64::*;

use super::{MR, NR};

/// See [`super::MicroKernel`].
///
/// # Safety
/// As [`super::MicroKernel`], on a CPU with AVX-512F and AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn micro_avx512bf16(
    pairs: usize,
    (a, a_ps, a_rs): (*const u32, usize, usize),
    b: *const u32,
    c: *mut f32,
    rs: usize,
    rows: usize,
    cols: usize,
    alpha: f32,
    accumulate: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..pairs {
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR).cast()));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16).cast()));
        let ap = a.add(p * a_ps);
        for (r, acc) in acc.iter_mut().enumerate() {
            let w: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r * a_rs) as i32));
            acc[0] = _mm512_dpbf16_ps(acc[0], w, b0);
            acc[1] = _mm512_dpbf16_ps(acc[1], w, b1);
        }
    }
    let masks = [lane_mask(cols), lane_mask(cols.saturating_sub(16))];
    let alpha = _mm512_set1_ps(alpha);
    for (r, acc) in acc.iter().enumerate().take(rows) {
        let row = c.add(r * rs);
        for (v, (&acc, &mask)) in acc.iter().zip(&masks).enumerate() {
            if mask == 0 {
                continue;
            }
            let out = row.add(16 * v);
            let mut y = _mm512_mul_ps(acc, alpha);
            if accumulate {
                y = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), y);
            }
            _mm512_mask_storeu_ps(out, mask, y);
        }
    }
}

/// `words[p] = (bf16 row[2p], bf16 row[2p + 1])` (the last `hi` 0 when `row` is odd), 32
/// values at a time by `vcvtne2ps2bf16` (to nearest, ties to even): the words of
/// `pack::row_words` for every normal value, infinity and NaN (made quiet the same way); a
/// subnormal becomes a zero of its sign (the instruction reads subnormals as zeros).
///
/// # Safety
/// A CPU with AVX-512F and AVX512-BF16; `words` holds `ceil(row.len() / 2)` words.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn row_words_avx512bf16(row: &[f32], words: &mut [u32]) {
    let n = row.len();
    for i in (0..n).step_by(32) {
        let left = n - i;
        // Masked lanes are not read (the pointers past the row are never dereferenced).
        let lo = _mm512_maskz_loadu_ps(lane_mask(left), row.as_ptr().wrapping_add(i));
        let hi = _mm512_maskz_loadu_ps(
            lane_mask(left.saturating_sub(16)),
            row.as_ptr().wrapping_add(i + 16),
        );
        let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        let count = left.min(32).div_ceil(2);
        _mm512_mask_storeu_epi32(
            words.as_mut_ptr().add(i / 2).cast(),
            lane_mask(count),
            packed,
        );
    }
}

/// The mask of the first `n` of 16 lanes.
#[inline(always)]
fn lane_mask(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}
