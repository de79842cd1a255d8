//! Differentiable versions of the ops the model needs for training.
//!
//! In candle 0.11, `candle_nn::ops::softmax_last_dim` and the fused `candle_nn::ops::layer_norm`
//! (behind `candle_nn::LayerNorm::forward` on contiguous input) have no backward: gradients stop
//! there silently. The ops here compute the same values and carry gradients:
//!
//! - [`softmax_last_dim`]: `y_i = exp(x_i - max x) / sum_k exp(x_k - max x)`,
//!   `dx = y (g - sum(g y))`;
//! - [`layer_norm`]: `y = (x - mean) / sqrt(var + eps) * w + b` (population variance), with
//!   gradients for `x`, `w` and `b`;
//! - [`rms_norm`]: `y = x / sqrt(mean(x^2) + eps)` (RoFormer-V2's weightless norm).
//!
//! On the CPU each runs as a candle custom op with fused kernels for the forward and the
//! backward (f32 and f64 natively, f16 and bf16 computed in f32; rows spread over rayon's
//! threads when the tensor is large). On other devices each falls back to its `*_slow`
//! version, the same formula composed of candle's differentiable primitives, which the tests
//! also use as the reference.

mod element;
mod layer_norm;
mod rms_norm;
mod softmax;

#[cfg(test)]
mod tests;

pub use layer_norm::{layer_norm, layer_norm_slow};
pub use rms_norm::{rms_norm, rms_norm_slow};
pub use softmax::{softmax_last_dim, softmax_last_dim_backward, softmax_last_dim_slow};
