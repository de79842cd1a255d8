//! The layers' products `dst[:, col..col + n] += x W^T`, on one thread or split by output
//! columns over the threads, through the CPU layer: f32 (gemm), or bf16 where the weight was
//! packed at load ([`crate::RoFormerModel::set_precision`]).

use rayon::prelude::*;

use super::held::Dense;
use crate::cpu::bf16;
use crate::cpu::{product, Dst, Mat, Precision, SharedOut};

/// Column tasks per thread of a product split by columns (spare tasks let idle threads
/// steal work), and the granularity of their widths (a multiple of the bf16 panel width).
const COLUMN_TASKS_PER_THREAD: usize = 4;
const COLUMN_ALIGN: usize = 64;

/// [`product_xwt`] spread over the threads: tasks of whole output columns (about
/// [`COLUMN_TASKS_PER_THREAD`] per thread), each reading only its rows of `W`.
pub(super) fn product_xwt_split(
    dst: &mut [f32],
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &Dense<'_>,
    threads: usize,
) -> candle_core::Result<()> {
    let n = w.weight.len() / k.max(1);
    let chunk = n
        .div_ceil(COLUMN_TASKS_PER_THREAD * threads)
        .next_multiple_of(COLUMN_ALIGN)
        .min(n)
        .max(1);
    let out = SharedOut::new(dst);
    (0..n.div_ceil(chunk)).into_par_iter().try_for_each(|c| {
        let j0 = c * chunk;
        // Each task writes its own columns j0..j0 + chunk of `dst`, borrowed exclusively by
        // this call for the whole loop.
        columns(
            Dst::Shared(out),
            dst_rs,
            col,
            x,
            k,
            w,
            j0..(j0 + chunk).min(n),
        )
    })
}

/// `dst[:, col..col + n] += x W^T` on one thread, with `x` `[rows, k]` (`k` columns) and `W`
/// `[n, k]` row-major; `dst` has `dst_rs` columns.
pub(super) fn product_xwt(
    dst: &mut [f32],
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &Dense<'_>,
) -> candle_core::Result<()> {
    let n = w.weight.len() / k.max(1);
    columns(Dst::Slice(dst), dst_rs, col, x, k, w, 0..n)
}

/// `dst[:, col + j] += (x W^T)[:, j]` for `j` in `cols`, on the calling thread.
fn columns(
    mut dst: Dst<'_>,
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &Dense<'_>,
    cols: std::ops::Range<usize>,
) -> candle_core::Result<()> {
    let (ptr, len) = dst.raw();
    let m = len / dst_rs.max(1);
    let offset = col + cols.start;
    if let (Some(packed), Some(kernel)) = (w.bf16, bf16::native()) {
        let fits = m == 0
            || cols.is_empty()
            || (offset + cols.len() <= dst_rs && x.len() >= m * k && packed.k() == k);
        let Some(part) = packed.columns(cols.clone()).filter(|_| fits) else {
            return Err(candle_core::Error::Msg(format!(
                "fused encoder: a {m}x{k} by packed {k}x{} product does not fit its buffers",
                cols.len()
            )));
        };
        // SAFETY: checked just above: `dst` holds `m` rows of `dst_rs` with these columns
        // inside, exclusive to this call (a `&mut` slice, or a shared buffer whose writers use
        // disjoint columns), and does not overlap `x`.
        unsafe {
            bf16::product_packed(
                kernel,
                m,
                (ptr.add(offset), dst_rs),
                true,
                Mat::rows(x, k),
                part,
                1.0,
                false,
            );
        }
        return Ok(());
    }
    product(
        (m, cols.len(), k),
        dst,
        (offset, dst_rs),
        true,
        Mat::rows(x, k),
        Mat {
            data: w.weight,
            offset: cols.start * k,
            rs: 1,
            cs: k,
        },
        1.0,
        false,
        Precision::F32,
    )
}
