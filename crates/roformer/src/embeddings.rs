//! Token embeddings: transformers' `RoFormerEmbeddings` and `embeddings_project`, and
//! `BertEmbeddings` when positions are absolute.
//!
//! ```text
//! e = Norm(word[input_ids] + token_type[token_type_ids] (+ P[position_ids]))   [b, t, embedding_size]
//! e = Dropout(e)                                                                (training)
//! e = e Wp + bp          when embedding_size != hidden_size                     [b, t, hidden_size]
//! ```
//!
//! `P` is the learned table `embeddings.position_embeddings` (absolute, BERT) or the fixed
//! sinusoidal table (sinusoidal); with rotary (RoFormer), ALiBi, T5 or no positions nothing is
//! added here: those positions enter through the attention.

use candle_core::{Device, Tensor, D};
use candle_nn::{Embedding, Linear, Module, VarBuilder};

use crate::attention::dense;
use crate::autograd::embedding::{embed, embed_slow};
use crate::config::{PositionEmbeddingType, RoFormerConfig};
use crate::error::{ModelError, Result};
use crate::norm::Norm;
use crate::plan::Plan;

/// The positions table added to the word embeddings, if any.
#[derive(Debug, Clone)]
enum PositionTable {
    /// Nothing added (rotary or no positions).
    None,
    /// `embeddings.position_embeddings.weight`, `[max_position_embeddings, embedding_size]`.
    Learned(Embedding),
    /// Vaswani et al.'s table of this amplitude, computed for the positions asked for.
    Sinusoidal(f64),
}

/// The embedding block of the encoder scope (`roformer` or `bert`).
#[derive(Debug, Clone)]
pub struct Embeddings {
    word: Embedding,
    token_type: Embedding,
    positions: PositionTable,
    norm: Norm,
    dropout: f64,
    project: Option<Linear>,
}

/// The fixed sinusoidal position table of Vaswani et al. for `positions`, `[n, width]`, of
/// amplitude `a` ([`RoFormerConfig::sinusoidal_amplitude`]):
/// `P[m, 2i] = a sin(m w_i)`, `P[m, 2i+1] = a cos(m w_i)`, `w_i = 10000^(-2i / width)`; computed
/// in f64, rounded once to f32. An odd `width` leaves the last column as `sin`.
///
/// # Errors
/// Candle errors only.
pub fn sinusoidal_table(
    positions: &[u32],
    width: usize,
    amplitude: f64,
    device: &Device,
) -> Result<Tensor> {
    let inv: Vec<f64> = (0..width.div_ceil(2))
        .map(|i| 10000f64.powf(-((2 * i) as f64) / width as f64))
        .collect();
    let mut data = Vec::with_capacity(positions.len() * width);
    for &m in positions {
        for c in 0..width {
            let angle = f64::from(m) * inv[c / 2];
            let wave = if c % 2 == 0 { angle.sin() } else { angle.cos() };
            data.push((amplitude * wave) as f32);
        }
    }
    Ok(Tensor::from_vec(data, (positions.len(), width), device)?)
}

