//! Rounding to bf16 and packing an operand into panels of pair words.

use rayon::prelude::*;

use crate::cpu::mat::{Mat, SharedOut};
use crate::cpu::math::multiversion;
use crate::cpu::policy::{column_pack_tasks, pack_group};

/// `x` rounded to bf16, to nearest with ties to even, as the upper 16 bits of an f32; a NaN
/// stays a (quiet) NaN. Branch-free, so that loops over it vectorise.
#[inline(always)]
pub(crate) fn round_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet_nan = (bits >> 16) | 0x40;
    let is_nan = (bits & 0x7fff_ffff) > 0x7f80_0000;
    (if is_nan { quiet_nan } else { rounded }) as u16
}

/// The pair word of two f32 values: `lo` in the low half, `hi` in the high half.
#[inline(always)]
fn word(lo: f32, hi: f32) -> u32 {
    u32::from(round_bf16(lo)) | (u32::from(round_bf16(hi)) << 16)
}

multiversion! {
    /// `words[p] = word(row[2p], row[2p + 1])`, the last `hi` 0 when `row` is odd.
    fn row_words(row: &[f32], words: &mut [u32]) {
        let (full, odd) = row.split_at(row.len() & !1);
        for (w, v) in words.iter_mut().zip(full.chunks_exact(2)) {
            *w = word(v[0], v[1]);
        }
        if let ([last], Some(w)) = (odd, words.get_mut(full.len() / 2)) {
            *w = word(*last, 0.0);
        }
    }
}

/// Packs `x` (`count x k`, element `(i, kk)`) into panels of `width` rows: panel `q`, pair `p`,
/// lane `w` holds the word of `x(q * width + w, 2p)` and `x(q * width + w, 2p + 1)`; zeros past
/// `count` and past `k`. `ceil(count / width) * ceil(k / 2) * width` words, panels on the
/// threads when `parallel`, into `out` (every word written). The caller has checked that `x`
/// fits `count x k`.
///
/// With `rows_allowed`, when `x`'s rows are contiguous (`x.cs == 1`), each panel is instead
/// stored as its `width` rows of `ceil(k / 2)` words (word `(p, w)` at `w * pairs + p`), which
/// skips the interleaving; the return value says which layout was written (`true`: rows).
///
/// # Panics
/// If `out` does not hold [`packed_len`] words.
pub(crate) fn pack_panels(
    x: Mat<'_>,
    (count, k): (usize, usize),
    width: usize,
    (parallel, rows_allowed): (bool, bool),
    out: &mut [u32],
) -> bool {
    let pairs = k.div_ceil(2);
    let panels = count.div_ceil(width);
    assert_eq!(
        out.len(),
        packed_len(count, k, width),
        "packed operand size"
    );
    let rows_layout = rows_allowed && x.cs == 1;
    if pairs == 0 {
        return rows_layout;
    }
    if x.cs != 1 {
        pack_columns(x, (count, k), width, parallel, out);
        return false;
    }
    // Tasks of whole panels: a few per thread on the threads (see `pack_group`), else of
    // about LANES_PER_TASK lanes (the size of the interleaving buffer).
    let group = if parallel {
        pack_group(panels, width, rayon::current_num_threads())
    } else {
        (LANES_PER_TASK / width).max(1)
    };
    let fill = |(g, chunk): (usize, &mut [u32])| {
        let first = g * group;
        let lanes = (count - first * width).min(group * width);
        fill_from_rows(x, (first * width, lanes), k, (width, rows_layout), chunk);
    };
    let chunk = group * pairs * width;
    if parallel && panels > group {
        out.par_chunks_mut(chunk).enumerate().for_each(fill);
    } else {
        out.chunks_mut(chunk).enumerate().for_each(fill);
    }
    rows_layout
}

/// Lanes (rows of the packed operand) per packing task on one thread.
const LANES_PER_TASK: usize = 256;

/// Packs lanes `first..first + lanes` of `x` whose `k` values are contiguous (`x.cs == 1`)
/// into `out`, their panels: each row converted whole, then the rows interleaved (or left as
/// rows of words when `rows_layout`).
fn fill_from_rows(
    x: Mat<'_>,
    (first, lanes): (usize, usize),
    k: usize,
    (width, rows_layout): (usize, bool),
    out: &mut [u32],
) {
    let pairs = k.div_ceil(2);
    let mut words = vec![0u32; if rows_layout { 0 } else { width * pairs }];
    for (q, panel) in out.chunks_mut(pairs * width).enumerate() {
        let rows = (lanes - q * width).min(width);
        if rows_layout {
            for (w, row_out) in panel.chunks_exact_mut(pairs).enumerate() {
                if w < rows {
                    let start = x.offset + (first + q * width + w) * x.rs;
                    row_words(&x.data[start..start + k], row_out);
                } else {
                    row_out.fill(0);
                }
            }
            continue;
        }
        for (w, row_out) in words.chunks_exact_mut(pairs).take(rows).enumerate() {
            let start = x.offset + (first + q * width + w) * x.rs;
            row_words(&x.data[start..start + k], row_out);
        }
        for (p, panel_lanes) in panel.chunks_exact_mut(width).enumerate() {
            for (w, lane) in panel_lanes.iter_mut().enumerate() {
                *lane = if w < rows { words[w * pairs + p] } else { 0 };
            }
        }
    }
}

