//! What our quantized kernels ([`crate::q4_1`], [`crate::q8_0`]) share (and, for its
//! thread pool, [`crate::cached_attention`]): the checks of a weight
//! they read ([`weight_shape`], [`weight_blocks`]), their tensor front end ([`forward_tensor`],
//! [`count_rows`]) and running a product group by group: the outputs of `y = x W^T` (`[rows, n_out]`) cut
//! into groups of `W` output features (the kernel's tile: 16 for Q4_1, 8 for Q8_0), each group
//! computed whole (for every row) by one call of the kernel, on the calling thread or over
//! candle's barrier pool.
//!
//! A kernel writes group `g` as `[rows][W]` (row `r`, feature `W g + lane`); the groups are
//! staged one after another and scattered into `y` at the end, except for one row of whole
//! groups, where that staging is `y`'s own layout and the kernels write into it directly.
//!
//! # Threads
//!
//! A product of at least 2^18 multiply-adds is split by groups over candle's barrier pool
//! (`candle_core::utils::barrier_pool`, the pool candle's own quantized products run on: the
//! calling thread takes part, and the workers spin between the short products of a decode step
//! instead of sleeping), about four pieces per thread, taken in turn; a smaller one runs on the
//! calling thread. Each output is computed whole by one thread, so the split never changes a
//! bit.

use std::sync::{Mutex, PoisonError};

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Storage, Tensor};

use crate::error::{LlamaError, Result};

/// Below this many multiply-adds (`rows * n_out * k`) a product runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 18;
/// Pieces of the output per thread of the pool: the threads take them in turn, so one that
/// starts late takes fewer.
const PIECES_PER_THREAD: usize = 4;

/// The `[n_out, k]` of a quantized weight that the kernel named `kernel` reads, whose blocks
/// must be of type `dtype`.
///
/// # Errors
/// [`LlamaError::Unsupported`] when the tensor is of another type or not two-dimensional.
pub(crate) fn weight_shape(
    tensor: &QTensor,
    dtype: GgmlDType,
    kernel: &str,
) -> Result<(usize, usize)> {
    if tensor.dtype() != dtype {
        return Err(LlamaError::Unsupported(format!(
            "the {kernel} kernel got a {:?} tensor",
            tensor.dtype()
        )));
    }
    match tensor.shape().dims() {
        &[n_out, k] => Ok((n_out, k)),
        dims => Err(LlamaError::Unsupported(format!(
            "the {kernel} kernel needs a [n_out, k] weight, got shape {dims:?}"
        ))),
    }
}

/// The blocks per row, `k / block_values`, of an `[n_out, k]` weight given as `bytes`, blocks
/// of `block_bytes` bytes row after row, for the kernel named `kernel`.
///
/// # Errors
/// [`LlamaError::Unsupported`] when `k` is not a multiple of `block_values` or `bytes` is not
/// `n_out * k / block_values * block_bytes` bytes long.
pub(crate) fn weight_blocks(
    bytes: &[u8],
    (n_out, k): (usize, usize),
    (block_values, block_bytes): (usize, usize),
    kernel: &str,
) -> Result<usize> {
    if !k.is_multiple_of(block_values) {
        return Err(LlamaError::Unsupported(format!(
            "the {kernel} kernel needs rows of whole {block_values}-value blocks, got k = {k}"
        )));
    }
    let blocks = k / block_values;
    let expected = n_out
        .checked_mul(blocks)
        .and_then(|n| n.checked_mul(block_bytes));
    if expected != Some(bytes.len()) {
        return Err(LlamaError::Unsupported(format!(
            "a [{n_out}, {k}] {kernel} weight takes {expected:?} bytes, got {}",
            bytes.len()
        )));
    }
    Ok(blocks)
}

/// `y = x W^T` for f32 `x` of shape `[..., k]` on the CPU through `matmul(x, y)` on the
/// row-major slices; `y` has shape `[..., n_out]`. `kernel` names the kernel in messages.
///
/// # Errors
/// [`LlamaError::Request`] for an input that is not f32, not on the CPU, has no dimension or
/// whose last dimension is not `k`; `matmul`'s errors; candle errors otherwise.
pub(crate) fn forward_tensor<F>(
    x: &Tensor,
    k: usize,
    n_out: usize,
    kernel: &str,
    matmul: F,
) -> Result<Tensor>
where
    F: FnOnce(&[f32], &mut [f32]) -> Result<()>,
{
    if x.dtype() != DType::F32 || !matches!(x.device(), Device::Cpu) {
        return Err(LlamaError::Request(format!(
            "the {kernel} kernel takes f32 input on the CPU, got {:?} on {:?}",
            x.dtype(),
            x.device()
        )));
    }
    let dims = x.dims();
    let Some((&width, outer)) = dims.split_last() else {
        return Err(LlamaError::Request(format!(
            "the {kernel} kernel got a scalar input"
        )));
    };
    if width != k {
        return Err(LlamaError::Request(format!(
            "the {kernel} kernel takes inputs of {k} features, got shape {dims:?}"
        )));
    }
    let rows: usize = outer.iter().product();
    let mut out_dims = dims.to_vec();
    if let Some(last) = out_dims.last_mut() {
        *last = n_out;
    }
    let mut out = vec![0f32; rows * n_out];
    let x = x.contiguous()?;
    {
        let (storage, layout) = x.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else {
            return Err(LlamaError::Request(format!(
                "the {kernel} kernel takes input on the CPU"
            )));
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            return Err(LlamaError::Request(format!(
                "the {kernel} kernel got a non-contiguous input"
            )));
        };
        let data = cpu.as_slice::<f32>()?;
        matmul(&data[start..end], &mut out)?;
    }
    Ok(Tensor::from_vec(out, out_dims, &Device::Cpu)?)
}

