//! The matrix product of both fast paths, in f32 (gemm) or bf16 (our kernel).

use gemm::{gemm, Parallelism};

use super::bf16::{self, Packed, PackedA};
use super::mat::{span_fits, Dst, Mat};
use super::precision::Precision;

/// `dst = (accumulate ? dst : 0) + alpha * a b` for an `m x k` `a` and a `k x n` `b`, with
/// `dst`'s element `(i, j)` at `offset + i * rs + j`; on the threads when `parallel`, else on
/// the calling thread. With [`Precision::Bf16`] (where [`bf16::native`] has a kernel) the
/// operands are rounded to bf16 and the products summed in f32. Every operand is checked to lie
/// inside its buffer.
///
/// # Errors
/// An operand or the destination that does not fit its buffer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product(
    (m, n, k): (usize, usize, usize),
    dst: Dst<'_>,
    (offset, rs): (usize, usize),
    accumulate: bool,
    a: Mat<'_>,
    b: Mat<'_>,
    alpha: f32,
    parallel: bool,
    precision: Precision,
) -> candle_core::Result<()> {
    product_on(
        (m, n, k),
        dst,
        (offset, rs),
        accumulate,
        (a, b),
        alpha,
        parallel,
        precision.bf16_kernel(),
    )
}

/// [`product`] on the bf16 `kernel` given (`None`: f32 through gemm), whatever the default of
/// this machine: for measuring one kernel against another.
///
/// # Errors
/// As [`product`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn product_on(
    (m, n, k): (usize, usize, usize),
    mut dst: Dst<'_>,
    (offset, rs): (usize, usize),
    accumulate: bool,
    (a, b): (Mat<'_>, Mat<'_>),
    alpha: f32,
    parallel: bool,
    kernel: Option<bf16::Kernel>,
) -> candle_core::Result<()> {
    let (ptr, len) = dst.raw();
    if !(span_fits(len, offset, (rs, 1), (m, n)) && a.fits(m, k) && b.fits(k, n)) {
        return Err(candle_core::Error::Msg(format!(
            "matrix product: a {m}x{k} by {k}x{n} product does not fit its buffers"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                // SAFETY: inside the destination, checked above.
                unsafe { std::slice::from_raw_parts_mut(ptr.add(offset + i * rs), n) }.fill(0.0);
            }
        }
        return Ok(());
    }
    if let Some(kernel) = kernel {
        // SAFETY: the destination was checked above, is exclusive to this call and does not
        // overlap `a` or `b`.
        unsafe {
            bf16::product(
                kernel,
                (m, n, k),
                (ptr.add(offset), rs),
                accumulate,
                a,
                b,
                alpha,
                parallel,
            );
        }
        return Ok(());
    }
    let parallelism = if parallel {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    };
    // SAFETY: the checks above keep every element gemm reads or writes inside the buffers;
    // the destination is exclusive to this call (a `&mut` slice, or a shared buffer whose
    // writers use disjoint elements) and does not overlap `a` or `b`, which are shared slices.
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
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// [`product`] in bf16 with `b` (`k x n`) packed once (a weight packed at load):
/// `dst = (accumulate ? dst : 0) + alpha * bf16(a) b`, on the threads when `parallel`. Every
/// operand is checked to lie inside its buffer.
///
/// # Errors
/// An operand or the destination that does not fit its buffer, or `a`'s `k` not `b`'s; a CPU
/// without a native bf16 kernel ([`bf16::native`]; callers check it and run f32 instead).
#[allow(clippy::too_many_arguments)]
pub(crate) fn product_packed(
    m: usize,
    mut dst: Dst<'_>,
    (offset, rs): (usize, usize),
    accumulate: bool,
    a: Mat<'_>,
    b: Packed<'_>,
    alpha: f32,
    parallel: bool,
) -> candle_core::Result<()> {
    let (n, k) = (b.n(), b.k());
    let (ptr, len) = dst.raw();
    if !(span_fits(len, offset, (rs, 1), (m, n)) && a.fits(m, k)) {
        return Err(candle_core::Error::Msg(format!(
            "matrix product: a {m}x{k} by packed {k}x{n} product does not fit its buffers"
        )));
    }
    let Some(kernel) = bf16::native() else {
        return Err(candle_core::Error::Msg(
            "matrix product: a packed bf16 operand on a CPU without a bf16 kernel".into(),
        ));
    };
    // SAFETY: the destination was checked above, is exclusive to this call (a `&mut` slice, or
    // a shared buffer whose writers use disjoint elements) and does not overlap `a` or `b`.
    unsafe {
        bf16::product_packed(
            kernel,
            m,
            (ptr.add(offset), rs),
            accumulate,
            a,
            b,
            alpha,
            parallel,
        );
    }
    Ok(())
}

/// [`product`] in bf16 from two operands packed ahead by their producers (an activation
/// rounded once, in the layouts its products read): `dst = (accumulate ? dst : 0) + alpha a b`
/// for `a` `m x k` and `b` `k x n`, on the threads when `parallel`.
///
/// # Errors
/// A destination that does not fit its buffer, operands of different depths, a CPU without a
/// native bf16 kernel ([`bf16::native`]: callers keep f32 operands there).
pub(crate) fn product_prepacked(
    mut dst: Dst<'_>,
    (offset, rs): (usize, usize),
    accumulate: bool,
    (a, b): (PackedA<'_>, Packed<'_>),
    alpha: f32,
    parallel: bool,
) -> candle_core::Result<()> {
    let (m, n, k) = (a.m(), b.n(), a.k());
    let (ptr, len) = dst.raw();
    if !span_fits(len, offset, (rs, 1), (m, n)) || b.k() != k {
        return Err(candle_core::Error::Msg(format!(
            "matrix product: packed {m}x{k} by {}x{n} does not fit its operands or {len} outputs",
            b.k()
        )));
    }
    let Some(kernel) = bf16::native() else {
        return Err(candle_core::Error::Msg(
            "matrix product: packed bf16 operands on a CPU without a bf16 kernel".into(),
        ));
    };
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                // SAFETY: inside the destination, checked above.
                unsafe { std::slice::from_raw_parts_mut(ptr.add(offset + i * rs), n) }.fill(0.0);
            }
        }
        return Ok(());
    }
    // SAFETY: the destination was checked above and is exclusive to this call (a `&mut`
    // slice, or a shared buffer whose writers use disjoint elements); the depths agree.
    unsafe {
        bf16::product_prepacked(
            kernel,
            (ptr.add(offset), rs),
            accumulate,
            (a, b),
            alpha,
            parallel,
        );
    }
    Ok(())
}
