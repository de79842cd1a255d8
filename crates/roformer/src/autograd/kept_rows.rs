//! Activations a fused training op keeps for its products ([`Kept`]), made in one pass over f32
//! rows of `width` values:
//!
//! ```text
//! copy     k = x                              (sums: sum_rows x, a bias's gradient)
//! stacked  k = [a | b | c]                    (three row sets side by side; sums as copy)
//! input    k = x                              (f32: the rows given up, no copy)
//! gelu     a = gelu(u + b),   u <- gelu'(u + b)   (one erf per element; the slope kept)
//! slope    du = da gelu'(u),   db = sum_rows du
//! ```
//!
//! Each rounds its rows once into the layouts `precision`'s products read.

use crate::autograd::attention::Parts;
use crate::autograd::prenorm::or_zeros;
use crate::cpu::kept::{Kept, Side};
use crate::cpu::mat::SharedOut;
use crate::cpu::math::gelu_erf_with_slope;
use crate::cpu::recycle::{self, Lent};
use crate::cpu::Precision;

/// `x` (rows of `width`) kept on `side` of a weight gradient, and its column sums when
/// `sums` (empty otherwise).
pub(crate) fn copy(
    x: &[f32],
    width: usize,
    side: Side,
    precision: Precision,
    sums: bool,
) -> (Kept, Vec<f32>) {
    let rows = x.len() / width.max(1);
    Kept::build(
        (rows, width),
        side,
        precision,
        usize::from(sums),
        |i, row, s| {
            row.copy_from_slice(&x[i * width..][..width]);
            s.iter_mut().zip(row.iter()).for_each(|(s, v)| *s += v);
        },
    )
}

/// `[a | b | c]` (each rows of `width`, given up: q, k and v's gradients) kept on `side` of a
/// weight gradient as rows of `3 width`, and their column sums when `sums` (empty otherwise);
/// the three handed back ([`recycle`]).
pub(crate) fn stacked(
    (a, b, c): Parts,
    width: usize,
    side: Side,
    precision: Precision,
    sums: bool,
) -> (Kept, Vec<f32>) {
    let rows = a.len() / width.max(1);
    let kept = Kept::build(
        (rows, 3 * width),
        side,
        precision,
        usize::from(sums),
        |i, row, s| {
            for (part, x) in row.chunks_exact_mut(width.max(1)).zip([&a, &b, &c]) {
                part.copy_from_slice(&x[i * width..][..width]);
            }
            s.iter_mut().zip(row.iter()).for_each(|(s, v)| *s += v);
        },
    );
    [a, b, c].into_iter().for_each(recycle::give);
    kept
}

/// `x` (rows of `width`, given up) kept as a dense layer's input: the rows themselves with
/// f32 products, no copy; rounded once with bf16 ones (`x` then handed back, [`recycle`]).
pub(crate) fn input(x: Vec<f32>, width: usize, precision: Precision) -> Kept {
    match precision.bf16_kernel() {
        None => Kept::F32 {
            data: Lent::new(x),
            width,
        },
        Some(_) => {
            let kept = copy(&x, width, Side::Input, precision, false).0;
            recycle::give(x);
            kept
        }
    }
}

/// `a = gelu(u + b)` (erf) kept as a dense layer's input, for `u` (rows of `width`) a dense
/// layer's product and `b` its bias (zeros without one), `u` replaced by the slope
/// `gelu'(u + b)` (the GELU backward's only need of it).
pub(crate) fn gelu(
    u: &mut [f32],
    bias: Option<&[f32]>,
    width: usize,
    precision: Precision,
) -> Kept {
    let rows = u.len() / width.max(1);
    let b = or_zeros(bias, width);
    let slopes = SharedOut::new(u);
    Kept::build((rows, width), Side::Input, precision, 0, |i, row, _| {
        // SAFETY: row i's task alone touches row i of u.
        let u = unsafe { slopes.slice(i * width, width) };
        gelu_erf_with_slope(u, &b, row);
    })
    .0
}

/// `du = da gelu'(u)` kept as a dense layer's output gradient, and `db = sum_rows du`, from
/// the slope rows [`gelu`] left.
pub(crate) fn through_slope(
    da: &[f32],
    slope: &[f32],
    width: usize,
    precision: Precision,
) -> (Kept, Vec<f32>) {
    let rows = da.len() / width.max(1);
    Kept::build(
        (rows, width),
        Side::Gradient,
        precision,
        1,
        |i, row, sums| {
            let (da, slope) = (&da[i * width..][..width], &slope[i * width..][..width]);
            for ((d, (a, s)), sum) in row
                .iter_mut()
                .zip(da.iter().zip(slope))
                .zip(sums.iter_mut())
            {
                *d = a * s;
                *sum += *d;
            }
        },
    )
}
