//! Projections `y = x W^T` with `W` quantized (our Q4_1 and Q8_0 kernels, or candle's ggml block
//! kernels) or dense f32.

use std::sync::Arc;

use candle_core::quantized::QMatMul;
use candle_core::{Module, Tensor};

use crate::error::{LlamaError, Result};
use crate::finite::{activation_limit, first_out_of_range, Q8_LIMIT};
use crate::q4_1::Q4_1Matrix;
use crate::q8_0::Q8_0Matrix;

/// A bias-free linear layer over the last dimension, named by its weight: `y = x W^T`, `W` of
/// shape `[out, in]`.
///
/// The input of a quantized product is checked before it is quantized (see `finite.rs`): a NaN,
/// an infinity or a magnitude the 8-bit activation blocks cannot hold is an error naming the
/// weight, never a silently wrong product.
#[derive(Debug, Clone)]
pub struct Linear {
    name: String,
    weight: Weight,
}

/// How a [`Linear`] holds `W`: Q4_1 or Q8_0 blocks on our SIMD kernels ([`Q4_1Matrix`],
/// [`Q8_0Matrix`], on the CPU; the same bits as candle's), any other ggml block format on
/// candle's quantized kernels, or dense f32.
/// The quantized forms quantize the activations to the matching 8-bit blocks first.
#[derive(Debug, Clone)]
pub enum Weight {
    /// Q4_1 weights on the CPU, multiplied by our SIMD kernel (bit for bit candle's result).
    Q4_1(Arc<Q4_1Matrix>),
    /// Q8_0 weights on the CPU, multiplied by our SIMD kernel (bit for bit candle's
    /// `vec_dot_q8_0_q8_0`), one or many rows.
    Q8_0(Arc<Q8_0Matrix>),
    /// Weights kept in their ggml block format; products run on candle's quantized kernels
    /// (the activations are quantized to the matching 8-bit blocks first).
    Quantized(QMatMul),
    /// Weights dequantized to f32 once at load; products in f32.
    Dense(Tensor),
}

impl Linear {
    /// A layer over `weight`, called `name` (the tensor's name in the file) in messages.
    pub fn new(name: impl Into<String>, weight: Weight) -> Linear {
        Linear {
            name: name.into(),
            weight,
        }
    }

    /// The weight's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The weight.
    pub fn weight(&self) -> &Weight {
        &self.weight
    }

    /// `x W^T` for `x` of shape `[..., in]`.
    ///
    /// # Errors
    /// [`crate::LlamaError::Activation`] when the input of a quantized product is NaN,
    /// infinite or too large for its activation blocks; a candle error for an input whose last
    /// dimension is not `in` ([`crate::LlamaError::Request`] from the Q4_1 and Q8_0 kernels,
    /// which also take only f32 input on the CPU).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let limit = match &self.weight {
            Weight::Q4_1(_) | Weight::Q8_0(_) => Some(Q8_LIMIT),
            Weight::Quantized(QMatMul::QTensor(w)) => Some(activation_limit(w.dtype())),
            Weight::Quantized(_) | Weight::Dense(_) => None,
        };
        if let Some(limit) = limit {
            if let Some((index, value)) = first_out_of_range(x, limit)? {
                return Err(LlamaError::Activation {
                    weight: self.name.clone(),
                    index,
                    value,
                    limit,
                });
            }
        }
        Ok(match &self.weight {
            Weight::Q4_1(w) => w.forward(x)?,
            Weight::Q8_0(w) => w.forward(x)?,
            Weight::Quantized(w) => w.forward(x)?,
            Weight::Dense(w) => {
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
