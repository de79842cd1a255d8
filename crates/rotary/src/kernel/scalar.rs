//! The portable reference kernel.

use super::Geom;
use crate::element::Element;

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
    let half = r / 2;
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
        for i in 0..half {
            let (a, b) = g.layout.pair(i, r);
            // SAFETY: a, b < r <= d; both values are read before either is written, so the
            // in-place case (x == y) is sound.
            unsafe {
                let (xa, xb) = ((*x.add(a)).to_f32(), (*x.add(b)).to_f32());
                let (ya, yb) = if g.inverse {
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
        if !std::ptr::eq(x, y) {
            // SAFETY: distinct, non-overlapping rows of d elements (see `ChunkFn`).
            unsafe { std::ptr::copy_nonoverlapping(x.add(r), y.add(r), d - r) };
        }
    }
}