/// The rows of a product on slices: `x_len / k`, checked against both lengths (with `k = 0`
/// there is no input to count the rows by: the output's length tells).
///
/// # Errors
/// [`LlamaError::Request`] when `x_len` is not `rows * k` or `out_len` not `rows * n_out`.
pub(crate) fn count_rows(
    x_len: usize,
    out_len: usize,
    k: usize,
    n_out: usize,
    kernel: &str,
) -> Result<usize> {
    let rows = x_len
        .checked_div(k)
        .unwrap_or_else(|| out_len.checked_div(n_out).unwrap_or(0));
    if rows * k != x_len || rows * n_out != out_len {
        return Err(LlamaError::Request(format!(
            "the {kernel} kernel ([{n_out}, {k}]) got {x_len} inputs and room for {out_len} \
             outputs"
        )));
    }
    Ok(rows)
}

/// Fills `out` (`[rows, n_out]`, row-major) by calling `run(g, dst)` once for each group `g` of
/// `W` output features, `dst` being that group's `[rows][W]` results (the features past
/// `n_out` in the last group are computed and dropped). `k` (the inner dimension) only decides
/// whether the product is worth the pool.
///
/// The caller has checked `out.len() == rows * n_out`.
pub(crate) fn product_by_groups<const W: usize, F>(
    rows: usize,
    n_out: usize,
    k: usize,
    out: &mut [f32],
    run: F,
) where
    F: Fn(usize, &mut [f32]) + Sync,
{
    if rows == 0 || n_out == 0 {
        return;
    }
    let groups = n_out.div_ceil(W);
    let per_group = rows * W;
    // Results by group: `[groups][rows][W]`, written straight into `out` when that is its
    // layout already (one row, whole groups).
    let direct = rows == 1 && n_out.is_multiple_of(W);
    let mut staged = if direct {
        Vec::new()
    } else {
        vec![0f32; groups * per_group]
    };
    let target: &mut [f32] = if direct { out } else { &mut staged };
    if rows * n_out * k < PARALLEL_MIN_MACS {
        for (group, dst) in target.chunks_mut(per_group).enumerate() {
            run(group, dst);
        }
    } else {
        let per_piece = groups.div_ceil(PIECES_PER_THREAD * pool_threads());
        let pieces = target.chunks_mut(per_piece * per_group).collect();
        on_pool(pieces, |i, dst| {
            for (g, dst) in dst.chunks_mut(per_group).enumerate() {
                run(i * per_piece + g, dst);
            }
        });
    }
    if !direct {
        for (r, out_row) in out.chunks_exact_mut(n_out).enumerate() {
            for (g, out_group) in out_row.chunks_mut(W).enumerate() {
                let at = g * per_group + r * W;
                out_group.copy_from_slice(&staged[at..at + out_group.len()]);
            }
        }
    }
}

/// Threads of candle's barrier pool, the calling one included.
fn pool_threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// Calls `run(i, piece)` for every piece `i` of `pieces` (disjoint parts of one output) over
/// candle's barrier pool: the pool its own quantized products use, whose calling thread takes
/// part and whose workers spin between the many short steps of a decode pass, where a pool
/// whose workers sleep costs more than the work. The threads take the pieces in turn, each
/// piece whole.
pub(crate) fn on_pool<F>(pieces: Vec<&mut [f32]>, run: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let pieces: Vec<Piece<'_>> = pieces
        .into_iter()
        .enumerate()
        .map(|(i, dst)| Piece(Mutex::new((i, dst))))
        .collect();
    candle_core::utils::barrier_pool().execute_chunked(pieces.len(), |range| {
        for piece in &pieces[range] {
            // Each piece is taken by one thread only: the lock never waits.
            let mut guard = piece.0.lock().unwrap_or_else(PoisonError::into_inner);
            let (i, dst) = &mut *guard;
            run(*i, dst);
        }
    });
}

/// A piece of an output (its index, its values), handed to one thread of the pool; alone on
/// its cache line, so that taking it does not disturb the others.
#[repr(align(64))]
struct Piece<'a>(Mutex<(usize, &'a mut [f32])>);
