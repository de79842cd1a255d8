//! Projections `y = x W^T` with `W` quantized (candle's ggml block kernels) or dense f32.

use candle_core::quantized::QMatMul;
use candle_core::{Module, Tensor};

use crate::error::Result;

/// A bias-free linear layer over the last dimension: `y = x W^T`, `W` of shape `[out, in]`.
#[derive(Debug, Clone)]
pub enum Linear {
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
    /// A candle error for an input whose last dimension is not `in`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
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
