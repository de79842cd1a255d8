//! Positions as a bias on the attention scores: ALiBi and T5's relative buckets.
//!
//! Both add a per-head bias `B[h, i, j]` to the scaled scores of every layer, and nothing to the
//! embeddings or to q and k:
//!
//! ```text
//! S[h, i, j] = q_i . k_j / sqrt(d) + B[h, i, j] + mask[i, j]
//! ```
//!
//! - **ALiBi** (Press et al. 2022, "Train Short, Test Long"), bidirectional:
//!   `B[h, i, j] = -m_h |p_j - p_i|` with the fixed head slopes of [`alibi_slopes`]; no
//!   parameter. A decoder (`is_decoder`) masks `j > i`, where this is the paper's causal
//!   `-m_h (p_i - p_j)`.
//! - **T5 relative bias** (Raffel et al. 2020): `B[h, i, j] = W[bucket(p_j - p_i), h]`, `W`
//!   the learned table `[num_buckets, heads]` (`encoder.relative_attention_bias.weight`,
//!   T5's `relative_attention_bias` as an `nn.Embedding(num_buckets, heads)`), shared by every
//!   layer as in T5 (computed once per forward pass), buckets of [`t5_bucket`]. T5 itself adds
//!   the bias to unscaled scores (it folds `1/sqrt(d)` into its initialisation); here the
//!   scores stay scaled as in the rest of the model.
//!
//! `p_i` is the position of token `i` (`position_ids`, default `0..t`). The bias is
//! `[1 or b, heads, t, t]`: one per sequence only when positions are given per sequence.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rotary::Positions;

use crate::config::{PositionEmbeddingType, RoFormerConfig};
use crate::error::{ModelError, Result};

/// The ALiBi head slopes `m_1 .. m_n` for `n` heads (Press et al., and their reference code):
///
/// ```text
/// n a power of two:  m_h = 2^(-8h/n),                        h = 1..n
/// otherwise, n' = 2^floor(log2 n) (the power of two below n):
///                    m_h = 2^(-8h/n'),                       h = 1..n'
///                    then m_{n'+k} = 2^(-4(2k-1)/n'),         k = 1..n-n'
/// ```
///
/// (the extra slopes are every other slope of `2n'` heads, `2^(-8(2k-1)/(2n'))`, interleaving
/// the first ones). Computed in f64; empty for `n = 0`.
pub fn alibi_slopes(n: usize) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    let below = 1usize << n.ilog2(); // n'
    let power = |h: usize, of: usize| 2f64.powf(-8.0 * h as f64 / of as f64);
    (1..=below)
        .map(|h| power(h, below))
        .chain((1..=n - below).map(|k| power(2 * k - 1, 2 * below)))
        .collect()
}

/// T5's bucket of the relative position `relative = p_j - p_i` (key minus query), as
/// transformers' `T5Attention._relative_position_bucket` computes it:
///
/// ```text
/// bidirectional: n = num_buckets / 2, offset = n if relative > 0 else 0, r = |relative|
/// causal:        n = num_buckets,     offset = 0,  r = max(-relative, 0)
/// e = n / 2 (exact buckets)
/// bucket = offset + r                                                        if r < e
///        = offset + min(e + floor(ln(r/e) / ln(max_distance/e) * (n - e)), n - 1)  otherwise
/// ```
///
/// in f32, as PyTorch computes the logarithm. A validated config has `num_buckets >= 4` and
/// `max_distance > e`; other values give a bucket below `num_buckets` all the same (`e = 0`
/// puts every distance in the last bucket of its side).
pub fn t5_bucket(
    relative: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let (n, offset, r) = if bidirectional {
        let n = num_buckets / 2;
        (n, if relative > 0 { n } else { 0 }, relative.unsigned_abs())
    } else {
        (num_buckets, 0, (-relative).max(0).unsigned_abs())
    };
    let exact = n / 2;
    if r < exact as u64 {
        return offset + r as usize;
    }
    let last = n.saturating_sub(1);
    if exact == 0 {
        return offset + last;
    }
    let log_ratio = (r as f32 / exact as f32).ln() / (max_distance as f32 / exact as f32).ln();
    let large = exact as f32 + log_ratio * (n - exact) as f32;
    // A NaN (max_distance == e) or a huge value lands in the last bucket.
    let large = if large.is_finite() && large >= 0.0 {
        (large as usize).min(last)
    } else {
        last
    };
    offset + large
}

