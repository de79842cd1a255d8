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

/// `N` linear layers that read the same input, `[x W_1^T, ..., x W_N^T]` (a block's q, k and v
/// projections; its gate and up projections).
///
/// When every part is Q4_1 on our kernel and their rows stack ([`Q4_1Matrix::stack`]), the
/// parts run as one product: the input is scanned, quantized and handed to the thread pool
/// once instead of once a part. Each output is computed on its own either way, so the results
/// are the same bits as running the parts one by one.
#[derive(Debug, Clone)]
pub(crate) enum Stacked<const N: usize> {
    /// One product over the stacked rows, named after the first part (its input's check names
    /// it, as the first product of that input); the output is split at these widths.
    One(Linear, [usize; N]),
    /// The parts one by one.
    Each([Linear; N]),
}

impl<const N: usize> Stacked<N> {
    /// `parts` stacked when they can be, else kept apart.
    pub(crate) fn new(parts: [Linear; N]) -> Stacked<N> {
        let matrices: Option<Vec<&Q4_1Matrix>> = parts
            .iter()
            .map(|p| match &p.weight {
                Weight::Q4_1(w) => Some(&**w),
                _ => None,
            })
            .collect();
        if let (Some(matrices), Some(first)) = (matrices, parts.first()) {
            if let Ok(stacked) = Q4_1Matrix::stack(&matrices) {
                let widths = std::array::from_fn(|i| matrices[i].n_out());
                let one = Linear::new(first.name.clone(), Weight::Q4_1(Arc::new(stacked)));
                return Stacked::One(one, widths);
            }
        }
        Stacked::Each(parts)
    }

    /// Each part's `x W_i^T`, in order, for `x` of shape `[..., in]`.
    ///
    /// # Errors
    /// As [`Linear::forward`].
    pub(crate) fn forward(&self, x: &Tensor) -> Result<[Tensor; N]> {
        let outputs: Vec<Tensor> = match self {
            Stacked::One(linear, widths) => {
                let y = linear.forward(x)?;
                let last = y.rank().saturating_sub(1);
                let mut start = 0;
                let mut parts = Vec::with_capacity(N);
                for &width in widths {
                    parts.push(y.narrow(last, start, width)?);
                    start += width;
                }
                parts
            }
            Stacked::Each(parts) => parts.iter().map(|p| p.forward(x)).collect::<Result<_>>()?,
        };
        // Both arms make exactly N outputs.
        <[Tensor; N]>::try_from(outputs)
            .map_err(|o| LlamaError::Request(format!("{} outputs for {N} stacked layers", o.len())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Tensor};

    use super::{Linear, Stacked, Weight};
    use crate::q4_1::Q4_1Matrix;

    /// A random `[n_out, k]` weight, on our Q4_1 kernel or candle's Q8_0 one.
    fn linear(name: &str, n_out: usize, k: usize, dtype: GgmlDType, seed: u64) -> Linear {
        let w = Tensor::rand(-1f32, 1f32, (n_out, k), &Device::Cpu).unwrap();
        let w = (w + seed as f64).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        let weight = match dtype {
            GgmlDType::Q4_1 => Weight::Q4_1(Arc::new(Q4_1Matrix::from_qtensor(&q).unwrap())),
            _ => Weight::Quantized(QMatMul::from_qtensor(q).unwrap()),
        };
        Linear::new(name, weight)
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.into_iter().map(f32::to_bits).collect()
    }

    #[test]
    fn stacked_parts_give_each_parts_bits() {
        let x = Tensor::rand(-2f32, 2f32, (2, 5, 64), &Device::Cpu).unwrap();
        let parts = [
            linear("q", 32, 64, GgmlDType::Q4_1, 0),
            linear("k", 16, 64, GgmlDType::Q4_1, 1),
            linear("v", 13, 64, GgmlDType::Q4_1, 2),
        ];
        let stacked = Stacked::new(parts.clone());
        assert!(matches!(&stacked, Stacked::One(l, [32, 16, 13]) if l.name() == "q"));
        for (got, part) in stacked.forward(&x).unwrap().iter().zip(&parts) {
            let expected = part.forward(&x).unwrap();
            assert_eq!(got.dims(), expected.dims());
            assert_eq!(bits(got), bits(&expected), "{}", part.name());
        }
    }

    #[test]
    fn parts_that_do_not_stack_run_one_by_one() {
        let x = Tensor::rand(-2f32, 2f32, (1, 3, 64), &Device::Cpu).unwrap();
        let cases = [
            // A part before the last that is not whole groups of 16 rows.
            [
                linear("a", 8, 64, GgmlDType::Q4_1, 0),
                linear("b", 16, 64, GgmlDType::Q4_1, 1),
            ],
            // Different k.
            [
                linear("a", 16, 64, GgmlDType::Q4_1, 0),
                linear("b", 16, 32, GgmlDType::Q4_1, 1),
            ],
            // Not all on our Q4_1 kernel.
            [
                linear("a", 16, 64, GgmlDType::Q4_1, 0),
                linear("b", 16, 64, GgmlDType::Q8_0, 1),
            ],
        ];
        for (i, parts) in cases.into_iter().enumerate() {
            let stacked = Stacked::new(parts.clone());
            assert!(matches!(stacked, Stacked::Each(_)), "case {i}");
            if i != 1 {
                for (got, part) in stacked.forward(&x).unwrap().iter().zip(&parts) {
                    assert_eq!(bits(got), bits(&part.forward(&x).unwrap()), "case {i}");
                }
            }
        }
        assert!(Q4_1Matrix::stack(&[]).is_err());
    }
}
