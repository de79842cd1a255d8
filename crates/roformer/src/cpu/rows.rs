//! Output buffers: rows built block by block on the threads, or written whole by a product;
//! sums down the columns of rows.

use std::mem::MaybeUninit;
use std::ops::Range;

use rayon::prelude::*;

use crate::cpu::mat::{Dst, SharedOut};
use crate::cpu::policy::SUM_ROWS;

/// The rows of one block of an output being built: uninitialised until [`RowsOut::init`].
pub(crate) struct RowsOut<'a> {
    rows: &'a mut [MaybeUninit<f32>],
    width: usize,
    ready: bool,
}

impl RowsOut<'_> {
    /// Sets each row to `base[row] + biases` (the biases side by side across the row, zeros
    /// where absent) and returns the rows, now initialised.
    pub(crate) fn init(&mut self, base: Option<&[f32]>, biases: &[Option<&[f32]>]) -> &mut [f32] {
        let width = self.width;
        for (i, row) in self.rows.chunks_mut(width).enumerate() {
            fill_row(
                row,
                base.and_then(|x| x.get(i * width..(i + 1) * width)),
                biases,
            );
        }
        self.ready = true;
        // SAFETY: `fill_row` wrote every element of every row, and `MaybeUninit<f32>` has the
        // layout of `f32`.
        unsafe { &mut *(std::ptr::from_mut(self.rows) as *mut [f32]) }
    }
}

/// Builds `[rows, width]` values block by block (`blocks` cover `0..rows` in order), on the
/// threads when `parallel`: `f(block, out)` initialises the block's rows through `out`.
pub(crate) fn build_rows(
    rows: usize,
    width: usize,
    blocks: &[Range<usize>],
    parallel: bool,
    f: impl Fn(&Range<usize>, &mut RowsOut<'_>) -> candle_core::Result<()> + Sync,
) -> candle_core::Result<Vec<f32>> {
    let n = rows * width;
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let mut parts = Vec::with_capacity(blocks.len());
    let mut rest = &mut out.spare_capacity_mut()[..n];
    let mut next = 0;
    for block in blocks {
        let len = block.len() * width;
        if block.start != next || len > rest.len() {
            return Err(candle_core::Error::Msg(format!(
                "fused encoder: row block {block:?} does not continue at row {next}"
            )));
        }
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
        parts.push((block, head));
        rest = tail;
        next = block.end;
    }
    if !rest.is_empty() {
        return Err(candle_core::Error::Msg(format!(
            "fused encoder: row blocks stop at row {next} of {rows}"
        )));
    }
    let run = |(block, rows): (&Range<usize>, &mut [MaybeUninit<f32>])| {
        let mut rows_out = RowsOut {
            rows,
            width,
            ready: false,
        };
        f(block, &mut rows_out)?;
        if rows_out.ready {
            Ok(())
        } else {
            Err(candle_core::Error::Msg(
                "fused encoder: a row block was left unwritten".into(),
            ))
        }
    };
    if parallel {
        parts.into_par_iter().try_for_each(run)?;
    } else {
        parts.into_iter().try_for_each(run)?;
    }
    // SAFETY: the blocks cover all `n` elements, and each block's rows were initialised
    // (`ready`, set by `RowsOut::init`).
    unsafe { out.set_len(n) };
    Ok(out)
}

/// A buffer of `len` values written whole by `write` through the destination it is handed
/// (raw writes: a matrix product without accumulation writes every element of its `m x n`
/// destination), never zeroed first: for a buffer handed on (to candle) rather than back to
/// [`super::recycle`].
///
/// # Errors
/// `write`'s errors (the buffer is then dropped unread).
///
/// # Safety
/// When it returns `Ok`, `write` has written every one of the `len` elements through the
/// destination's pointer, reading none of them before it wrote it.
pub(crate) unsafe fn written_whole(
    len: usize,
    write: impl FnOnce(Dst<'_>) -> candle_core::Result<()>,
) -> candle_core::Result<Vec<f32>> {
    let mut out: Vec<f32> = Vec::with_capacity(len);
    write(Dst::Shared(SharedOut::uninit(
        &mut out.spare_capacity_mut()[..len],
    )))?;
    // SAFETY: `write` wrote all `len` elements (this function's contract).
    unsafe { out.set_len(len) };
    Ok(out)
}

/// `[rows, width]` values, row `r` being `base[r] + biases`.
pub(crate) fn filled(
    rows: usize,
    width: usize,
    base: Option<&[f32]>,
    biases: &[Option<&[f32]>],
) -> candle_core::Result<Vec<f32>> {
    build_rows(
        rows,
        width,
        std::slice::from_ref(&(0..rows)),
        false,
        |_, out| {
            out.init(base, biases);
            Ok(())
        },
    )
}

/// Writes `base + biases` into `row`, the biases laid side by side across it (zeros for a
/// missing one, or one of the wrong length).
fn fill_row(row: &mut [MaybeUninit<f32>], base: Option<&[f32]>, biases: &[Option<&[f32]>]) {
    let part = (row.len() / biases.len().max(1)).max(1);
    let base = base.filter(|x| x.len() == row.len());
    for (i, segment) in row.chunks_mut(part).enumerate() {
        let len = segment.len();
        let bias = biases.get(i).copied().flatten().filter(|b| b.len() == len);
        let base = base.map(|x| &x[i * part..i * part + len]);
        match (base, bias) {
            (Some(x), Some(b)) => {
                for ((slot, x), b) in segment.iter_mut().zip(x).zip(b) {
                    slot.write(x + b);
                }
            }
            (Some(x), None) => {
                for (slot, x) in segment.iter_mut().zip(x) {
                    slot.write(*x);
                }
            }
            (None, Some(b)) => {
                for (slot, b) in segment.iter_mut().zip(b) {
                    slot.write(*b);
                }
            }
            (None, None) => {
                for slot in segment.iter_mut() {
                    slot.write(0.0);
                }
            }
        }
    }
}

/// `sum_i row_i` over `rows` rows of `width` columns, where `add_row(i, acc)` adds row `i`'s
/// values into `acc`: partial sums of [`SUM_ROWS`] rows on the threads, added in order (the
/// same result on any thread count).
pub(crate) fn column_sums(
    rows: usize,
    width: usize,
    add_row: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let partials: Vec<Vec<f32>> = (0..rows.div_ceil(SUM_ROWS))
        .into_par_iter()
        .map(|block| {
            let mut sum = vec![0f32; width];
            for i in block * SUM_ROWS..((block + 1) * SUM_ROWS).min(rows) {
                add_row(i, &mut sum);
            }
            sum
        })
        .collect();
    let mut total = vec![0f32; width];
    for p in partials {
        total.iter_mut().zip(p).for_each(|(s, v)| *s += v);
    }
    total
}
