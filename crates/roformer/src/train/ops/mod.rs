//! Fused CPU f32 ops of the training path, each with a hand-written backward.
//!
//! candle's backward pass pays for every node of the graph: each gradient is accumulated into
//! a zero tensor made for it (`zeros_like`, then `add`), whatever the node (a reshape, a
//! transpose, a broadcast bias, the mask multiply of a dropout), and a product over a
//! broadcast weight (`candle_nn::Linear` on 3D input) runs as one small product per sequence
//! and sums the weight gradient over the batch. The ops here replace whole chains of nodes by
//! one node each, whose backward writes every gradient in one pass:
//!
//! - [`linear`]: `act(x W^T + b)`, the bias preloaded into the output (the product accumulates
//!   onto it), one 2D product over all rows, the erf GELU fused (pre-activation kept for the
//!   backward); backward: `du = g act'(u)`, `dx = du W`, `dW = du^T x`, `db = sum du`;
//! - [`attention`]: scaled dot-product attention from token-major q, k, v (rotary rotation,
//!   mask, softmax, dropout on the probabilities, context) per (sequence, head, tile of query
//!   rows), without any `[b, h, t, t]` tensor: the backward recomputes the scores of a tile
//!   from q and k and the saved row statistics;
//! - [`dropout`]: dropout from a packed keep mask, alone or fused with the residual add;
//! - [`cross_entropy`]: mean cross entropy over rows of logits with targets, and the arg-max,
//!   in one pass; backward `(softmax - onehot) / n`;
//! - [`embedding`]: the word and token-type lookups and their sum; backward one scatter of the
//!   rows' gradients into each (zeroed) table.
//!
//! Each runs only on contiguous f32 CPU tensors; callers keep the composite path for anything
//! else (and the tests compare the two).

pub(crate) mod attention;
pub(crate) mod cross_entropy;
pub(crate) mod dropout;
pub(crate) mod embedding;
pub(crate) mod linear;
#[cfg(test)]
mod tests;

use candle_core::{CpuStorage, Device, Layout, Storage, Tensor};
use gemm::{gemm, Parallelism};

/// Whether every tensor is f32 on the CPU (the fused ops' domain).
pub(crate) fn all_cpu_f32(tensors: &[&Tensor]) -> bool {
    tensors
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == candle_core::DType::F32)
}

/// The f32 elements of a contiguous CPU storage under `layout`.
pub(crate) fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        return Err(candle_core::Error::Msg(format!("{what}: expected f32")));
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => Err(candle_core::Error::Msg(format!(
            "{what}: expected a contiguous tensor"
        ))),
    }
}

/// Runs `f` on the f32 elements of `t` (made contiguous first if needed).
pub(crate) fn with_f32<R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(&[f32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(candle_core::Error::Msg(format!(
            "{what}: expected a CPU tensor"
        )));
    };
    f(f32_slice(cpu, layout, what)?)
}

/// A tensor of shape `shape` holding `data`, on the CPU.
pub(crate) fn tensor(data: Vec<f32>, shape: &candle_core::Shape) -> candle_core::Result<Tensor> {
    Tensor::from_vec(data, shape.clone(), &Device::Cpu)
}

/// A strided matrix inside a slice: element `(i, j)` at `offset + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) offset: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `[rows, cols]` matrix at the start of `data`.
    pub(crate) fn rows(data: &'a [f32], cols: usize) -> Mat<'a> {
        Mat {
            data,
            offset: 0,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose view.
    pub(crate) fn t(self) -> Mat<'a> {
        Mat {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0
            || cols == 0
            || self.offset + (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// An output buffer shared by tasks that write disjoint elements of it.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the tasks that share one write disjoint elements (each caller says which), and the
// buffer outlives them.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Shares `buf` (which must outlive every use, and whose writers must not overlap).
    pub(crate) fn new(buf: &mut [f32]) -> SharedOut {
        SharedOut {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// No other live slice may overlap these elements.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(start + len <= self.len, "shared output slice out of bounds");
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

/// Where a product goes: element `(i, j)` at `offset + i * rs + j`.
pub(crate) enum Dst<'a> {
    /// An exclusive slice.
    Slice(&'a mut [f32]),
    /// A shared buffer whose caller writes only this product's elements.
    Shared(SharedOut),
}

/// `dst = (accumulate ? dst : 0) + alpha * a b` for an `m x k` `a` and a `k x n` `b`, with
/// `dst` at `offset` with row stride `rs`; on the threads when `parallel`, else on the calling
/// thread. Every operand is checked to lie inside its buffer.
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
) -> candle_core::Result<()> {
    let (ptr, len) = match dst {
        Dst::Slice(s) => (s.as_mut_ptr(), s.len()),
        Dst::Shared(s) => (s.ptr, s.len),
    };
    let dst_fits = m == 0 || n == 0 || offset + (m - 1) * rs + n - 1 < len;
    if !(dst_fits && a.fits(m, k) && b.fits(k, n)) {
        return Err(candle_core::Error::Msg(format!(
            "training op: a {m}x{k} by {k}x{n} product does not fit its buffers"
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

/// Elements per task of an element-wise pass spread over the threads.
pub(crate) const PASS_CHUNK: usize = 1 << 15;
