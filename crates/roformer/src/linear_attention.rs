//! RoPE with linear attention: the paper's eq. 19.
//!
//! ```text
//!                 sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n
//! Attention_m =  -------------------------------------------,     phi(x) = elu(x) + 1
//!                      sum_n phi(q_m)^T phi(k_n)
//! ```
//!
//! The rotation enters the numerator only: the denominator stays a sum of positive terms
//! (`phi > 0`), so it cannot vanish. `n` runs over every visible key: all of them
//! ([`Masking::Bidirectional`]) or `n <= m` ([`Masking::Causal`]), in both cases without the keys
//! a padding mask drops. No `1/sqrt(d)` scale enters (none does in the paper's eq. 18-19).
//!
//! The cost is linear in the sequence length `N`, because the sums factor through summaries of
//! size `d x d_v` ([`LinearAttention::forward`]):
//! - bidirectional: `KV = sum_n (R_n phi(k_n)) v_n^T` and `z = sum_n phi(k_n)` once, then
//!   `Attention_m = (R_m phi(q_m))^T KV / phi(q_m)^T z`;
//! - causal: the same summaries as prefix sums, computed in chunks of `C` tokens: within a
//!   chunk the explicit masked `C x C` products, across chunks the running summaries of all
//!   earlier chunks. Time `O(N (C + d_v) d)`, memory `O(N C + N d_v + (N / C) d d_v)`.
//!
//! [`linear_attention_slow`] evaluates the formula as written, with the `N x N` matrices of
//! numerator and denominator terms: the reference the fast path is tested against.

use candle_core::{DType, Tensor, D};
use rotary::{rotate_tensor, Coefficients, Direction, Order};

/// Which keys each query sums over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Masking {
    /// Every key (an encoder).
    #[default]
    Bidirectional,
    /// Keys at positions `n <= m` (a decoder).
    Causal,
}

/// Tokens per chunk of the causal prefix sums unless configured otherwise: about the head
/// dimension of common models, where the in-chunk work (`C^2 d` per chunk) and the state work
/// (`C d d_v`) balance.
pub const DEFAULT_CHUNK: usize = 64;

/// Arguments a linear attention call rejects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinearAttentionError {
    /// A chunk size of zero.
    #[error("linear attention: the chunk size must be at least 1")]
    ZeroChunk,
    /// Tensors whose shapes do not fit together.
    #[error("linear attention: {0}")]
    Shape(String),
}

fn shape_error(msg: String) -> candle_core::Error {
    candle_core::Error::wrap(LinearAttentionError::Shape(msg))
}

/// Linear attention (eq. 19) computed in time and memory linear in the sequence length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttention {
    chunk: usize,
}

impl Default for LinearAttention {
    fn default() -> Self {
        LinearAttention {
            chunk: DEFAULT_CHUNK,
        }
    }
}

impl LinearAttention {
    /// Linear attention whose causal prefix sums run in chunks of `chunk` tokens.
    ///
    /// # Errors
    /// [`LinearAttentionError::ZeroChunk`] for `chunk == 0`.
    pub fn new(chunk: usize) -> Result<Self, LinearAttentionError> {
        if chunk == 0 {
            return Err(LinearAttentionError::ZeroChunk);
        }
        Ok(LinearAttention { chunk })
    }

    /// Tokens per chunk of the causal prefix sums.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Eq. 19 for head-major `q`, `k` (`[b, h, t, d]`, not yet rotated) and `v`
    /// (`[b, h, t, d_v]`); returns `[b, h, t, d_v]` in `q`'s dtype.
    ///
    /// - `rope`: the rotation coefficients of the `t` tokens (`t` rows shared by the batch, or
    ///   `b * t`), applied to `phi(q)` and `phi(k)`; `None` for plain linear attention (no
    ///   rotation, `R = I`), the baseline of the paper's Figure 3 (right);
    /// - `key_mask`: `[b, t]`, 1 for keys to attend and 0 for padding (`None`: all keys);
    /// - `masking`: all keys or keys `n <= m`.
    ///
    /// Computed in f32. A query that sees no key at all gets 0 (numerator and denominator are
    /// both 0; the denominator is floored at `f32::MIN_POSITIVE`, which changes nothing else).
    ///
    /// # Errors
    /// [`LinearAttentionError::Shape`] (wrapped in a candle error) for tensors that do not fit
    /// together, and candle or rotary errors.
    pub fn forward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        rope: Option<&Coefficients>,
        key_mask: Option<&Tensor>,
        masking: Masking,
    ) -> candle_core::Result<Tensor> {
        let f = Features::new(q, k, v, rope, key_mask)?;
        let (num, den) = match masking {
            Masking::Bidirectional => f.bidirectional()?,
            Masking::Causal => f.causal(self.chunk)?,
        };
        num.broadcast_div(&den.maximum(f64::from(f32::MIN_POSITIVE))?)?
            .to_dtype(q.dtype())
    }
}

