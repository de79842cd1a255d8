//! Grouped-query self-attention with RoPE and a key/value cache.

use candle_core::{Device, Tensor};
use rotary::apply::Order;
use rotary::{apply_rope, Positions, Rope};

use crate::cache::KvCache;
use crate::error::Result;
use crate::linear::{Linear, Stacked};

/// The attention half of a decoder block.
///
/// For a token at position `m`, with `q = x Wq^T`, `k = x Wk^T`, `v = x Wv^T` split into heads,
/// query head `h` attends with key/value head `h / (heads / kv_heads)`:
/// `a = softmax((R_m q) . (R_n k_n) / sqrt(head_dim) for n <= m) . v`, then `o = a Wo^T`.
/// `R` is the rotary embedding, applied once to each new key before it is cached.
#[derive(Debug, Clone)]
pub struct Attention {
    /// The q, k and v projections (one product when they stack).
    pub(crate) qkv: Stacked<3>,
    pub(crate) o: Linear,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

/// Rotated queries and keys, and values, of some tokens, token-major:
/// `[batch, t, heads or kv_heads, head_dim]`.
struct Projected {
    q: Tensor,
    k: Tensor,
    v: Tensor,
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
        let at = Positions::Range {
            offset: cache.len(),
        };
        let p = self.project(x, rope, at)?;
        let mixed = self.attend(&p, cache, layer)?;
        self.o.forward(&mixed)
    }

    /// Attends the rows of `x` (`[1, n, hidden]`: the new tokens of several sequences, one
    /// after the other, `lens[s]` rows for sequence `s`) each over its own sequence's cache,
    /// appending its keys and values there for `layer`. Row `r` sits at `positions[r]` (its
    /// sequence's cache length plus its index in the sequence's rows).
    ///
    /// The projections run once over all `n` rows; only the attention itself runs per
    /// sequence, with the same operations as [`Attention::forward`] on that sequence alone.
    pub(crate) fn forward_ragged(
        &self,
        x: &Tensor,
        rope: &Rope,
        positions: &[u32],
        caches: &mut [&mut KvCache],
        lens: &[usize],
        layer: usize,
    ) -> Result<Tensor> {
        let all = self.project(x, rope, Positions::Explicit(positions))?;
        let mut mixed = Vec::with_capacity(caches.len());
        let mut start = 0;
        for (cache, &t) in caches.iter_mut().zip(lens) {
            let rows = |x: &Tensor| x.narrow(1, start, t);
            let one = Projected {
                q: rows(&all.q)?,
                k: rows(&all.k)?,
                v: rows(&all.v)?,
            };
            mixed.push(self.attend(&one, cache, layer)?);
            start += t;
        }
        // [1, n, heads * head_dim]
        self.o.forward(&Tensor::cat(&mixed, 1)?)
    }

    /// The rotated queries and keys, and the values, of `x` (`[batch, t, hidden]`) at `at`.
    fn project(&self, x: &Tensor, rope: &Rope, at: Positions<'_>) -> Result<Projected> {
        let (batch, t, _) = x.dims3()?;
        let [q, k, v] = self.qkv.forward(x)?;
        // [batch, t, n, head_dim] (a copy when the projection is a slice of a stacked one)
        let heads = |y: Tensor, n: usize| y.reshape((batch, t, n, self.head_dim));
        // Rotated in the token-major layout the projection writes: no transpose before RoPE.
        Ok(Projected {
            q: apply_rope(&heads(q, self.heads)?, rope, at, Order::TokenMajor)?,
            k: apply_rope(&heads(k, self.kv_heads)?, rope, at, Order::TokenMajor)?,
            v: heads(v, self.kv_heads)?,
        })
    }

    /// Appends the keys and values of `p` (`[batch, t, ., head_dim]`, the tokens after the
    /// `cache.len()` cached ones) to `cache` for `layer` and attends the queries over the
    /// cache: the heads' mixed values, `[batch, t, heads * head_dim]`, before `Wo`.
    fn attend(&self, p: &Projected, cache: &mut KvCache, layer: usize) -> Result<Tensor> {
        let (batch, t, _, _) = p.q.dims4()?;
        let offset = cache.len();
        let q = p.q.transpose(1, 2)?.contiguous()?;
        let k = p.k.transpose(1, 2)?.contiguous()?;
        let v = p.v.transpose(1, 2)?.contiguous()?;
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
            let mask = causal_mask(t, offset, q.device())?;
            scores
                .broadcast_add(&mask)?
                .reshape((batch, self.kv_heads, groups * t, total))?
        } else {
            scores
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let mixed = weights.matmul(&values)?; // [b, kv, groups * t, d]
        Ok(mixed
            .reshape((batch, self.heads, t, self.head_dim))?
            .transpose(1, 2)?
            .reshape((batch, t, self.heads * self.head_dim))?)
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