impl Embeddings {
    /// Loads `embeddings.word_embeddings` (`[vocab_size, embedding_size]`),
    /// `embeddings.token_type_embeddings` (`[type_vocab_size, embedding_size]`),
    /// `embeddings.position_embeddings` (`[max_position_embeddings, embedding_size]`, absolute
    /// positions only), `embeddings.LayerNorm` and, when `embedding_size != hidden_size`,
    /// `embeddings_project` (`[hidden_size, embedding_size]` weight with bias), all under `vb`
    /// (the encoder scope).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Self> {
        let e = cfg.embedding_size;
        let emb = vb.pp("embeddings");
        let project = if e != cfg.hidden_size {
            Some(candle_nn::linear(
                e,
                cfg.hidden_size,
                vb.pp("embeddings_project"),
            )?)
        } else {
            None
        };
        let positions = match cfg.position_embedding_type {
            PositionEmbeddingType::Absolute => PositionTable::Learned(candle_nn::embedding(
                cfg.max_position_embeddings,
                e,
                emb.pp("position_embeddings"),
            )?),
            PositionEmbeddingType::Sinusoidal => {
                PositionTable::Sinusoidal(cfg.sinusoidal_amplitude)
            }
            PositionEmbeddingType::Rotary
            | PositionEmbeddingType::Alibi
            | PositionEmbeddingType::T5Relative
            | PositionEmbeddingType::None => PositionTable::None,
        };
        Ok(Embeddings {
            word: candle_nn::embedding(cfg.vocab_size, e, emb.pp("word_embeddings"))?,
            token_type: candle_nn::embedding(
                cfg.type_vocab_size,
                e,
                emb.pp("token_type_embeddings"),
            )?,
            positions,
            norm: Norm::load(e, cfg, emb.pp("LayerNorm"))?,
            dropout: cfg.hidden_dropout_prob,
            project,
        })
    }

    /// The word embedding matrix, `[vocab_size, embedding_size]` (the tied MLM decoder).
    pub fn word_embeddings(&self) -> &Tensor {
        self.word.embeddings()
    }

    /// The added position embeddings `[b or 1, t, embedding_size]` of the tokens, or `None`
    /// when positions do not enter here. `positions` holds one position per token
    /// (sequence-major), `None` meaning `0..t` for every sequence.
    fn position_embeddings(
        &self,
        positions: Option<&[u32]>,
        b: usize,
        t: usize,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let width = self.word.embeddings().dim(D::Minus1)?;
        let default: Vec<u32>;
        let (ids, rows) = match positions {
            Some(p) => (p, b),
            None => {
                let t32 = u32::try_from(t).map_err(|_| {
                    ModelError::Input(format!("{t} tokens do not fit u32 positions"))
                })?;
                default = (0..t32).collect();
                (&default[..], 1)
            }
        };
        match &self.positions {
            PositionTable::None => Ok(None),
            PositionTable::Sinusoidal(amplitude) => Ok(Some(
                sinusoidal_table(ids, width, *amplitude, device)?.reshape((rows, t, width))?,
            )),
            PositionTable::Learned(table) => {
                let limit = table.embeddings().dim(0)?;
                if let Some(i) = ids.iter().position(|&p| p as usize >= limit) {
                    return Err(ModelError::Input(format!(
                        "position {} of token {i} is past the absolute position table \
                         (max_position_embeddings = {limit}); rotary or sinusoidal positions \
                         have no such limit",
                        ids[i]
                    )));
                }
                let ids = Tensor::from_slice(ids, (rows, t), device)?;
                Ok(Some(table.forward(&ids)?))
            }
        }
    }

    /// Embeds validated `u32` ids `[b, t]` (type ids `None` means all 0) at `positions` (one
    /// per token, sequence-major; `None` means `0..t`) into `[b, t, hidden]`.
    ///
    /// # Errors
    /// [`ModelError::Input`] for a position past an absolute table, candle errors otherwise.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        positions: Option<&[u32]>,
        plan: Plan<'_>,
    ) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        let (word, types) = (self.word.embeddings(), self.token_type.embeddings());
        let mut sum = if plan.fused_training().is_some() {
            // One op, whose backward scatters into each table once.
            let ids = input_ids.flatten_all()?.to_vec1::<u32>()?;
            let type_ids = match token_type_ids {
                Some(t) => Some(t.flatten_all()?.to_vec1::<u32>()?),
                None => None,
            };
            embed(word, types, ids, type_ids, (b, t))?
        } else {
            embed_slow(&self.word, &self.token_type, input_ids, token_type_ids)?
        };
        if let Some(p) = self.position_embeddings(positions, b, t, input_ids.device())? {
            sum = sum.broadcast_add(&p.to_dtype(sum.dtype())?)?;
        }
        let e = plan.dropout(&self.norm.forward(&sum, plan)?, self.dropout)?;
        match &self.project {
            Some(p) => Ok(dense(p, &e, None, plan)?),
            None => Ok(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinusoidal_pairs_lie_on_a_circle_of_the_amplitude() {
        let positions = [0u32, 1, 7, 127, 4096];
        for amplitude in [0.02, 1.0] {
            let table = sinusoidal_table(&positions, 8, amplitude, &Device::Cpu).unwrap();
            let rows: Vec<Vec<f32>> = table.to_vec2().unwrap();
            for (row, &m) in rows.iter().zip(&positions) {
                for i in 0..4 {
                    let (s, c) = (f64::from(row[2 * i]), f64::from(row[2 * i + 1]));
                    let radius = (s * s + c * c).sqrt();
                    // f32 rounding of each entry: a relative 6e-8, doubled for the sum.
                    assert!((radius - amplitude).abs() < 2e-7 * amplitude, "{m} {i}");
                    let angle = f64::from(m) * 10000f64.powf(-(2.0 * i as f64) / 8.0);
                    assert!((s - amplitude * angle.sin()).abs() < 1e-7 * amplitude);
                }
            }
        }
    }
}
