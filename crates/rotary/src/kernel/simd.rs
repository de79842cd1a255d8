//! The chunk kernel written once over a vector instruction set ([`Simd`]).
//!
//! Each instruction set implements [`Simd`] with `#[target_feature]` functions and wraps
//! [`rotate_chunk`] in one `#[target_feature]` entry point. Everything here is
//! `#[inline(always)]`, so the whole loop nest is compiled inside that entry point, where the
//! vector intrinsics inline.
//!
//! Per row, `LANES` coordinates at a time:
//! - interleaved: `y = x * C +- swap_pairs(x) * S` on `x[j..j + LANES]` (partners sit in the same
//!   64-bit pair, so the swap never crosses a vector);
//! - half: `y_a = x_a * C_a +- x_b * S_a`, `y_b = x_b * C_b +- x_a * S_b` on
//!   `x_a = x[j..j + LANES]` and `x_b = x[h + j..h + j + LANES]`, `h = rotary_dim / 2`;
//!
//! and the pairs left over when the count is not a multiple of `LANES` go through the scalar
//! kernel's own pair step, so every coordinate is the same two products and one sum. (That
//! step is a separate, not inlined function: inlined, the compiler vectorises it into the row
//! loop with a dozen extra pointers, which costs every row more than the tail itself.)

use super::scalar::rotate_pairs;
use super::Geom;
use crate::element::{DType, Element};
use crate::layout::Layout;

/// f32 vector arithmetic and storage conversions of one instruction set.
///
/// # Safety
/// Every method requires the instruction set's CPU features; pointers must be valid for
/// `LANES` elements.
pub(super) trait Simd {
    /// A vector of `LANES` f32.
    type V: Copy;
    /// f32 lanes per vector.
    const LANES: usize;

    /// Loads `LANES` f32.
    unsafe fn load_f32(p: *const f32) -> Self::V;
    /// Loads `LANES` f16 and widens them exactly.
    unsafe fn load_f16(p: *const half::f16) -> Self::V;
    /// Loads `LANES` bf16 and widens them exactly (a 16-bit shift).
    unsafe fn load_bf16(p: *const half::bf16) -> Self::V;
    /// Stores `LANES` f32.
    unsafe fn store_f32(p: *mut f32, v: Self::V);
    /// Narrows to f16 as `half::f16::from_f32` does and stores.
    unsafe fn store_f16(p: *mut half::f16, v: Self::V);
    /// Narrows to bf16 as `half::bf16::from_f32` does and stores.
    unsafe fn store_bf16(p: *mut half::bf16, v: Self::V);
    /// Lane-wise `a * b`, rounded once.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise `a + b`.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise `a - b`.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// Swaps lanes `2i` and `2i + 1`.
    unsafe fn swap_pairs(v: Self::V) -> Self::V;
    /// Hints that the cache line holding `p` will be read soon. Never faults: `p` may point
    /// anywhere.
    unsafe fn prefetch(p: *const u8);

    /// Loads `LANES` elements of `T` as f32.
    #[inline(always)]
    unsafe fn load<T: Element>(p: *const T) -> Self::V {
        // SAFETY: `Element` is sealed: `DTYPE` is `F32` only for f32, `F16` only for half::f16
        // and `BF16` only for half::bf16, so each cast names `T` itself.
        unsafe {
            match T::DTYPE {
                DType::F32 => Self::load_f32(p.cast()),
                DType::F16 => Self::load_f16(p.cast()),
                DType::BF16 => Self::load_bf16(p.cast()),
            }
        }
    }

    /// Stores `LANES` f32 as `T`, rounding as [`Element::from_f32`].
    #[inline(always)]
    unsafe fn store<T: Element>(p: *mut T, v: Self::V) {
        // SAFETY: as in `load`, each cast names `T` itself.
        unsafe {
            match T::DTYPE {
                DType::F32 => Self::store_f32(p.cast(), v),
                DType::F16 => Self::store_f16(p.cast(), v),
                DType::BF16 => Self::store_bf16(p.cast(), v),
            }
        }
    }
}

/// The chunk kernel on instruction set `S` (see [`super::ChunkFn`]).
///
/// # Safety
/// As [`super::ChunkFn`], and the CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn rotate_chunk<S: Simd, T: Element>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    // SAFETY: forwarded contract.
    unsafe {
        match (g.layout, g.inverse) {
            (Layout::Interleaved, false) => {
                rows::<S, T, true, false>(src, dst, n_rows, g, cos, sin)
            }
            (Layout::Interleaved, true) => rows::<S, T, true, true>(src, dst, n_rows, g, cos, sin),
            (Layout::Half, false) => rows::<S, T, false, false>(src, dst, n_rows, g, cos, sin),
            (Layout::Half, true) => rows::<S, T, false, true>(src, dst, n_rows, g, cos, sin),
        }
    }
}

