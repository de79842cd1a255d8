//! Matrix products through gemm, on one thread or split by output columns over the threads.

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::buffers::SharedOut;

/// Column tasks per thread of a product split by columns (spare tasks let idle threads
/// steal work), and the granularity of their widths.
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
    w: &[f32],
    threads: usize,
) -> candle_core::Result<()> {
    let m = dst.len() / dst_rs.max(1);
    let n = w.len() / k.max(1);
    let chunk = n
        .div_ceil(COLUMN_TASKS_PER_THREAD * threads)
        .next_multiple_of(COLUMN_ALIGN)
        .min(n)
        .max(1);
    let out = SharedOut {
        ptr: dst.as_mut_ptr(),
        len: dst.len(),
    };
    (0..n.div_ceil(chunk)).into_par_iter().try_for_each(|c| {
        let j0 = c * chunk;
        product(
            ProductDims {
                m,
                n: chunk.min(n - j0),
                k,
            },
            // Each task writes its own columns j0..j0 + chunk of `dst`, borrowed exclusively
            // by this call for the whole loop.
            Dst::Shared(out, col + j0, dst_rs),
            true,
            Operand {
                data: x,
                offset: 0,
                rs: k,
                cs: 1,
            },
            Operand {
                data: w,
                offset: j0 * k,
                rs: 1,
                cs: k,
            },
            1.0,
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
    w: &[f32],
) -> candle_core::Result<()> {
    let m = dst.len() / dst_rs.max(1);
    let n = w.len() / k.max(1);
    product(
        ProductDims { m, n, k },
        Dst::Slice(dst, col, dst_rs),
        true,
        Operand {
            data: x,
            offset: 0,
            rs: k,
            cs: 1,
        },
        Operand {
            data: w,
            offset: 0,
            rs: 1,
            cs: k,
        },
        1.0,
    )
}

pub(super) struct ProductDims {
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
}

/// A strided matrix inside a slice: element `(i, j)` at `offset + i * rs + j * cs`.
pub(super) struct Operand<'a> {
    pub(super) data: &'a [f32],
    pub(super) offset: usize,
    pub(super) rs: usize,
    pub(super) cs: usize,
}

impl Operand<'_> {
    /// Whether a `rows x cols` matrix fits.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0
            || cols == 0
            || self.offset + (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// Where a product goes: `(buffer, offset of element (0, 0), row stride)`, unit column stride.
pub(super) enum Dst<'a> {
    Slice(&'a mut [f32], usize, usize),
    /// Into the shared attention output.
    Shared(SharedOut, usize, usize),
}

/// `dst = (accumulate ? dst : 0) + beta * a b` for an `m x k` `a` and a `k x n` `b`, through
/// gemm on the calling thread, after checking every operand lies inside its buffer.
pub(super) fn product(
    dims: ProductDims,
    dst: Dst<'_>,
    accumulate: bool,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
) -> candle_core::Result<()> {
    let ProductDims { m, n, k } = dims;
    let (ptr, offset, rs, len) = match dst {
        Dst::Slice(s, offset, rs) => (s.as_mut_ptr(), offset, rs, s.len()),
        Dst::Shared(out, offset, rs) => (out.ptr, offset, rs, out.len),
    };
    let dst_fits = m == 0 || n == 0 || offset + (m - 1) * rs + n - 1 < len;
    if !(dst_fits && a.fits(m, k) && b.fits(k, n)) {
        return Err(candle_core::Error::Msg(format!(
            "fused encoder: a {m}x{k} by {k}x{n} product does not fit its buffers"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // SAFETY: the checks above keep every element gemm reads or writes inside the buffers;
    // `dst` is exclusive (a `&mut` slice, or a shared output whose writers use disjoint
    // elements) and does not overlap `a` or `b`, which are shared slices.
    unsafe {
        gemm(
            m,
            n,
            k,
            ptr.add(offset),
            1,
            rs as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.offset),
            b.cs as isize,
            b.rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            beta,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    Ok(())
}
