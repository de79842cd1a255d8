//! Dense layers' products `dst[:, col..col + n] += x W^T`, on one thread or split by output
//! columns over the threads: f32 (gemm), or bf16 where the weight was packed at load
//! ([`crate::RoFormerModel::set_precision`]).

use rayon::prelude::*;

use super::bf16::{self, Packed};
use super::mat::{Dst, Mat, SharedOut};
use super::policy::column_chunk;
use super::precision::Precision;
use super::product::{product, product_packed};

/// A dense layer as slices: `W` `[out, in]` row-major, the bias, and `W^T` packed for the
/// bf16 products when the model runs in bf16.
pub(crate) struct Dense<'a> {
    pub(crate) weight: &'a [f32],
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) bf16: Option<Packed<'a>>,
}

/// [`product_xwt`] spread over the threads: tasks of whole output columns
/// ([`column_chunk`] wide), each reading only its rows of `W`.
pub(crate) fn product_xwt_split(
    dst: &mut [f32],
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &Dense<'_>,
    threads: usize,
) -> candle_core::Result<()> {
    let n = w.weight.len() / k.max(1);
    let chunk = column_chunk(n, threads);
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
pub(crate) fn product_xwt(
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
    let (_, len) = dst.raw();
    let m = len / dst_rs.max(1);
    let offset = col + cols.start;
    if let (Some(packed), Some(_)) = (w.bf16, bf16::native()) {
        let part = packed
            .columns(cols.clone())
            .filter(|p| p.k() == k)
            .ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "dense product: columns {cols:?} of a packed {}x{} weight, for inputs of {k}",
                    packed.k(),
                    packed.n()
                ))
            })?;
        if m > 0 && !cols.is_empty() && offset + cols.len() > dst_rs {
            return Err(candle_core::Error::Msg(format!(
                "dense product: columns {offset}..{} past a row of {dst_rs}",
                offset + cols.len()
            )));
        }
        return product_packed(
            m,
            dst,
            (offset, dst_rs),
            true,
            Mat::rows(x, k),
            part,
            1.0,
            false,
        );
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