/// Eq. 19 evaluated as written: the `[b, h, t, t]` matrices of numerator terms
/// `(R_m phi(q_m))^T (R_n phi(k_n))` and denominator terms `phi(q_m)^T phi(k_n)`, masked, then
/// `num V / rowsum(den)`. Time and memory `O(N^2)`; the reference for
/// [`LinearAttention::forward`], with the same arguments and result.
///
/// # Errors
/// As [`LinearAttention::forward`].
pub fn linear_attention_slow(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rope: Option<&Coefficients>,
    key_mask: Option<&Tensor>,
    masking: Masking,
) -> candle_core::Result<Tensor> {
    let f = Features::new(q, k, v, rope, key_mask)?;
    let t = f.fq.dim(2)?;
    let mut num = f.rq.matmul(&f.rk.t()?)?; // [b, h, t, t]
    let mut den = f.fq.matmul(&f.fk.t()?)?; // [b, h, t, t]
    if masking == Masking::Causal {
        let tril = Tensor::tril2(t, DType::F32, f.fq.device())?;
        num = num.broadcast_mul(&tril)?;
        den = den.broadcast_mul(&tril)?;
    }
    let num = num.matmul(&f.v)?; // [b, h, t, d_v]
    let den = den.sum_keepdim(D::Minus1)?; // [b, h, t, 1]
    num.broadcast_div(&den.maximum(f64::from(f32::MIN_POSITIVE))?)?
        .to_dtype(q.dtype())
}

/// The `[b, t]` keep-mask (1 attend, 0 padding) of the keys of an additive attention mask as
/// the model builds it: broadcastable to `[b, h, t, t]`, 0 where a query may attend a key and
/// a large negative value where it may not (`[b, 1, 1, t]` for padding, `[b, 1, t, t]` with the
/// causal part). The keys the last query may attend are the unpadded ones (a causal mask hides
/// none from it), so its row is read. `None` (nothing masked) gives `None`.
///
/// # Errors
/// Candle errors when `mask` is not 4D or does not broadcast to `[b, 1, 1, t]`.
pub fn key_mask_from_additive(
    mask: Option<&Tensor>,
    b: usize,
    t: usize,
) -> candle_core::Result<Option<Tensor>> {
    let Some(mask) = mask else {
        return Ok(None);
    };
    let rows = mask.dim(2)?;
    let last = mask.narrow(2, rows.saturating_sub(1), rows.min(1))?;
    let keep = last
        .broadcast_as((b, 1, 1, t))?
        .eq(0.0)?
        .to_dtype(DType::F32)?;
    Ok(Some(keep.reshape((b, t))?))
}

/// The feature map `phi(x) = elu(x) + 1`, positive everywhere.
///
/// # Errors
/// Candle errors only.
pub fn feature_map(x: &Tensor) -> candle_core::Result<Tensor> {
    x.elu(1.0)? + 1.0
}

/// The per-token quantities of eq. 19, all f32 and contiguous `[b, h, t, *]`; masked keys have
/// `phi(k) = 0`, so they drop out of every sum.
struct Features {
    /// `phi(q)`.
    fq: Tensor,
    /// `phi(k)`, masked.
    fk: Tensor,
    /// `R phi(q)`.
    rq: Tensor,
    /// `R phi(k)`, masked.
    rk: Tensor,
    /// `v`.
    v: Tensor,
}

impl Features {
    fn new(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        rope: Option<&Coefficients>,
        key_mask: Option<&Tensor>,
    ) -> candle_core::Result<Self> {
        let (b, h, t, d) = q.dims4()?;
        if k.dims() != q.dims() {
            return Err(shape_error(format!(
                "q is {:?} but k is {:?}",
                q.dims(),
                k.dims()
            )));
        }
        let (vb, vh, vt, _) = v.dims4()?;
        if (vb, vh, vt) != (b, h, t) {
            return Err(shape_error(format!(
                "v is {:?}, expected [{b}, {h}, {t}, d_v]",
                v.dims()
            )));
        }
        if d == 0 {
            return Err(shape_error("head dim 0".into()));
        }
        let rotate = |x: &Tensor| match rope {
            Some(rope) => {
                rotate_tensor(x, rope.clone(), Order::HeadMajor, Direction::Forward)?.contiguous()
            }
            None => Ok(x.clone()),
        };
        let fq = feature_map(&q.to_dtype(DType::F32)?)?.contiguous()?;
        let mut fk = feature_map(&k.to_dtype(DType::F32)?)?;
        if let Some(mask) = key_mask {
            if mask.dims() != [b, t] {
                return Err(shape_error(format!(
                    "key mask is {:?}, expected [{b}, {t}]",
                    mask.dims()
                )));
            }
            let keep = mask.to_dtype(DType::F32)?.reshape((b, 1, t, 1))?;
            fk = fk.broadcast_mul(&keep)?;
        }
        let fk = fk.contiguous()?;
        Ok(Features {
            rq: rotate(&fq)?,
            rk: rotate(&fk)?,
            fq,
            fk,
            v: v.to_dtype(DType::F32)?.contiguous()?,
        })
    }