/// Packs `x` (`count x k`, its `k` values strided: `x.cs != 1`) into panels of `width` as
/// [`pack_panels`] does, in tasks of a group of panels by a range of pairs
/// ([`column_pack_tasks`]), on the threads when `parallel`.
fn pack_columns(
    x: Mat<'_>,
    (count, k): (usize, usize),
    width: usize,
    parallel: bool,
    out: &mut [u32],
) {
    let pairs = k.div_ceil(2);
    let panels = count.div_ceil(width);
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let (group, span) = column_pack_tasks(panels, width, pairs, threads);
    let groups = panels.div_ceil(group);
    let tasks = groups * pairs.div_ceil(span);
    let shared = SharedOut::new(out);
    let fill = |task: usize| {
        let first = (task % groups) * group * width;
        let lanes = (count - first).min(group * width);
        let p0 = (task / groups) * span;
        let range = (p0, (p0 + span).min(pairs));
        fill_from_columns(x, (first, lanes), (k, width), range, shared);
    };
    if parallel && tasks > 1 {
        (0..tasks).into_par_iter().for_each(fill);
    } else {
        (0..tasks).for_each(fill);
    }
}

multiversion! {
    /// Writes pairs `range` of lanes `first..first + lanes` (`first` a multiple of `width`) of
    /// `x` into their panels of `out` (`(count, k)` packed by [`pack_columns`]): per pair, the
    /// two values of every lane converted into words, written straight into each panel's run.
    /// When `x.rs == 1` (the transpose of a row-major matrix) the pair's two runs of values are
    /// contiguous and read in place, otherwise gathered first.
    fn fill_from_columns(
        x: Mat<'_>,
        span: (usize, usize),
        sizes: (usize, usize),
        range: (usize, usize),
        out: SharedOut<u32>
    ) {
        let ((first, lanes), (k, width)) = (span, sizes);
        let pairs = k.div_ceil(2);
        let (mut lo, mut hi) = (vec![0f32; lanes], vec![0f32; lanes]);
        for p in range.0..range.1 {
            let (lo, hi): (&[f32], &[f32]) = if x.rs == 1 && 2 * p + 1 < k {
                let start = x.offset + first + 2 * p * x.cs;
                (&x.data[start..start + lanes], &x.data[start + x.cs..start + x.cs + lanes])
            } else {
                for (kk, dst) in [(2 * p, &mut lo), (2 * p + 1, &mut hi)] {
                    for (i, v) in dst.iter_mut().enumerate() {
                        *v = if kk < k { x.data[x.offset + (first + i) * x.rs + kk * x.cs] } else { 0.0 };
                    }
                }
                (&lo, &hi)
            };
            for (q, (lo, hi)) in lo.chunks(width).zip(hi.chunks(width)).enumerate() {
                let at = ((first / width + q) * pairs + p) * width;
                // SAFETY: this task alone writes pairs `range` of its panels.
                let panel = unsafe { out.slice(at, width) };
                for ((w, &l), &h) in panel.iter_mut().zip(lo).zip(hi) {
                    *w = word(l, h);
                }
                if lo.len() < width {
                    panel[lo.len()..].fill(0);
                }
            }
        }
    }
}

multiversion! {
    /// Writes rows `first..` of a row-major matrix of `width` columns, given as `block`
    /// (whole rows), as rows of pair words: row `i`'s word `p` (`bf16 x[i, 2p]`, `bf16 x[i,
    /// 2p + 1]`, 0 past the last column) at `i * ceil(width / 2) + p` of `out`: the row layout
    /// of a left operand packed by [`pack_panels`] (its padding rows left as they are).
    pub(crate) fn pack_rows_into(block: &[f32], width: usize, first: usize, out: SharedOut<u32>) {
        let pairs = width.div_ceil(2);
        for (j, row) in block.chunks_exact(width.max(1)).enumerate() {
            // SAFETY: the caller's tasks write disjoint rows.
            let words = unsafe { out.slice((first + j) * pairs, pairs) };
            row_words(row, words);
        }
    }
}

multiversion! {
    /// Writes the rows of `block` (whole rows of a row-major `rows x width` matrix, from row
    /// `first`, an even one) as pair words along the rows, in panels of `panel` columns: word
    /// `(p, c)` = (`bf16 x[2p, c]`, `bf16 x[2p + 1, c]`) at `((c / panel) * pairs + p) * panel
    /// + c % panel` of `out`, `pairs = ceil(rows / 2)`, with 0 for a missing last row and for
    /// the columns past `width` of the last panel: an operand whose `k` is the row index,
    /// packed as [`pack_panels`] packs it (`panel`: [`super::MR`] for a left operand `x^T`,
    /// [`super::NR`] for a right operand `x`).
    pub(crate) fn pack_pairs_into(
        block: &[f32],
        sizes: (usize, usize),
        first: usize,
        panel: usize,
        out: SharedOut<u32>
    ) {
        let (width, rows) = sizes;
        let pairs = rows.div_ceil(2);
        let panels = width.div_ceil(panel);
        // Zeros for a missing last row, made only then (a block of an even number of rows
        // has none).
        let mut zeros = Vec::new();
        for (j, two) in block.chunks(2 * width.max(1)).enumerate() {
            let p = first / 2 + j;
            let (lo, hi) = two.split_at(width.min(two.len()));
            let hi = if hi.is_empty() {
                zeros.resize(width, 0f32);
                &zeros[..]
            } else {
                hi
            };
            for q in 0..panels {
                // SAFETY: the caller's tasks write disjoint pairs; this is pair `p` of panel `q`.
                let lanes = unsafe { out.slice((q * pairs + p) * panel, panel) };
                let c0 = q * panel;
                let n = (width - c0).min(panel);
                for ((w, &l), &h) in lanes.iter_mut().zip(&lo[c0..c0 + n]).zip(&hi[c0..c0 + n]) {
                    *w = word(l, h);
                }
                lanes[n..].fill(0);
            }
        }
    }
}

/// The words of `count x k` packed into panels of `width`.
pub(crate) fn packed_len(count: usize, k: usize, width: usize) -> usize {
    count.div_ceil(width) * k.div_ceil(2) * width
}
