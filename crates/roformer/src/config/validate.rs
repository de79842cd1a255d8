//! The validation of a [`RawConfig`] into a [`RoFormerConfig`]: sizes, heads, the position
//! type against the model type and attention, the T5 buckets, the labels.

use std::collections::BTreeMap;

use super::kinds::{invalid, AttentionType, PositionEmbeddingType};
use super::{Derived, RawConfig, RoFormerConfig, MAX_POSITION_TABLE_ENTRIES, MAX_RELATIVE_BUCKETS};
use crate::error::{ModelError, Result};

/// The sizes a rotary model computes from its config alone: the rotation's head dim (at most
/// [`rotary::MAX_ROTARY_DIM`]) and the position table (at most [`MAX_POSITION_TABLE_ENTRIES`]).
fn check_rotary_sizes(head_dim: usize, max_position_embeddings: usize) -> Result<()> {
    if head_dim > rotary::MAX_ROTARY_DIM {
        return Err(invalid(
            "hidden_size",
            format!(
                "head dim {head_dim} (hidden_size / heads) exceeds the rotary limit of {}",
                rotary::MAX_ROTARY_DIM
            ),
        ));
    }
    if max_position_embeddings as u128 * head_dim as u128 > MAX_POSITION_TABLE_ENTRIES as u128 {
        return Err(invalid(
            "max_position_embeddings",
            format!(
                "the rotary position table of {max_position_embeddings} x {head_dim} entries \
                 exceeds the limit of {MAX_POSITION_TABLE_ENTRIES}"
            ),
        ));
    }
    Ok(())
}

fn positive(field: &'static str, value: usize) -> Result<usize> {
    if value == 0 {
        return Err(invalid(field, "must be at least 1"));
    }
    Ok(value)
}

fn probability(field: &'static str, value: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&value) {
        return Err(invalid(field, format!("{value} is not a probability")));
    }
    Ok(())
}

impl TryFrom<RawConfig> for RoFormerConfig {
    type Error = ModelError;

    /// Validates: sizes at least 1, `hidden_size` divisible by `num_attention_heads` with an
    /// even head dim (RoPE rotates pairs) of at most [`rotary::MAX_ROTARY_DIM`], a rotary
    /// position table of at most [`MAX_POSITION_TABLE_ENTRIES`], `pad_token_id` below
    /// `vocab_size`, a finite positive `layer_norm_eps`, dropouts in [0, 1], a position type
    /// that fits the model type and attention, integer label keys, a finite positive
    /// sinusoidal amplitude (sinusoidal positions).
    fn try_from(raw: RawConfig) -> Result<RoFormerConfig> {
        check_sizes(&raw)?;
        let head_dim = raw.hidden_size / raw.num_attention_heads;
        let position_embedding_type = positions_of(&raw, head_dim)?;
        check_bias_attention(position_embedding_type, raw.attention_type)?;
        let (relative_attention_num_buckets, relative_attention_max_distance) =
            t5_buckets_of(&raw)?;
        let sinusoidal_amplitude = raw.sinusoidal_amplitude.unwrap_or(raw.initializer_range);
        if position_embedding_type == PositionEmbeddingType::Sinusoidal
            && !(sinusoidal_amplitude.is_finite() && sinusoidal_amplitude > 0.0)
        {
            return Err(invalid(
                "sinusoidal_amplitude",
                format!(
                    "{sinusoidal_amplitude} is not a finite positive number (absent, it is \
                     initializer_range)"
                ),
            ));
        }
        let (id2label, num_labels) =
            labels_of(raw.id2label.clone().unwrap_or_default(), raw.num_labels)?;
        let derived = Derived {
            embedding_size: positive(
                "embedding_size",
                raw.embedding_size.unwrap_or(raw.hidden_size),
            )?,
            num_labels: positive("num_labels", num_labels)?,
            id2label,
            position_embedding_type,
            relative_attention_num_buckets,
            relative_attention_max_distance,
            sinusoidal_amplitude,
        };
        Ok(RoFormerConfig::assemble(raw, derived))
    }
}

/// Checks the shared sizes and numbers: sizes at least 1, heads of an even dim, a finite
/// positive `layer_norm_eps`, dropouts in [0, 1], `pad_token_id` below `vocab_size`.
fn check_sizes(raw: &RawConfig) -> Result<()> {
    let hidden_size = positive("hidden_size", raw.hidden_size)?;
    let heads = positive("num_attention_heads", raw.num_attention_heads)?;
    check_heads(hidden_size, heads)?;
    if !(raw.layer_norm_eps.is_finite() && raw.layer_norm_eps > 0.0) {
        return Err(invalid(
            "layer_norm_eps",
            format!("{} is not a finite positive number", raw.layer_norm_eps),
        ));
    }
    let vocab_size = positive("vocab_size", raw.vocab_size)?;
    if let Some(pad) = raw.pad_token_id.filter(|&p| p as usize >= vocab_size) {
        return Err(invalid(
            "pad_token_id",
            format!("{pad} is not below vocab_size {vocab_size}"),
        ));
    }
    positive("intermediate_size", raw.intermediate_size)?;
    positive("type_vocab_size", raw.type_vocab_size)?;
    probability("hidden_dropout_prob", raw.hidden_dropout_prob)?;
    probability(
        "attention_probs_dropout_prob",
        raw.attention_probs_dropout_prob,
    )
}

