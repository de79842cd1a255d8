//! The normalisation of a block: transformers' `LayerNorm`, or RoFormer-V2's weightless RMS norm.

use candle_core::{DType, Tensor, D};
use candle_nn::VarBuilder;

use crate::autograd;
use crate::config::{NormType, RoFormerConfig};
use crate::plan::Plan;

/// A normalisation over the last dimension.
#[derive(Debug, Clone)]
pub enum Norm {
    /// `(x - mean) / sqrt(var + eps) * weight + bias`, population variance (`nn.LayerNorm`;
    /// tensors `weight`, `bias`).
    Layer {
        /// The scale, `[size]`.
        weight: Tensor,
        /// The shift, `[size]`.
        bias: Tensor,
        /// The epsilon.
        eps: f64,
    },
    /// `x / sqrt(mean(x^2) + eps)`, without weights (JunnYu's `Norm` in RoFormer-V2).
    Rms {
        /// The epsilon.
        eps: f64,
    },
}

impl Norm {
    /// The norm the config asks for over `size` features; a layer norm reads `weight` and
    /// `bias` of shape `[size]` under `vb`, an RMS norm reads nothing.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(
        size: usize,
        cfg: &RoFormerConfig,
        vb: VarBuilder<'_>,
    ) -> candle_core::Result<Norm> {
        match cfg.norm_type {
            NormType::LayerNorm => Norm::layer_norm(size, cfg.layer_norm_eps, vb),
            NormType::RmsNorm => Ok(Norm::Rms {
                eps: cfg.layer_norm_eps,
            }),
        }
    }

    /// A layer norm with weight and bias under `vb`, whatever the config's norm type (the MLM
    /// transform always has one).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn layer_norm(size: usize, eps: f64, vb: VarBuilder<'_>) -> candle_core::Result<Norm> {
        Ok(Norm::Layer {
            weight: vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?,
            bias: vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?,
            eps,
        })
    }

    /// `Norm(Dropout(y) + residual)`, the tail of every encoder sub-layer (`y` and `residual`
    /// of one shape `[..., size]`, dropout of probability `p`). A layer norm in training runs
    /// as [`Plan::dropout_add_layer_norm`] (on the CPU one fused op); at inference, and for the
    /// RMS norm, [`Plan::dropout_add`] then [`Norm::forward`]. Either draws one dropout mask.
    ///
    /// # Errors
    /// `y` and `residual` of different shapes, and candle errors.
    pub fn forward_add(
        &self,
        y: &Tensor,
        residual: &Tensor,
        p: f64,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        match self {
            Norm::Layer { weight, bias, eps } if plan.is_train() => {
                plan.dropout_add_layer_norm(y, residual, p, (weight, bias), *eps)
            }
            _ => self.forward(&plan.dropout_add(y, residual, p)?, plan),
        }
    }

    /// Normalises `x` (`[..., size]`) over its last dimension. At inference candle-nn's fused
    /// layer norm runs; in training [`autograd::layer_norm`] / [`autograd::rms_norm`], which
    /// carry gradients to `x`, the weight and the bias.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(&self, x: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        match self {
            Norm::Layer { weight, bias, eps } if plan.is_train() => {
                autograd::layer_norm(x, weight, bias, *eps)
            }
            // candle-nn's fused norm has no f64 kernel; this crate's computes f64 natively.
            Norm::Layer { weight, bias, eps } if x.dtype() == DType::F64 => {
                autograd::layer_norm(x, weight, bias, *eps)
            }
            Norm::Layer { weight, bias, eps } => {
                candle_nn::ops::layer_norm(&x.contiguous()?, weight, bias, *eps as f32)
            }
            Norm::Rms { eps } if plan.is_train() => autograd::rms_norm(x, *eps),
            Norm::Rms { eps } => {
                let dtype = x.dtype();
                let x = match dtype {
                    DType::F16 | DType::BF16 => x.to_dtype(DType::F32)?,
                    _ => x.clone(),
                };
                let mean_square = x.sqr()?.mean_keepdim(D::Minus1)?;
                x.broadcast_div(&(mean_square + *eps)?.sqrt()?)?
                    .to_dtype(dtype)
            }
        }
    }
}