/// The attention bias of a config's position type, if it has one.
#[derive(Debug, Clone)]
pub enum PositionBias {
    /// ALiBi: `-m_h |p_j - p_i|`.
    Alibi {
        /// The head slopes, [`alibi_slopes`].
        slopes: Vec<f64>,
    },
    /// T5: `W[bucket(p_j - p_i), h]`.
    T5 {
        /// `W`, `[num_buckets, heads]` (a variable in training).
        table: Tensor,
        /// Buckets of `relative_attention_num_buckets`.
        num_buckets: usize,
        /// `relative_attention_max_distance`.
        max_distance: usize,
        /// Bidirectional buckets (an encoder), or causal ones (`is_decoder`).
        bidirectional: bool,
    },
}

impl PositionBias {
    /// The bias of `cfg`'s position type: `None` unless it is `alibi` or `t5_relative`; for
    /// T5 the table `relative_attention_bias.weight` (`[num_buckets, heads]`) under `vb` (the
    /// `encoder` scope).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Option<Self>> {
        Ok(match cfg.position_embedding_type {
            PositionEmbeddingType::Alibi => Some(PositionBias::Alibi {
                slopes: alibi_slopes(cfg.num_attention_heads),
            }),
            PositionEmbeddingType::T5Relative => Some(PositionBias::T5 {
                table: vb.pp("relative_attention_bias").get(
                    (cfg.relative_attention_num_buckets, cfg.num_attention_heads),
                    "weight",
                )?,
                num_buckets: cfg.relative_attention_num_buckets,
                max_distance: cfg.relative_attention_max_distance,
                bidirectional: !cfg.is_decoder,
            }),
            _ => None,
        })
    }

    /// The bias `[rows, heads, t, t]` of `b` sequences of `t` tokens at `positions`: `rows = b`
    /// for explicit positions per sequence (`b * t`, sequence-major), 1 for a range or `t`
    /// positions shared by every sequence; in `dtype` on `device`. T5's carries the table's
    /// gradient.
    ///
    /// # Errors
    /// [`ModelError::Input`] for fractional positions, explicit positions of another length, or
    /// `t` that does not fit u32 positions; candle errors.
    pub fn bias(
        &self,
        positions: Positions<'_>,
        b: usize,
        t: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let (rows, relative) = relative_positions(positions, b, t)?;
        let bias = match self {
            PositionBias::Alibi { slopes } => {
                let heads = slopes.len();
                let mut data = Vec::with_capacity(rows * heads * t * t);
                for row in relative.chunks_exact((t * t).max(1)).take(rows) {
                    for &m in slopes {
                        data.extend(row.iter().map(|&r| (-m * r.unsigned_abs() as f64) as f32));
                    }
                }
                Tensor::from_vec(data, (rows, heads, t, t), device)?.to_dtype(dtype)?
            }
            PositionBias::T5 {
                table,
                num_buckets,
                max_distance,
                bidirectional,
            } => {
                let heads = table.dim(1)?;
                let buckets: Vec<u32> = relative
                    .iter()
                    .map(|&r| t5_bucket(r, *bidirectional, *num_buckets, *max_distance) as u32)
                    .collect();
                let ids = Tensor::from_vec(buckets, rows * t * t, device)?;
                table
                    .index_select(&ids, 0)? // [rows * t * t, heads]
                    .reshape((rows, t, t, heads))?
                    .permute((0, 3, 1, 2))?
                    .contiguous()?
                    .to_dtype(dtype)?
            }
        };
        Ok(bias)
    }
}

/// `p_j - p_i` for every (sequence, query `i`, key `j`), `[rows, t, t]` flattened, with
/// `rows = b` for per-sequence positions and 1 for positions shared by every sequence (a range:
/// its offset cancels in the differences).
fn relative_positions(positions: Positions<'_>, b: usize, t: usize) -> Result<(usize, Vec<i64>)> {
    let default: Vec<u32>;
    let (ids, rows) = match positions {
        Positions::Explicit(p) if p.len() == t => (p, 1),
        Positions::Explicit(p) if p.len() == b * t => (p, b),
        Positions::Explicit(p) => {
            return Err(ModelError::Input(format!(
                "{} positions for {b} sequences of {t} tokens (give {t} or {})",
                p.len(),
                b * t
            )))
        }
        Positions::Fractional(_) => {
            return Err(ModelError::Input(
                "ALiBi and T5 relative positions take integer positions, not fractional ones"
                    .into(),
            ))
        }
        Positions::Range { .. } => {
            let t32 = u32::try_from(t)
                .map_err(|_| ModelError::Input(format!("{t} tokens do not fit u32 positions")))?;
            default = (0..t32).collect();
            (&default[..], 1)
        }
    };
    let mut relative = Vec::with_capacity(rows * t * t);
    for seq in ids.chunks_exact(t.max(1)).take(rows) {
        for &pi in seq {
            relative.extend(seq.iter().map(|&pj| i64::from(pj) - i64::from(pi)));
        }
    }
    Ok((rows, relative))
}

#[cfg(test)]
mod tests;
