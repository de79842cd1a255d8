//! The model's hyper-parameters, read from GGUF metadata (`llama.*` keys).

use crate::error::{LlamaError, Result};
use crate::gguf::GgufFile;

/// Hyper-parameters of a LLaMA decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Number of decoder blocks (`llama.block_count`).
    pub layers: usize,
    /// Width of the residual stream (`llama.embedding_length`).
    pub hidden: usize,
    /// Width of the SwiGLU feed-forward layer (`llama.feed_forward_length`).
    pub intermediate: usize,
    /// Query heads (`llama.attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`; grouped-query attention when fewer
    /// than `heads`).
    pub kv_heads: usize,
    /// Dims per head: `hidden / heads`.
    pub head_dim: usize,
    /// Rotated dims per head (`llama.rope.dimension_count`, default `head_dim`).
    pub rotary_dim: usize,
    /// RoPE base: `theta_i = base^(-2i/rotary_dim)` (`llama.rope.freq_base`, default 10000).
    pub rope_base: f64,
    /// RMS norm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f64,
    /// Vocabulary size (`llama.vocab_size`, or the token list's length).
    pub vocab_size: usize,
    /// Context length the model was trained for (`llama.context_length`).
    pub context_length: usize,
}

/// Refuse sizes above this (far above any LLaMA): a header must not make us plan the impossible.
const MAX_SIZE: usize = 1 << 24;

impl LlamaConfig {
    /// Reads the configuration of a `general.architecture = llama` file.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] for another architecture or a RoPE scaling;
    /// [`LlamaError::MissingKey`] / [`LlamaError::BadValue`] for absent or inconsistent values.
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig> {
        let arch = file.get_str("general.architecture")?;
        if arch != "llama" {
            return Err(LlamaError::Unsupported(format!(
                "architecture `{arch}`; this model reads `llama`"
            )));
        }
        if let Some(kind) = file.get("llama.rope.scaling.type") {
            if kind.as_str() != Some("none") {
                return Err(LlamaError::Unsupported(format!(
                    "RoPE scaling {kind:?} in `llama.rope.scaling.type`"
                )));
            }
        }
        let layers = size(file, "llama.block_count")?;
        let hidden = size(file, "llama.embedding_length")?;
        let intermediate = size(file, "llama.feed_forward_length")?;
        let heads = size(file, "llama.attention.head_count")?;
        let kv_heads = match file.get("llama.attention.head_count_kv") {
            Some(_) => size(file, "llama.attention.head_count_kv")?,
            None => heads,
        };
        if hidden % heads != 0 {
            return Err(bad(
                "llama.attention.head_count",
                format!("{heads} heads do not divide the width {hidden}"),
            ));
        }
        if heads % kv_heads != 0 {
            return Err(bad(
                "llama.attention.head_count_kv",
                format!("{kv_heads} key/value heads do not divide {heads} query heads"),
            ));
        }
        let head_dim = hidden / heads;
        let rotary_dim = match file.get("llama.rope.dimension_count") {
            Some(_) => size(file, "llama.rope.dimension_count")?,
            None => head_dim,
        };
        if rotary_dim % 2 != 0 || rotary_dim > head_dim {
            return Err(bad(
                "llama.rope.dimension_count",
                format!(
                    "{rotary_dim} rotated dims: must be even and at most the head dim {head_dim}"
                ),
            ));
        }
        let rope_base = match file.get("llama.rope.freq_base") {
            Some(_) => positive(file, "llama.rope.freq_base")?,
            None => 10_000.0,
        };
        let rms_eps = positive(file, "llama.attention.layer_norm_rms_epsilon")?;
        let vocab_size = match file.get("llama.vocab_size") {
            Some(_) => size(file, "llama.vocab_size")?,
            None => match file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(tokens) if !tokens.is_empty() => tokens.len(),
                _ => return Err(LlamaError::MissingKey("llama.vocab_size".into())),
            },
        };
        let context_length = size(file, "llama.context_length")?;
        Ok(LlamaConfig {
            layers,
            hidden,
            intermediate,
            heads,
            kv_heads,
            head_dim,
            rotary_dim,
            rope_base,
            rms_eps,
            vocab_size,
            context_length,
        })
    }
}

fn bad(key: &str, what: String) -> LlamaError {
    LlamaError::BadValue {
        key: key.to_string(),
        what,
    }
}

/// A size in `1..=MAX_SIZE`.
fn size(file: &GgufFile, key: &str) -> Result<usize> {
    let value = file
        .get(key)
        .ok_or_else(|| LlamaError::MissingKey(key.into()))?;
    let n = value.as_u64().ok_or_else(|| {
        bad(
            key,
            format!("an integer was expected, the file has {value:?}"),
        )
    })?;
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_SIZE).contains(n))
        .ok_or_else(|| bad(key, format!("{n} is outside 1..={MAX_SIZE}")))
}

/// A finite float above zero.
fn positive(file: &GgufFile, key: &str) -> Result<f64> {
    let value = file
        .get(key)
        .ok_or_else(|| LlamaError::MissingKey(key.into()))?;
    let x = value
        .as_f64()
        .ok_or_else(|| bad(key, format!("a float was expected, the file has {value:?}")))?;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(bad(key, format!("{x} is not a finite number above zero")))
    }
}
