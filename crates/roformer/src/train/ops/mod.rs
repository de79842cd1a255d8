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

pub(crate) use crate::cpu::{product, Dst, Mat, SharedOut};

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

/// Elements per task of an element-wise pass spread over the threads.
pub(crate) const PASS_CHUNK: usize = 1 << 15;
