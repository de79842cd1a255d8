//! The named values of a config: the serde enums whose names are the `config.json`
//! spellings, and the reading of one name with an error that names its field.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ModelError, Result};

/// `eos_token_id`: one id or several.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

/// Which normalisation the blocks use (`config.json`: `layer_norm` or `rms_norm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormType {
    /// `LayerNorm` with weight and bias (RoFormer).
    LayerNorm,
    /// `x / sqrt(mean(x^2) + eps)` without weights (RoFormer-V2).
    RmsNorm,
}

/// How self-attention mixes the values (this crate's extension of the config: `softmax` or
/// `linear`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionType {
    /// `softmax(q k^T / sqrt(d) + mask) v` on rotated q, k: RoFormer as trained.
    #[default]
    Softmax,
    /// RoPE with linear attention (eq. 19), linear in the sequence length; the same weights.
    Linear,
}

/// How token positions enter the model: the one switch between RoFormer and BERT (everything
/// else is shared), two controls for comparison, and two attention biases that came after the
/// paper (ALiBi, T5's relative bias, computed once a pass by the encoder). `config.json`
/// spells them `rotary`, `absolute`, `sinusoidal`, `alibi`, `t5_relative` and `none`.
///
/// `alibi` and `t5_relative` are this crate's own: transformers' RoFormer has no such option.
/// It would read such a `config.json` as a rotary RoFormer (it ignores
/// `position_embedding_type`) and drop `roformer.encoder.relative_attention_bias.weight` as an
/// unexpected key, so a checkpoint of either type runs only here; `scripts/check_hf_roundtrip.py`
/// refuses them by name. Both need softmax attention (`attention_type: linear` is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionEmbeddingType {
    /// RoPE: q and k of every layer rotated by `m * theta_i` (RoFormer).
    #[default]
    Rotary,
    /// A learned table `P[m]` added to the word embeddings (BERT); positions must stay below
    /// `max_position_embeddings`. Saved and loaded as a Hugging Face `bert` checkpoint.
    Absolute,
    /// The fixed table of Vaswani et al. added to the word embeddings:
    /// `P[m, 2i] = sin(m / 10000^(2i/e))`, `P[m, 2i+1] = cos(m / 10000^(2i/e))`, `e` the
    /// embedding width; any position.
    Sinusoidal,
    /// ALiBi (Press et al. 2022): no position embedding; `-m_h |p_j - p_i|` added to the
    /// scores of head `h`, with the slopes `m_h = 2^(-8h/n')` for `h = 1..n'`, `n'` the largest
    /// power of two up to the `n` heads, then `2^(-4(2k-1)/n')` for `k = 1..n-n'`. No
    /// parameter; any position.
    Alibi,
    /// T5's relative bias (Raffel et al. 2020): no position embedding; a learned scalar per
    /// (bucket of `p_j - p_i`, head) added to the scores, one table for all layers:
    /// `roformer.encoder.relative_attention_bias.weight`, `[relative_attention_num_buckets,
    /// num_attention_heads]`; T5's buckets (`num_buckets / 2` a side, half of them
    /// exact distances, the rest logarithmic up to 128); any position.
    T5Relative,
    /// No position information at all (a bag of tokens, the ablation).
    None,
}

impl PositionEmbeddingType {
    /// The `config.json` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PositionEmbeddingType::Rotary => "rotary",
            PositionEmbeddingType::Absolute => "absolute",
            PositionEmbeddingType::Sinusoidal => "sinusoidal",
            PositionEmbeddingType::Alibi => "alibi",
            PositionEmbeddingType::T5Relative => "t5_relative",
            PositionEmbeddingType::None => "none",
        }
    }

    /// Parses the `config.json` spelling.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] naming the accepted values.
    pub fn parse(name: &str) -> Result<Self> {
        named("position_embedding_type", &Value::String(name.into()))
    }
}

/// The value of the enum `T` that `value` (a `config.json` string) names.
///
/// # Errors
/// [`ModelError::InvalidConfig`] for `field`, with serde's message (the name found and the
/// names accepted).
pub(super) fn named<T: DeserializeOwned>(field: &'static str, value: &Value) -> Result<T> {
    T::deserialize(value).map_err(|e| invalid(field, e.to_string()))
}

pub(super) fn invalid(field: &'static str, reason: impl Into<String>) -> ModelError {
    ModelError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}