/// Checks that `hidden` splits into `heads` heads of an even dim (RoPE rotates pairs).
fn check_heads(hidden: usize, heads: usize) -> Result<()> {
    if !hidden.is_multiple_of(heads) {
        return Err(invalid(
            "num_attention_heads",
            format!("hidden_size {hidden} is not divisible by {heads} heads"),
        ));
    }
    if !(hidden / heads).is_multiple_of(2) {
        return Err(invalid(
            "num_attention_heads",
            format!(
                "head dim {} (hidden_size / heads) must be even: RoPE rotates pairs",
                hidden / heads
            ),
        ));
    }
    Ok(())
}

/// The position type of `raw` (absolute for a `bert` config, rotary otherwise, unless it
/// names one), checked against the sizes it needs: a bert config only absolute, absolute
/// positions with `embedding_size == hidden_size` and a table of at least 1, rotary positions
/// within [`check_rotary_sizes`] for heads of `head_dim`.
fn positions_of(raw: &RawConfig, head_dim: usize) -> Result<PositionEmbeddingType> {
    let bert = raw.model_type.as_deref() == Some("bert");
    let kind = match raw.position_embedding_type {
        None if bert => PositionEmbeddingType::Absolute,
        None => PositionEmbeddingType::Rotary,
        Some(kind) => kind,
    };
    if bert && kind != PositionEmbeddingType::Absolute {
        return Err(invalid(
            "position_embedding_type",
            format!(
                "a bert config must use \"absolute\" positions, got {:?}",
                kind.as_str()
            ),
        ));
    }
    if kind == PositionEmbeddingType::Absolute
        && raw.embedding_size.is_some_and(|e| e != raw.hidden_size)
    {
        return Err(invalid(
            "embedding_size",
            "absolute (BERT) positions need embedding_size == hidden_size",
        ));
    }
    if kind == PositionEmbeddingType::Absolute && raw.max_position_embeddings == 0 {
        return Err(invalid(
            "max_position_embeddings",
            "absolute positions need a table of at least 1 position",
        ));
    }
    if kind == PositionEmbeddingType::Rotary {
        check_rotary_sizes(head_dim, raw.max_position_embeddings)?;
    }
    Ok(kind)
}

/// Refuses a position bias (ALiBi, T5) with linear attention, which has no score matrix to add
/// it to.
fn check_bias_attention(kind: PositionEmbeddingType, attention: AttentionType) -> Result<()> {
    let biased = matches!(
        kind,
        PositionEmbeddingType::Alibi | PositionEmbeddingType::T5Relative
    );
    if biased && attention == AttentionType::Linear {
        return Err(invalid(
            "attention_type",
            format!(
                "\"linear\" attention has no score matrix for the {:?} position bias; use \
                 \"softmax\" (or rotary, sinusoidal, absolute or no positions)",
                kind.as_str()
            ),
        ));
    }
    Ok(())
}

/// T5's bucket count (default 32, at least 4: two a side, one exact; at most
/// [`MAX_RELATIVE_BUCKETS`]) and maximum distance
/// (default 128, above the exact buckets of a side, `num_buckets / 4`, so that the logarithm of
/// [`crate::position_bias::t5_bucket`] is defined).
fn t5_buckets_of(raw: &RawConfig) -> Result<(usize, usize)> {
    let buckets = raw.relative_attention_num_buckets.unwrap_or(32);
    let distance = raw.relative_attention_max_distance.unwrap_or(128);
    if !(4..=MAX_RELATIVE_BUCKETS).contains(&buckets) {
        return Err(invalid(
            "relative_attention_num_buckets",
            format!(
                "{buckets} is not in 4..={MAX_RELATIVE_BUCKETS} (two buckets a side, one of \
                 them exact; T5 uses 32)"
            ),
        ));
    }
    if distance <= buckets / 4 {
        return Err(invalid(
            "relative_attention_max_distance",
            format!(
                "{distance} must exceed the {} exact buckets of a side \
                 (relative_attention_num_buckets / 4)",
                buckets / 4
            ),
        ));
    }
    Ok((buckets, distance))
}

/// `id2label` with integer keys, and the number of labels: `num_labels`, else as many as
/// `id2label` names, else 2 (transformers' default).
pub(crate) fn labels_of(
    id2label: BTreeMap<String, String>,
    num_labels: Option<usize>,
) -> Result<(BTreeMap<usize, String>, usize)> {
    let id2label = id2label
        .into_iter()
        .map(|(k, v)| {
            k.parse::<usize>()
                .map(|k| (k, v))
                .map_err(|_| invalid("id2label", format!("key {k:?} is not an index")))
        })
        .collect::<Result<BTreeMap<usize, String>>>()?;
    let num_labels = match num_labels {
        Some(n) => n,
        None if !id2label.is_empty() => id2label.len(),
        None => 2,
    };
    Ok((id2label, num_labels))
}
