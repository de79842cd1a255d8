//! Activations kept by a training op for the products that read them, written once by the
//! pass that makes them, and the three products of a dense layer's training step on them:
//!
//! ```text
//! forward   y = x W^T              x: the left operand, by rows        W [out, in]
//! backward  dx = dy W              dy: the left operand, by rows
//!           dW = dy^T x            dy^T: the left operand, x: the right one, k = the rows
//! ```
//!
//! With f32 products an activation is its f32 rows. With bf16 products it is rounded once, by
//! its producer, into the two layouts its products read (see [`crate::cpu::bf16`]): rows of
//! pair words (pairs along the row, for `x W^T` and `dy W`) and pair words along the rows in
//! panels (for `dW = dy^T x`: panels of `MR` for the gradient `dy`, of `NR` for the input
//! `x`), so that no product converts or packs it again. The weights are packed once per step
//! ([`super::kept_weight`]).
//! The buffers are taken from and handed back to [`recycle`]'s shelves, so a step reuses the
//! last step's memory and nothing is zeroed that the producer writes anyway.

use rayon::prelude::*;

use super::bf16::{pack_pairs_into, pack_rows_into, packed_len, Packed, PackedA, PackedB, MR, NR};
use super::mat::{Dst, Mat, SharedOut};
use super::policy::SUM_ROWS;
use super::precision::Precision;
use super::product::{product, product_prepacked};
use super::recycle::{self, Lent};
use super::rows::written_whole;

/// Which operand of a weight's gradient `dW = dy^T x` an activation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// `dy`, whose transpose is the left operand.
    Gradient,
    /// `x`, the right operand.
    Input,
}

/// An activation `[rows, width]` kept for its products (see the module doc).
pub(crate) enum Kept {
    /// f32 rows.
    F32 {
        /// The rows, row-major.
        data: Lent<f32>,
        /// The row width.
        width: usize,
    },
    /// bf16 words in the two layouts its products read.
    Bf16 {
        /// Rows of pair words, padded to panels of `MR` rows.
        rows_words: Lent<u32>,
        /// Pairs of rows in panels of `MR` (`Gradient`) or `NR` (`Input`) columns.
        pair_words: Lent<u32>,
        /// The rows.
        rows: usize,
        /// The row width.
        width: usize,
    },
}

impl Kept {
    /// Builds `rows` rows of `width` values, row `i` written by `f(i, row, sums)` (every
    /// element; `row` holds stale values before), in blocks of [`SUM_ROWS`] rows on the
    /// threads, each block adding into its own `count * width` partial sums, added in order
    /// at the end (the same sums on any thread count). Kept as `precision`'s products read
    /// it, on `side` of a weight gradient. Returns the activation and the sums.
    pub(crate) fn build(
        (rows, width): (usize, usize),
        side: Side,
        precision: Precision,
        count: usize,
        f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
    ) -> (Kept, Vec<f32>) {
        let n = count * width;
        let w = width.max(1);
        let (kept, partials): (Kept, Vec<Vec<f32>>) = match precision.bf16_kernel() {
            None => {
                let mut data = recycle::take(rows * width);
                let partials = data
                    .par_chunks_mut(SUM_ROWS * w)
                    .enumerate()
                    .map(|(b, block)| {
                        let mut sums = vec![0f32; n];
                        for (j, row) in block.chunks_exact_mut(w).enumerate() {
                            f(b * SUM_ROWS + j, row, &mut sums);
                        }
                        sums
                    })
                    .collect();
                (
                    Kept::F32 {
                        data: Lent::new(data),
                        width,
                    },
                    partials,
                )
            }
            Some(_) => {
                let panel = match side {
                    Side::Gradient => MR,
                    Side::Input => NR,
                };
                let mut rows_words = recycle::take(packed_len(rows, width, MR));
                let mut pair_words = recycle::take(packed_len(width, rows, panel));
                // The rows past the last, up to a whole panel of MR, are zeros; the passes
                // below write every other word.
                rows_words[rows * width.div_ceil(2)..].fill(0);
                let (by_rows, by_pairs) = (
                    SharedOut::new(&mut rows_words),
                    SharedOut::new(&mut pair_words),
                );
                let partials = (0..rows.div_ceil(SUM_ROWS))
                    .into_par_iter()
                    .map_init(Vec::new, |block: &mut Vec<f32>, b| {
                        let first = b * SUM_ROWS;
                        block.resize((rows - first).min(SUM_ROWS) * width, 0.0);
                        let mut sums = vec![0f32; n];
                        for (j, row) in block.chunks_exact_mut(w).enumerate() {
                            f(first + j, row, &mut sums);
                        }
                        // Blocks of SUM_ROWS (even) rows: each task writes its own rows and
                        // its own pairs of rows.
                        pack_rows_into(block, width, first, by_rows);
                        pack_pairs_into(block, (width, rows), first, panel, by_pairs);
                        sums
                    })
                    .collect();
                let kept = Kept::Bf16 {
                    rows_words: Lent::new(rows_words),
                    pair_words: Lent::new(pair_words),
                    rows,
                    width,
                };
                (kept, partials)
            }
        };
        let mut total = vec![0f32; n];
        for p in partials {
            total.iter_mut().zip(p).for_each(|(s, v)| *s += v);
        }
        (kept, total)
    }

