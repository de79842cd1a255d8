//! Grouped-query self-attention with RoPE and a key/value cache.

use candle_core::Tensor;
use rotary::apply::{Direction, Shape};
use rotary::{Positions, Rope};

use crate::cache::KvCache;
use crate::cached_attention::{self, Heads, Queries};
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
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
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
        let p = self.project(x, rope, Positions::Range { offset })?;
        let cache = cache.append(layer, &p.k, &p.v)?;
        let width = self.heads * self.head_dim;
        let queries: Vec<Queries<'_>> =
            p.q.chunks_exact(t * width)
                .enumerate()
                .map(|(sequence, q)| Queries {
                    q,
                    cache,
                    sequence,
                    offset,
                })
                .collect();
        // [batch, t, heads * head_dim]
        let mut mixed = vec![0f32; batch * t * width];
        cached_attention::attend(self.shape(), &queries, &mut mixed);
        self.o
            .forward(&Tensor::from_vec(mixed, (batch, t, width), x.device())?)
    }

    /// Attends the rows of `x` (`[1, n, hidden]`: the new tokens of several sequences, one
    /// after the other, `lens[s]` rows for sequence `s`) each over its own sequence's cache,
    /// appending its keys and values there for `layer`. Row `r` sits at `positions[r]` (its
    /// sequence's cache length plus its index in the sequence's rows).
    ///
    /// The projections run once over all `n` rows, and attention once over every (sequence,
    /// head) pair, each computed as [`Attention::forward`] computes it for that sequence alone.
    pub(crate) fn forward_ragged(
        &self,
        x: &Tensor,
        rope: &Rope,
        positions: &[u32],
        caches: &mut [&mut KvCache],
        lens: &[usize],
        layer: usize,
    ) -> Result<Tensor> {
        let n = x.dim(1)?;
        let all = self.project(x, rope, Positions::Explicit(positions))?;
        let (width, kv_width) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        let mut queries = Vec::with_capacity(caches.len());
        let mut start = 0;
        for (cache, &t) in caches.iter_mut().zip(lens) {
            let kv = start * kv_width..(start + t) * kv_width;
            let offset = cache.len();
            queries.push(Queries {
                q: &all.q[start * width..(start + t) * width],
                cache: cache.append(layer, &all.k[kv.clone()], &all.v[kv])?,
                sequence: 0,
                offset,
            });
            start += t;
        }
        // [1, n, heads * head_dim]
        let mut mixed = vec![0f32; n * width];
        cached_attention::attend(self.shape(), &queries, &mut mixed);
        self.o
            .forward(&Tensor::from_vec(mixed, (1, n, width), x.device())?)
    }

    /// The layer's head counts and size, as the kernel takes them.
    fn shape(&self) -> Heads {
        Heads {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// The rotated queries and keys, and the values, of `x` (`[batch, t, hidden]`) at `at`,
    /// token-major: `[batch, t, heads or kv_heads, head_dim]`. Rotated in place, in the layout
    /// the projection writes: no transpose before RoPE, one table lookup for q and k.
    fn project(&self, x: &Tensor, rope: &Rope, at: Positions<'_>) -> Result<Projected> {
        let (batch, t, _) = x.dims3()?;
        let [q, k, v] = self.qkv.forward(x)?;
        let values = |y: Tensor| y.flatten_all()?.to_vec1::<f32>();
        let (mut q, mut k) = (values(q)?, values(k)?);
        let shape = |heads: usize| Shape::token_major(batch, t, heads, self.head_dim);
        rope.apply_qk_inplace(
            &mut q,
            shape(self.heads),
            &mut k,
            shape(self.kv_heads),
            at,
            Direction::Forward,
        )?;
        Ok(Projected {
            q,
            k,
            v: values(v)?,
        })
    }
}