/// How far ahead of the row being rotated its source is prefetched. The hardware prefetchers
/// alone leave a core short of memory requests in flight (a core reads about half of what two
/// do); 1 KiB (two f32 rows of 128) measured best on the development machine, farther was
/// worse for f32.
const PREFETCH_BYTES: usize = 1024;

/// Bytes per prefetch.
const CACHE_LINE: usize = 64;

/// The row loop for one layout and direction; each row's source `PREFETCH_BYTES` ahead is
/// prefetched first.
///
/// # Safety
/// As [`rotate_chunk`].
#[inline(always)]
unsafe fn rows<S: Simd, T: Element, const INTERLEAVED: bool, const INVERSE: bool>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    let (d, r, per_token) = (g.head_dim, g.rotary_dim, g.rows_per_token.max(1));
    let in_place = std::ptr::eq(src, dst);
    let row_bytes = d * std::mem::size_of::<T>();
    for token in 0..n_rows / per_token {
        // SAFETY: the table holds `n_rows / rows_per_token` rows of `r` values.
        let (c, s) = unsafe { (cos.add(token * r), sin.add(token * r)) };
        for row in token * per_token..(token + 1) * per_token {
            // SAFETY: `row < n_rows`; rows are `d` elements; the tail copy stays inside the row
            // and only runs out of place, where `src` and `dst` do not overlap. Prefetches take
            // any address (wrapping arithmetic, never dereferenced).
            unsafe {
                let (x, y) = (src.add(row * d), dst.add(row * d));
                let ahead = x.cast::<u8>().wrapping_add(PREFETCH_BYTES);
                let mut line = 0;
                while line < row_bytes {
                    S::prefetch(ahead.wrapping_add(line));
                    line += CACHE_LINE;
                }
                if INTERLEAVED {
                    interleaved_row::<S, T, INVERSE>(x, y, c, s, r);
                } else {
                    half_row::<S, T, INVERSE>(x, y, c, s, r);
                }
                if !in_place && r < d {
                    std::ptr::copy_nonoverlapping(x.add(r), y.add(r), d - r);
                }
            }
        }
    }
}

/// `x * c +- p * s`: two products, one sum.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
unsafe fn combine<S: Simd, const INVERSE: bool>(x: S::V, c: S::V, p: S::V, s: S::V) -> S::V {
    // SAFETY: the CPU supports `S`.
    unsafe {
        let (xc, ps) = (S::mul(x, c), S::mul(p, s));
        if INVERSE {
            S::sub(xc, ps)
        } else {
            S::add(xc, ps)
        }
    }
}

/// One row, interleaved pairs `(2i, 2i + 1)`.
///
/// # Safety
/// `x`, `y` valid for `r` elements, equal or disjoint; `c`, `s` valid for `r` values; `r` even.
#[inline(always)]
unsafe fn interleaved_row<S: Simd, T: Element, const INVERSE: bool>(
    x: *const T,
    y: *mut T,
    c: *const f32,
    s: *const f32,
    r: usize,
) {
    let body = r - r % S::LANES;
    let mut j = 0;
    while j < body {
        // SAFETY: `j + LANES <= r`; the vector is read before it is written (in place).
        unsafe {
            let v = S::load(x.add(j));
            let p = S::swap_pairs(v);
            let out = combine::<S, INVERSE>(v, S::load_f32(c.add(j)), p, S::load_f32(s.add(j)));
            S::store(y.add(j), out);
        }
        j += S::LANES;
    }
    if body < r {
        // SAFETY: `body` is even (LANES is), so the rest is whole pairs below `r`.
        unsafe { rotate_pairs(x, y, c, s, Layout::Interleaved, body / 2..r / 2, r, INVERSE) };
    }
}

/// One row, half pairs `(i, i + r/2)`.
///
/// # Safety
/// As [`interleaved_row`].
#[inline(always)]
unsafe fn half_row<S: Simd, T: Element, const INVERSE: bool>(
    x: *const T,
    y: *mut T,
    c: *const f32,
    s: *const f32,
    r: usize,
) {
    let h = r / 2;
    let body = h - h % S::LANES;
    let mut j = 0;
    while j < body {
        // SAFETY: `j + LANES <= h`, so both halves are in bounds; both inputs are read before
        // either output is written (in place).
        unsafe {
            let (a, b) = (S::load(x.add(j)), S::load(x.add(h + j)));
            let ya = combine::<S, INVERSE>(a, S::load_f32(c.add(j)), b, S::load_f32(s.add(j)));
            let (cb, sb) = (S::load_f32(c.add(h + j)), S::load_f32(s.add(h + j)));
            let yb = combine::<S, INVERSE>(b, cb, a, sb);
            S::store(y.add(j), ya);
            S::store(y.add(h + j), yb);
        }
        j += S::LANES;
    }
    if body < h {
        // SAFETY: pairs `(i, i + h)` with `i < h` are below `r`.
        unsafe { rotate_pairs(x, y, c, s, Layout::Half, body..h, r, INVERSE) };
    }
}
