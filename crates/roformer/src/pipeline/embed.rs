//! Embeddings: one vector per text, pooled from the encoder's last hidden states.
//!
//! With `h` the last hidden states `[t, hidden]` of a text and `m` its attention mask:
//! - [`Pooling::Cls`]: `h[0]`, the `[CLS]` token's state;
//! - [`Pooling::Mean`]: `sum_i m_i h[i] / sum_i m_i`, the mean over the text's tokens, `[CLS]`
//!   and `[SEP]` included, padding excluded.
//!
//! With `normalize`, each vector is divided by its L2 norm (computed in f64; a zero vector
//! stays zero).

use candle_core::{DType, Tensor};
use rotary::finite::first_non_finite;

use super::batch::Padded;
use super::error::PipelineError;
use crate::{Encoding, RoFormerModel};

/// How a text's token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Pooling {
    /// The last hidden state of the `[CLS]` token.
    Cls,
    /// The mean of the last hidden states of the text's tokens (`[CLS]` and `[SEP]` included).
    #[default]
    Mean,
}

impl Pooling {
    /// The name: `cls` or `mean`.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Cls => "cls",
            Pooling::Mean => "mean",
        }
    }
}

/// Where a text's hidden states (or its pooled vector) are first not finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonFinite {
    /// The token's index in `[CLS] text [SEP]` (0 when the states are finite but their mean
    /// overflows).
    pub token: usize,
    /// The hidden dimension.
    pub dim: usize,
    /// The value.
    pub value: f32,
}

/// Pads `batch` (with `pad_id`) to its longest encoding, runs the encoder and pools each text:
/// its vector (L2-normalised with `normalize`), or where its hidden states are first not
/// finite.
///
/// # Errors
/// Model errors only; a non-finite text is an `Err` in its own slot.
pub fn embed(
    model: &RoFormerModel,
    batch: &[&Encoding],
    pooling: Pooling,
    normalize: bool,
    pad_id: u32,
) -> Result<Vec<Result<Vec<f32>, NonFinite>>, PipelineError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let padded = Padded::new(batch, pad_id, model.device())?;
    let hidden = model.forward(&padded.ids, Some(&padded.types), padded.model_mask(), None)?; // [b, t, hidden]
    let pooled = match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        Pooling::Mean => {
            // Padding rows are selected away, not multiplied by 0: 0 * inf would be NaN. The
            // same ops run with and without padding, so a text's vector does not depend on
            // what it is batched with (the sum adds exact zeros for the padding).
            let mask = &padded.mask;
            let keep = mask.unsqueeze(2)?.broadcast_as(hidden.shape())?.ne(0f32)?;
            let kept = keep.where_cond(&hidden, &hidden.zeros_like()?)?;
            kept.sum(1)?.broadcast_div(&mask.sum_keepdim(1)?)? // [b, hidden]
        }
    };
    let pooled = pooled.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    let mut out = Vec::with_capacity(batch.len());
    for (row, vector) in pooled.into_iter().enumerate() {
        if first_non_finite(&vector).is_some() {
            out.push(Err(locate(&hidden, batch[row].len(), row, &vector)?));
        } else if normalize {
            out.push(Ok(l2_normalized(vector)));
        } else {
            out.push(Ok(vector));
        }
    }
    Ok(out)
}

/// The first non-finite hidden state of text `row` (`len` tokens), or, when its states are
/// finite and only their mean overflows, the first non-finite value of `vector`.
fn locate(
    hidden: &Tensor,
    len: usize,
    row: usize,
    vector: &[f32],
) -> candle_core::Result<NonFinite> {
    let states = hidden.get(row)?.narrow(0, 0, len)?.to_dtype(DType::F32)?; // [len, hidden]
    let dims = states.dim(1)?.max(1);
    let flat = states.flatten_all()?.to_vec1::<f32>()?;
    Ok(match first_non_finite(&flat) {
        Some(bad) => NonFinite {
            token: bad.index / dims,
            dim: bad.index % dims,
            value: bad.value,
        },
        None => {
            let bad = first_non_finite(vector);
            NonFinite {
                token: 0,
                dim: bad.map_or(0, |bad| bad.index),
                value: bad.map_or(f32::NAN, |bad| bad.value),
            }
        }
    })
}

/// `v / |v|`, the norm summed in f64; a zero vector is returned as it is.
pub(crate) fn l2_normalized(v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if norm == 0.0 {
        return v;
    }
    v.into_iter()
        .map(|x| (f64::from(x) / norm) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_gives_unit_vectors_and_keeps_zero() {
        let v = l2_normalized(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(l2_normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}
