//! Projections `y = x W^T` with `W` quantized (our Q4_1 kernel or candle's ggml block kernels)
//! or dense f32.

use std::sync::Arc;

use candle_core::quantized::QMatMul;
use candle_core::{Module, Tensor};

use crate::error::Result;
use crate::q4_1::Q4_1Matrix;

/// A bias-free linear layer over the last dimension: `y = x W^T`, `W` of shape `[out, in]`.
///
/// Three ways to hold `W`: Q4_1 blocks on our SIMD kernel ([`Q4_1Matrix`], on the CPU; the
/// same bits as candle's), any ggml block format on candle's quantized kernels, or dense f32.
/// The quantized forms quantize the activations to the matching 8-bit blocks first.
#[derive(Debug, Clone)]
pub enum Linear {
    /// Q4_1 weights on the CPU, multiplied by our SIMD kernel (bit for bit candle's result).
    Q4_1(Arc<Q4_1Matrix>),
    /// Weights kept in their ggml block format; products run on candle's quantized kernels
    /// (the activations are quantized to the matching 8-bit blocks first).
    Quantized(QMatMul),
    /// Weights dequantized to f32 once at load; products in f32.
    Dense(Tensor),
}

impl Linear {
    /// `x W^T` for `x` of shape `[..., in]`.
    ///
    /// # Errors
    /// A candle error for an input whose last dimension is not `in` ([`crate::LlamaError::Request`]
    /// from the Q4_1 kernel, which also takes only f32 input on the CPU).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Linear::Q4_1(w) => w.forward(x)?,
            Linear::Quantized(w) => w.forward(x)?,
            Linear::Dense(w) => {
                let dims = x.dims();
                let (rows, width) = match dims.split_last() {
                    Some((&width, outer)) => (outer.iter().product::<usize>(), width),
                    None => (1, 1),
                };
                let mut out_dims = dims.to_vec();
                if let Some(last) = out_dims.last_mut() {
                    *last = w.dim(0)?;
                }
                x.reshape((rows, width))?
                    .matmul(&w.t()?)?
                    .reshape(out_dims)?
            }
        })
    }
}
