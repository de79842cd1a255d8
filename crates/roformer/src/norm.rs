//! The normalisation of a block: transformers' `LayerNorm`, or RoFormer-V2's weightless RMS norm.

use candle_core::{DType, Tensor, D};
use candle_nn::{LayerNorm, LayerNormConfig, Module, VarBuilder};

use crate::config::{NormType, RoFormerConfig};

/// A normalisation over the last dimension.
#[derive(Debug, Clone)]
pub enum Norm {
    /// `(x - mean) / sqrt(var + eps) * weight + bias` (`nn.LayerNorm`; tensors `weight`, `bias`).
    Layer(LayerNorm),
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
        let config = LayerNormConfig {
            eps,
            ..LayerNormConfig::default()
        };
        Ok(Norm::Layer(candle_nn::layer_norm(size, config, vb)?))
    }

    /// Normalises `x` (`[..., size]`) over its last dimension.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Norm::Layer(ln) => ln.forward(&x.contiguous()?),
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
