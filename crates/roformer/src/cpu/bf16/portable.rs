//! The micro-kernel one lane at a time: the arithmetic of `vdpbf16ps` in plain Rust.

use super::NR;

/// The f32 value of the bf16 in the low (`shift = 0`) or high (`shift = 16`) half of a word.
#[inline(always)]
fn half(word: u32, shift: u32) -> f32 {
    f32::from_bits(((word >> shift) & 0xffff) << 16)
}

/// See [`super::MicroKernel`]: per lane, `acc += a_hi * b_hi` then `acc += a_lo * b_lo` (each
/// product exact in f32, each sum rounded), then `C = (accumulate ? C : 0) + alpha * acc`.
///
/// # Safety
/// As [`super::MicroKernel`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn micro(
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
    let b = std::slice::from_raw_parts(b, pairs * NR);
    for r in 0..rows {
        for j in 0..cols {
            let mut acc = 0f32;
            for p in 0..pairs {
                let (wa, wb) = (*a.add(p * a_ps + r * a_rs), b[p * NR + j]);
                acc += half(wa, 16) * half(wb, 16);
                acc += half(wa, 0) * half(wb, 0);
            }
            let out = c.add(r * rs + j);
            *out = if accumulate {
                *out + alpha * acc
            } else {
                alpha * acc
            };
        }
    }
}