    /// `(rows, width)`.
    fn dims(&self) -> (usize, usize) {
        match self {
            Kept::F32 { data, width } => (data.len() / (*width).max(1), *width),
            Kept::Bf16 { rows, width, .. } => (*rows, *width),
        }
    }

    /// `dst = (accumulate ? dst : 0) + self w^T` for `w` `[out, width]` (row-major), `dst`
    /// `[rows, out]`: a dense layer's forward. With bf16 products `w^T` is read as `packed`
    /// (its words packed once for the step, [`super::kept_weight::KeptWeight::forward`]), or
    /// packed now from `w` without it (the reference the packed-once path is tested against).
    ///
    /// # Errors
    /// Sizes that do not fit; the products' errors.
    pub(crate) fn times_wt(
        &self,
        (w, packed): (&[f32], Option<Packed<'_>>),
        out: usize,
        dst: &mut [f32],
        accumulate: bool,
    ) -> candle_core::Result<()> {
        let (rows, width) = self.dims();
        let wt = Mat::rows(w, width).t();
        match self {
            Kept::F32 { data, .. } => product(
                (rows, out, width),
                Dst::Slice(dst),
                (0, out),
                accumulate,
                Mat::rows(data, width),
                wt,
                1.0,
                true,
                Precision::F32,
            ),
            Kept::Bf16 { rows_words, .. } => {
                check_weight(w, out * width)?;
                let a = packed_a(rows_words, rows, width, true)?;
                with_packed(packed, wt, (width, out), |b| {
                    product_prepacked(Dst::Slice(dst), (0, out), accumulate, (a, b), 1.0, true)
                })
            }
        }
    }

    /// `dst = self w` for `w` `[width, inner]` (row-major), `dst` `[rows, inner]`: a dense
    /// layer's input gradient, `self` the output's gradient. With bf16 products `w` is read as
    /// `packed` ([`super::kept_weight::KeptWeight::backward`]), or packed now without it (the
    /// reference).
    ///
    /// # Errors
    /// Sizes that do not fit; the products' errors.
    pub(crate) fn times_w(
        &self,
        w: (&[f32], Option<Packed<'_>>),
        inner: usize,
        dst: &mut [f32],
    ) -> candle_core::Result<()> {
        self.times_w_onto(w, inner, dst, false)
    }

    /// `self w` as [`Kept::times_w`], in a new buffer that the product writes whole, never
    /// zeroed first (one handed on to candle, an input's gradient).
    ///
    /// # Errors
    /// As [`Kept::times_w`].
    pub(crate) fn times_w_new(
        &self,
        w: (&[f32], Option<Packed<'_>>),
        inner: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let (rows, _) = self.dims();
        // SAFETY: without accumulation the product writes every element of its `rows x inner`
        // destination and reads none (the bf16 kernel stores each tile, gemm reads no
        // destination it is told not to).
        unsafe { written_whole(rows * inner, |dst| self.times_w_into(w, inner, dst, false)) }
    }

    /// `dst = (accumulate ? dst : 0) + self w`, as [`Kept::times_w`]: an input gradient added
    /// onto the gradient another path already wrote (a residual's).
    ///
    /// # Errors
    /// As [`Kept::times_w`].
    pub(crate) fn times_w_onto(
        &self,
        w: (&[f32], Option<Packed<'_>>),
        inner: usize,
        dst: &mut [f32],
        accumulate: bool,
    ) -> candle_core::Result<()> {
        self.times_w_into(w, inner, Dst::Slice(dst), accumulate)
    }

    /// [`Kept::times_w_onto`] into any destination.
    fn times_w_into(
        &self,
        (w, packed): (&[f32], Option<Packed<'_>>),
        inner: usize,
        dst: Dst<'_>,
        accumulate: bool,
    ) -> candle_core::Result<()> {
        let (rows, width) = self.dims();
        let wm = Mat::rows(w, inner);
        match self {
            Kept::F32 { data, .. } => product(
                (rows, inner, width),
                dst,
                (0, inner),
                accumulate,
                Mat::rows(data, width),
                wm,
                1.0,
                true,
                Precision::F32,
            ),
            Kept::Bf16 { rows_words, .. } => {
                check_weight(w, width * inner)?;
                let a = packed_a(rows_words, rows, width, true)?;
                with_packed(packed, wm, (width, inner), |b| {
                    product_prepacked(dst, (0, inner), accumulate, (a, b), 1.0, true)
                })
            }
        }
    }

    /// `dst[offset..]` = `self^T x` (`[width, x's width]`, row-major from `offset`): a dense
    /// layer's weight gradient, `self` the output's gradient (kept as [`Side::Gradient`]) and
    /// `x` the input (kept as [`Side::Input`]), both over the same rows.
    ///
    /// # Errors
    /// Rows that differ, sides or precisions that do not match; the products' errors.
    pub(crate) fn t_times(
        &self,
        x: &Kept,
        dst: &mut [f32],
        offset: usize,
    ) -> candle_core::Result<()> {
        let ((rows, out), (x_rows, inp)) = (self.dims(), x.dims());
        if rows != x_rows {
            return Err(candle_core::Error::Msg(format!(
                "weight gradient: {rows} rows of the gradient for {x_rows} of the input"
            )));
        }
        match (self, x) {
            (Kept::F32 { data: dy, .. }, Kept::F32 { data: xs, .. }) => product(
                (out, inp, rows),
                Dst::Slice(dst),
                (offset, inp),
                false,
                Mat::rows(dy, out).t(),
                Mat::rows(xs, inp),
                1.0,
                true,
                Precision::F32,
            ),
            (Kept::Bf16 { pair_words: dy, .. }, Kept::Bf16 { pair_words: xs, .. }) => {
                let a = packed_a(dy, out, rows, false)?;
                let b = Packed::from_words(xs, rows, inp).ok_or_else(|| {
                    candle_core::Error::Msg("weight gradient: the input's words".into())
                })?;
                product_prepacked(Dst::Slice(dst), (offset, inp), false, (a, b), 1.0, true)
            }
            _ => Err(candle_core::Error::Msg(
                "weight gradient: operands kept in different precisions".into(),
            )),
        }
    }
}

/// A weight of `len` elements.
fn check_weight(w: &[f32], len: usize) -> candle_core::Result<()> {
    if w.len() == len {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "dense product: a weight of {} elements, expected {len}",
            w.len()
        )))
    }
}

/// `f` on `packed`, the right operand `b` (`k x n`) packed once, when its sizes are `b`'s;
/// without it, on `b` packed now.
///
/// # Errors
/// A packed operand of other sizes; `f`'s errors.
fn with_packed(
    packed: Option<Packed<'_>>,
    b: Mat<'_>,
    (k, n): (usize, usize),
    f: impl FnOnce(Packed<'_>) -> candle_core::Result<()>,
) -> candle_core::Result<()> {
    match packed {
        Some(p) if (p.k(), p.n()) == (k, n) => f(p),
        Some(p) => Err(candle_core::Error::Msg(format!(
            "dense product: a weight packed as {}x{}, expected {k}x{n}",
            p.k(),
            p.n()
        ))),
        None => f(PackedB::new(b, k, n, true).view()),
    }
}

/// `words` as a packed `m x k` left operand (see [`PackedA::from_words`]).
fn packed_a(words: &[u32], m: usize, k: usize, rows: bool) -> candle_core::Result<PackedA<'_>> {
    PackedA::from_words(words, m, k, rows)
        .ok_or_else(|| candle_core::Error::Msg(format!("packed operand: {m}x{k} words")))
}
