//! TEMPORARY composite versions (replaced by the fast ops with backward).

use candle_core::{Tensor, D};

/// Softmax over the last dimension, differentiable.
///
/// # Errors
/// Candle errors only.
pub fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// Layer norm over the last dimension, differentiable.
///
/// # Errors
/// Candle errors only.
pub fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let c = x.broadcast_sub(&mean)?;
    let var = c.sqr()?.mean_keepdim(D::Minus1)?;
    c.broadcast_div(&(var + eps)?.sqrt()?)?
        .broadcast_mul(weight)?
        .broadcast_add(bias)
}

/// Weightless RMS norm over the last dimension, differentiable.
///
/// # Errors
/// Candle errors only.
pub fn rms_norm(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + eps)?.sqrt()?)
}
