//! Grouped-query self-attention with RoPE and a key/value cache.

use candle_core::{Device, Tensor};
use rotary::apply::Order;
use rotary::{apply_rope, Positions, Rope};

use crate::cache::KvCache;
use crate::error::Result;
use crate::linear::Linear;

/// The attention half of a decoder block.
///
/// For a token at position `m`, with `q = x Wq^T`, `k = x Wk^T`, `v = x Wv^T` split into heads,
/// query head `h` attends with key/value head `h / (heads / kv_heads)`:
/// `a = softmax((R_m q) . (R_n k_n) / sqrt(head_dim) for n <= m) . v`, then `o = a Wo^T`.
/// `R` is the rotary embedding, applied once to each new key before it is cached.
#[derive(Debug, Clone)]
pub struct Attention {
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

impl Attention {
    /// Attends `x` (`[batch, t, hidden]`, the tokens after the `cache.len()` cached ones) over
    /// the cache and itself, appending its keys and values to `cache` for `layer`.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        cache: &mut KvCache,
        layer: usize,
    ) -> Result<Tensor> {
        let (batch, t, _) = x.dims3()?;
        let offset = cache.len();
        let heads = |proj: &Linear, n: usize| -> Result<Tensor> {
            Ok(proj.forward(x)?.reshape((batch, t, n, self.head_dim))?)
        };
        // Rotated in the token-major layout the projection writes: no transpose before RoPE.
        let at = Positions::Range { offset };
        let q = apply_rope(&heads(&self.q, self.heads)?, rope, at, Order::TokenMajor)?;
        let k = apply_rope(&heads(&self.k, self.kv_heads)?, rope, at, Order::TokenMajor)?;
        let v = heads(&self.v, self.kv_heads)?;
        let q = q.transpose(1, 2)?.contiguous()?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let (keys, values) = cache.append(layer, &k, &v)?;
        let total = offset + t;

        // Query heads sharing a key/value head are stacked as rows of one product:
        // [b, kv, groups * t, d] x [b, kv, d, total].
        let groups = self.heads / self.kv_heads;
        let q = q.reshape((batch, self.kv_heads, groups * t, self.head_dim))?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&keys.t()?)? * scale)?;
        let scores = if t > 1 {
            let scores = scores.reshape((batch, self.kv_heads, groups, t, total))?;
            let mask = causal_mask(t, offset, x.device())?;
            scores
                .broadcast_add(&mask)?
                .reshape((batch, self.kv_heads, groups * t, total))?
        } else {
            scores
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let mixed = weights.matmul(&values)?; // [b, kv, groups * t, d]
        let mixed = mixed
            .reshape((batch, self.heads, t, self.head_dim))?
            .transpose(1, 2)?
            .reshape((batch, t, self.heads * self.head_dim))?;
        self.o.forward(&mixed)
    }
}

/// `[t, offset + t]`: 0 where query `i` (at position `offset + i`) may see key `j`
/// (`j <= offset + i`), `-inf` elsewhere.
fn causal_mask(t: usize, offset: usize, device: &Device) -> Result<Tensor> {
    let total = offset + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j <= offset + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(mask, (t, total), device)?)
}
