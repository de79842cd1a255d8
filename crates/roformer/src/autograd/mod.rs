//! Differentiable ops: each fast op beside its slow reference (the same formula composed of
//! candle's differentiable primitives) and its hand-written backward, tested against both.
//!
//! In candle 0.11, `candle_nn::ops::softmax_last_dim` and the fused `candle_nn::ops::layer_norm`
//! (behind `candle_nn::LayerNorm::forward` on contiguous input) have no backward: gradients stop
//! there silently. These ops compute the same values and carry gradients, on any device and
//! dtype (on the CPU as fused kernels: f32 and f64 natively, f16 and bf16 computed in f32;
//! elsewhere their `*_slow` version):
//!
//! - [`softmax_last_dim`]: `y_i = exp(x_i - max x) / sum_k exp(x_k - max x)`,
//!   `dx = y (g - sum(g y))`;
//! - [`layer_norm`]: `y = (x - mean) / sqrt(var + eps) * w + b` (population variance), with
//!   gradients for `x`, `w` and `b`;
//! - [`rms_norm`]: `y = x / sqrt(mean(x^2) + eps)` (RoFormer-V2's weightless norm).
//!
//! The training path's heavy steps are fused ops for f32 tensors on the CPU (crate-private;
//! the pass's [`crate::plan::Plan`] picks them or their `*_slow` twin once). candle's backward
//! pays for every node of the graph: each gradient is accumulated into a zero tensor made for
//! it (`zeros_like`, then `add`), whatever the node (a reshape, a transpose, a broadcast bias,
//! the mask multiply of a dropout), and a product over a broadcast weight (`candle_nn::Linear`
//! on 3D input) runs as one small product per sequence and sums the weight gradient over the
//! batch. These ops replace whole chains of nodes by one node each, whose backward writes every
//! gradient in one pass:
//!
//! - `linear`: `act(x W^T + b)`, the bias preloaded into the output (the product accumulates
//!   onto it), one 2D product over all rows, the erf GELU fused (pre-activation kept for the
//!   backward); backward: `du = g act'(u)`, `dx = du W`, `dW = du^T x`, `db = sum du`;
//! - `attention`: scaled dot-product attention from token-major q, k, v (rotary rotation,
//!   mask, softmax, dropout on the probabilities, context) per (sequence, head, tile of query
//!   rows), without any `[b, h, t, t]` tensor: the backward recomputes the scores of a tile
//!   from q and k and the saved row statistics (its slow reference is the model's own
//!   projections and [`crate::attention::softmax_attention`]);
//! - `dropout`: dropout from a packed [`KeepMask`], alone or fused with the residual add;
//! - `add_norm`: a sub-layer's tail `LayerNorm(Dropout(y) + residual)` (the dropout, the
//!   residual add and the layer norm); backward `ds = rstd (g w - mean(g w) - xh mean(g w xh))`,
//!   `dr = ds`, `dy = ds * f`, `dw = sum g xh`, `db = sum g`, with `s` recomputed from `y`
//!   and `residual`;
//! - `layer_scale`: a pre-norm block's branch joined to the stream, `(a * lambda) * f_s + r`
//!   (layer scale, stochastic depth's per-sample factor, residual add); backward
//!   `da = g f_s lambda`, `dlambda = sum g f_s a`, `dr = g`;
//! - `attention_branch`: a pre-norm block's whole attention half, `x + f_s lambda
//!   o_proj(Attention(qkv(LN(x))))`, the fused attention in the middle; parameters and
//!   gradients as `mlp_branch`'s;
//! - `mlp_branch`: a pre-norm block's whole MLP half, `h + f_s lambda down(gelu(up(LN(h))))`,
//!   its parameters one flat vector (the concatenation of the variables); the backward writes
//!   every gradient once, layer norm, GELU, layer scale, stochastic depth and residual fused
//!   into the passes around the four products;
//! - `chain`: consecutive branches (a stack's pre-norm halves, across blocks) as one op,
//!   `x_{i+1} = F_i(x_i)`, the backward walking them in reverse: candle's zero tensor and add
//!   per node paid once for the stack; given a [`param_grads::ParamGrads`] sink by the pass's
//!   plan, it hands each variable its gradient there, outside candle's graph (no zero tensor
//!   and add per variable at all);
//! - `encoder_layer`: a post-norm encoder layer (RoFormer's) whole, `y = LN_2(Dropout(down(
//!   gelu(up(a)))) + a)`, `a = LN_1(Dropout(o_proj(Attention(qkv(x)))) + x)`, the fused
//!   attention in the middle; parameters one flat vector as `mlp_branch`'s, the backward
//!   writing every gradient once, each tail's layer norm, dropout, residual and bias sum one
//!   row pass (`postnorm`), the dense layers' inputs kept by their producers (`kept_rows`);
//! - `class_features`: a ViT classifier's features `[x[:, 0] ; mean(x[:, p:])]` from the
//!   normed states, candle's `i`, `narrow`, `mean` and `cat` to the bit in one parallel pass
//!   each way;
//! - `cross_entropy`: mean cross entropy over rows of logits with targets, and the arg-max,
//!   in one pass; backward `(softmax - onehot) / n`;
//! - `embedding`: the word and token-type lookups and their sum; backward one scatter of the
//!   rows' gradients into each (zeroed) table.
//!
//! Their plumbing (matrix views, products, row maths, tiling) is the CPU layer's
//! (`crate::cpu`). A new fused op goes here, beside its slow twin, with a test against it.

pub(crate) mod add_norm;
pub(crate) mod attention;
pub(crate) mod attention_branch;
pub(crate) mod chain;
pub(crate) mod class_features;
pub(crate) mod cross_entropy;
pub(crate) mod dropout;
mod element;
pub(crate) mod embedding;
pub(crate) mod encoder_layer;
mod kept_rows;
mod layer_norm;
pub(crate) mod layer_scale;
pub(crate) mod linear;
pub(crate) mod mlp_branch;
pub(crate) mod param_grads;
mod postnorm;
mod prenorm;
mod rms_norm;
mod softmax;

#[cfg(test)]
pub(crate) mod tests;

pub use layer_norm::layer_norm;
pub use rms_norm::rms_norm;
pub use softmax::softmax_last_dim;
// The references and the backward that only the tests call by these names.
#[cfg(test)]
pub use dropout::KeepMask;
#[cfg(test)]
pub use layer_norm::layer_norm_slow;
#[cfg(test)]
pub use rms_norm::rms_norm_slow;
#[cfg(test)]
pub use softmax::{softmax_last_dim_backward, softmax_last_dim_slow};