    /// Numerator `[b, h, t, d_v]` and denominator `[b, h, t, 1]` over all keys, through the
    /// summaries `KV = (R phi(K))^T V` and `z = sum_n phi(k_n)`.
    fn bidirectional(&self) -> candle_core::Result<(Tensor, Tensor)> {
        let kv = self.rk.t()?.matmul(&self.v)?; // [b, h, d, d_v]
        let z = self.fk.sum_keepdim(2)?; // [b, h, 1, d]
        let num = self.rq.matmul(&kv)?; // [b, h, t, d_v]
        let den = self.fq.matmul(&z.t()?)?; // [b, h, t, 1]
        Ok((num, den))
    }

    /// Numerator and denominator over keys `n <= m`, chunk by chunk.
    fn causal(&self, chunk: usize) -> candle_core::Result<(Tensor, Tensor)> {
        let (b, h, t, _) = self.fq.dims4()?;
        let dv = self.v.dim(3)?;
        if chunk == 0 {
            return Err(candle_core::Error::wrap(LinearAttentionError::ZeroChunk));
        }
        if t == 0 {
            let zeros = |w| Tensor::zeros((b, h, 0, w), DType::F32, self.fq.device());
            return Ok((zeros(dv)?, zeros(1)?));
        }
        let c = chunk.min(t);
        let n = t.div_ceil(c);
        // Zero rows pad the sequence to whole chunks: a padded key has phi(k) = 0 (it is padded
        // after phi), so it adds nothing; padded queries are cut off at the end.
        // Batch and heads merge into one dim: [b * h, n, c, w] (candle's CPU matmul takes at
        // most two batch dims laid out contiguously).
        let chunked = |x: &Tensor| -> candle_core::Result<Tensor> {
            let w = x.dim(3)?;
            x.pad_with_zeros(2, 0, n * c - t)?
                .reshape((b * h, n, c, w))?
                .contiguous()
        };
        let (fq, fk, rq, rk, v) = (
            chunked(&self.fq)?,
            chunked(&self.fk)?,
            chunked(&self.rq)?,
            chunked(&self.rk)?,
            chunked(&self.v)?,
        );
        // Within each chunk: the explicit products, lower triangle (n <= m) kept.
        let tril = Tensor::tril2(c, DType::F32, fq.device())?;
        let num_in = rq.matmul(&rk.t()?)?.broadcast_mul(&tril)?.matmul(&v)?; // [bh, n, c, dv]
        let den_in = fq
            .matmul(&fk.t()?)?
            .broadcast_mul(&tril)?
            .sum_keepdim(D::Minus1)?; // [bh, n, c, 1]
                                      // Across chunks: summaries of each chunk, then of all chunks before each one.
        let kv = rk.t()?.matmul(&v)?; // [bh, n, d, dv]
        let z = fk.sum_keepdim(2)?; // [bh, n, 1, d]
        let kv_before = exclusive_prefix_sum(&kv)?;
        let z_before = exclusive_prefix_sum(&z)?;
        let num = (num_in + rq.matmul(&kv_before)?)?;
        let den = (den_in + fq.matmul(&z_before.t()?)?)?;
        let num = num.reshape((b, h, n * c, dv))?.narrow(2, 0, t)?;
        let den = den.reshape((b, h, n * c, 1))?.narrow(2, 0, t)?;
        Ok((num, den))
    }
}

/// `out[:, i] = sum_{j < i} x[:, j]` along dim 1 of a `[a, n, r, s]` tensor, as one running
/// sum (`n` additions of `[a, 1, r, s]`; candle's `cumsum` is a matmul, `O(n^2)`).
fn exclusive_prefix_sum(x: &Tensor) -> candle_core::Result<Tensor> {
    let (a, n, r, s) = x.dims4()?;
    let mut running = Tensor::zeros((a, 1, r, s), DType::F32, x.device())?;
    let mut parts = Vec::with_capacity(n);
    for i in 0..n {
        parts.push(running.clone());
        if i + 1 < n {
            running = (running + x.narrow(1, i, 1)?)?;
        }
    }
    Tensor::cat(&parts, 1)
}

#[cfg(test)]
mod tests;
