//! The portable reference kernel, and the one-pair step the SIMD kernels use for their tails.

use super::Geom;
use crate::element::Element;
use crate::layout::Layout;

/// Rotates one chunk one element at a time (see the module docs of `kernel`).
///
/// # Safety
/// As [`super::ChunkFn`].
pub(crate) unsafe fn rotate_chunk<T: Element>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    let (d, r) = (g.head_dim, g.rotary_dim);
    for row in 0..n_rows {
        let token = row / g.rows_per_token;
        // SAFETY: the caller guarantees these ranges are in bounds (see `ChunkFn`).
        let (x, y, c, s) = unsafe {
            (
                src.add(row * d),
                dst.add(row * d),
                cos.add(token * r),
                sin.add(token * r),
            )
        };
        for i in 0..r / 2 {
            let (a, b) = g.layout.pair(i, r);
            // SAFETY: a, b < r <= d, in bounds of the row and of the table row.
            unsafe { rotate_pair(x, y, c, s, a, b, g.inverse) };
        }
        if !std::ptr::eq(x, y) {
            // SAFETY: distinct, non-overlapping rows of d elements (see `ChunkFn`).
            unsafe { std::ptr::copy_nonoverlapping(x.add(r), y.add(r), d - r) };
        }
    }
}

/// Rotates pairs `pairs` of one row of `rotary_dim` rotated coordinates (the tails of the SIMD
/// kernels).
///
/// # Safety
/// As [`rotate_pair`] for every pair `layout.pair(i, rotary_dim)`, `i` in `pairs`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rotate_pairs<T: Element>(
    x: *const T,
    y: *mut T,
    c: *const f32,
    s: *const f32,
    layout: Layout,
    pairs: std::ops::Range<usize>,
    rotary_dim: usize,
    inverse: bool,
) {
    for i in pairs {
        let (a, b) = layout.pair(i, rotary_dim);
        // SAFETY: by the caller's contract.
        unsafe { rotate_pair(x, y, c, s, a, b, inverse) };
    }
}

/// Rotates the pair `(a, b)` of one row: `y[j] = x[j] C[j] +- x[partner(j)] S[j]` for
/// `j = a, b`, two products and one sum each, in f32.
///
/// # Safety
/// `x`, `y` valid for index `max(a, b)` and either equal or not overlapping; `c`, `s` valid for
/// the same index. Both inputs are read before either output is written, so `x == y` is sound.
#[inline(always)]
unsafe fn rotate_pair<T: Element>(
    x: *const T,
    y: *mut T,
    c: *const f32,
    s: *const f32,
    a: usize,
    b: usize,
    inverse: bool,
) {
    // SAFETY: in bounds by the caller's contract.
    unsafe {
        let (xa, xb) = ((*x.add(a)).to_f32(), (*x.add(b)).to_f32());
        let (ya, yb) = if inverse {
            (
                xa * *c.add(a) - xb * *s.add(a),
                xb * *c.add(b) - xa * *s.add(b),
            )
        } else {
            (
                xa * *c.add(a) + xb * *s.add(a),
                xb * *c.add(b) + xa * *s.add(b),
            )
        };
        *y.add(a) = T::from_f32(ya);
        *y.add(b) = T::from_f32(yb);
    }
}
