//! The model configuration, in two phases: [`RawConfig`] mirrors `config.json` field for field
//! with transformers' defaults; [`RoFormerConfig`] is the validated form the model is built from.
//!
//! Fields follow transformers' `RoFormerConfig` (and `PreTrainedConfig` for the label fields);
//! `norm_type`, `use_bias` and `pooler_activation` come from JunnYu's `roformer` package
//! (RoFormer-V2). Unknown fields are ignored, as checkpoints carry many.
//!
//! The fields both phases share are listed once, in the `configs!` call below, each with its
//! type and its default; serde reads and writes them, names included (the enums'
//! `config.json` spellings are their serde names). What only `config.json` has, and what the
//! validated config derives from it (the position type, the label map, the optional sizes), is
//! listed beside, and [`RoFormerConfig::try_from`] and [`RoFormerConfig::to_raw`] convert those
//! alone.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::activation::Activation;
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

/// Defines [`RawConfig`] and [`RoFormerConfig`] from the fields only the validated config has,
/// then the fields of `config.json` in the order they are written: groups of fields only
/// `config.json` has (`raw`, all optional) and fields both share (`shared`, each with its
/// default); and the two conversions of the shared fields, [`RoFormerConfig::assemble`] and
/// [`RoFormerConfig::raw_with`].
macro_rules! configs {
    (
        validated { $( $(#[$vm:meta])* $vname:ident: $vty:ty, )* }
        $(
            raw { $( $(#[$rm:meta])* $rname:ident: $rty:ty, )* }
            shared { $( $(#[$sm:meta])* $name:ident: $ty:ty = $default:expr, )* }
        )*
    ) => {
        /// `config.json` as written, with transformers' defaults for absent fields.
        #[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
        #[serde(default)]
        pub struct RawConfig {
            $(
                $( $(#[$rm])* pub $rname: $rty, )*
                $( $(#[$sm])* pub $name: $ty, )*
            )*
        }

        impl Default for RawConfig {
            fn default() -> Self {
                RawConfig {
                    $( $( $rname: None, )* $( $name: $default, )* )*
                }
            }
        }

        /// A validated RoFormer configuration.
        #[derive(Debug, Clone, PartialEq)]
        pub struct RoFormerConfig {
            $( $( $(#[$sm])* pub $name: $ty, )* )*
            $( $(#[$vm])* pub $vname: $vty, )*
        }

        /// The fields of a [`RoFormerConfig`] that validation derives from a [`RawConfig`].
        struct Derived {
            $( $vname: $vty, )*
        }

        /// The fields of a [`RawConfig`] that only `config.json` has.
        struct RawOnly {
            $( $( $rname: $rty, )* )*
        }

        impl RoFormerConfig {
            /// The validated config of `raw`'s shared fields and the `derived` ones.
            fn assemble(raw: RawConfig, derived: Derived) -> RoFormerConfig {
                RoFormerConfig {
                    $( $( $name: raw.$name, )* )*
                    $( $vname: derived.$vname, )*
                }
            }

            /// The `config.json` fields of this config's shared fields and `only`.
            fn raw_with(&self, only: RawOnly) -> RawConfig {
                RawConfig {
                    $( $( $rname: only.$rname, )* )*
                    $( $( $name: self.$name.clone(), )* )*
                }
            }
        }
    };
}

configs! {
    validated {
        /// Width of the word embeddings (`hidden_size` when not given).
        embedding_size: usize,
        /// Number of labels of a classification head.
        num_labels: usize,
        /// Label names by index, when the config has them.
        id2label: BTreeMap<usize, String>,
        /// How positions enter (rotary unless the config says otherwise, absolute for `bert`).
        position_embedding_type: PositionEmbeddingType,
        /// Buckets of the T5 relative bias (used by `t5_relative` only; 4 to
        /// [`MAX_RELATIVE_BUCKETS`]).
        relative_attention_num_buckets: usize,
        /// Distance of the last T5 bucket (used by `t5_relative` only; above
        /// `relative_attention_num_buckets / 4`, the exact buckets of a side).
        relative_attention_max_distance: usize,
        /// Amplitude `a` of the sinusoidal position table (used by `sinusoidal` only; finite
        /// and positive). Its default, `initializer_range`, puts tokens and positions in
        /// Vaswani et al.'s proportion at initialisation: there the token embeddings have
        /// standard deviation 1 (initialised at `d^-1/2`, multiplied by `sqrt(d)`) beside a
        /// table of amplitude 1; here they have standard deviation `initializer_range` beside a
        /// table of amplitude `initializer_range`. A table of amplitude 1 beside embeddings of
        /// 0.02 would leave the token a thirtieth of the normalised sum.
        sinusoidal_amplitude: f64,
    }
    raw {
        /// `roformer` (default) or `bert`; a `bert` config defaults to learned absolute
        /// positions.
        model_type: Option<String>,
        /// The head classes the checkpoint was saved from (written back, not read).
        #[serde(skip_serializing_if = "Option::is_none")]
        architectures: Option<Vec<String>>,
        /// How positions enter (see [`PositionEmbeddingType`]); absent, `rotary` (RoFormer's
        /// default), or `absolute` for a `bert` config.
        position_embedding_type: Option<PositionEmbeddingType>,
        /// This crate's extension, for `t5_relative` positions: buckets of the relative bias
        /// table (default 32, T5's `relative_attention_num_buckets`). Written only for
        /// `t5_relative`.
        #[serde(skip_serializing_if = "Option::is_none")]
        relative_attention_num_buckets: Option<usize>,
        /// This crate's extension, for `t5_relative` positions: the distance from which every
        /// relative position shares the last bucket of its side (default 128, T5's
        /// `relative_attention_max_distance`). Written only for `t5_relative`.
        #[serde(skip_serializing_if = "Option::is_none")]
        relative_attention_max_distance: Option<usize>,
        /// This crate's extension, for `sinusoidal` positions: the amplitude `a` of the fixed
        /// table (`a sin`, `a cos`; default `initializer_range`). Written only for
        /// `sinusoidal`.
        #[serde(skip_serializing_if = "Option::is_none")]
        sinusoidal_amplitude: Option<f64>,
    }
    shared {
        /// Word vocabulary size (default 50000).
        vocab_size: usize = 50000,
    }
    raw {
        /// Width of the word embeddings; `None` means `hidden_size`.
        embedding_size: Option<usize>,
    }
    shared {
        /// Width of the hidden states (default 768).
        hidden_size: usize = 768,
        /// Encoder layers (default 12).
        num_hidden_layers: usize = 12,
        /// Attention heads per layer (default 12); `hidden_size / num_attention_heads` is even.
        num_attention_heads: usize = 12,
        /// Width of the feed-forward layer (default 3072).
        intermediate_size: usize = 3072,
        /// Activation of the feed-forward layer and of the heads (default `gelu`).
        hidden_act: Activation = Activation::Gelu,
        /// Dropout after dense layers (training only; default 0.1).
        hidden_dropout_prob: f64 = 0.1,
        /// Dropout on attention probabilities (training only; default 0.1).
        attention_probs_dropout_prob: f64 = 0.1,
        /// Size of transformers' position table (default 1536). The rotary table here is
        /// computed for any length, so this does not limit inputs.
        max_position_embeddings: usize = 1536,
        /// Number of token types (default 2).
        type_vocab_size: usize = 2,
        /// Standard deviation of the weight initialisation (default 0.02).
        initializer_range: f64 = 0.02,
        /// Epsilon of the layer (or RMS) norms (default 1e-12).
        layer_norm_eps: f64 = 1e-12,
        /// Padding token id (default 0).
        pad_token_id: Option<u32> = Some(0),
        /// Beginning-of-sequence token id (default none).
        bos_token_id: Option<u32> = None,
        /// End-of-sequence token id(s) (default none).
        eos_token_id: Option<TokenIds> = None,
        /// Whether values are rotated too (default false).
        rotary_value: bool = false,
        /// Whether a decoder returns its key/value cache (default true; no cache is kept
        /// here).
        use_cache: bool = true,
        /// Causal (decoder) self-attention (default false).
        is_decoder: bool = false,
        /// Cross-attention layers (default false): their weights are ignored, as transformers
        /// skips them when no encoder states are given (this crate never takes encoder states).
        add_cross_attention: bool = false,
        /// Whether the MLM decoder shares the word embeddings (default true).
        tie_word_embeddings: bool = true,
    }
    raw {
        /// Number of labels of a classification head; when absent it is the size of
        /// `id2label`, or 2.
        num_labels: Option<usize>,
        /// Label names by index (as strings, like transformers writes them).
        id2label: Option<BTreeMap<String, String>>,
        /// Label indices by name (written back for transformers; not read).
        #[serde(skip_serializing_if = "Option::is_none")]
        label2id: Option<BTreeMap<String, usize>>,
    }
    shared {
        /// RoFormer-V2: the blocks' normalisation (default `layer_norm`).
        norm_type: NormType = NormType::LayerNorm,
        /// RoFormer-V2: biases in the encoder's dense layers (default true).
        use_bias: bool = true,
        /// RoFormer-V2: activation of the pooler (default `tanh`).
        pooler_activation: Activation = Activation::Tanh,
        /// This crate's extension: `softmax` (default, as every checkpoint) or `linear` (the
        /// paper's eq. 19, see [`crate::linear_attention`]).
        attention_type: AttentionType = AttentionType::Softmax,
    }
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
/// paper (ALiBi, T5's relative bias; see [`crate::position_bias`]). `config.json` spells them
/// `rotary`, `absolute`, `sinusoidal`, `alibi`, `t5_relative` and `none`.
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
    /// scores of head `h`, the slopes `m_h` of [`crate::position_bias::alibi_slopes`]. No
    /// parameter; any position.
    Alibi,
    /// T5's relative bias (Raffel et al. 2020): no position embedding; a learned scalar per
    /// (bucket of `p_j - p_i`, head) added to the scores, one table for all layers:
    /// `roformer.encoder.relative_attention_bias.weight`, `[relative_attention_num_buckets,
    /// num_attention_heads]`; buckets of [`crate::position_bias::t5_bucket`]; any position.
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

impl RoFormerConfig {
    /// The scope of the encoder's tensors in a head model's checkpoint: `bert` for absolute
    /// positions (a Hugging Face BERT), `roformer` otherwise.
    pub fn base_prefix(&self) -> &'static str {
        match self.position_embedding_type {
            PositionEmbeddingType::Absolute => "bert",
            _ => crate::weights::BASE_PREFIX,
        }
    }

    /// The Hugging Face `model_type`: `bert` for absolute positions, `roformer` otherwise.
    pub fn model_type(&self) -> &'static str {
        self.base_prefix()
    }

    /// The `config.json` fields of this config, for a checkpoint saved from the head class
    /// `architecture` (e.g. `RoFormerForMaskedLM`, `BertForMaskedLM`): what
    /// [`RoFormerConfig::try_from`] reads back to an equal config.
    pub fn to_raw(&self, architecture: &str) -> RawConfig {
        let kind = self.position_embedding_type;
        let t5 = kind == PositionEmbeddingType::T5Relative;
        let labels = !self.id2label.is_empty();
        let id2label = self.id2label.iter();
        self.raw_with(RawOnly {
            model_type: Some(self.model_type().into()),
            architectures: Some(vec![architecture.into()]),
            position_embedding_type: Some(kind),
            relative_attention_num_buckets: t5.then_some(self.relative_attention_num_buckets),
            relative_attention_max_distance: t5.then_some(self.relative_attention_max_distance),
            sinusoidal_amplitude: (kind == PositionEmbeddingType::Sinusoidal)
                .then_some(self.sinusoidal_amplitude),
            embedding_size: (kind != PositionEmbeddingType::Absolute)
                .then_some(self.embedding_size),
            num_labels: Some(self.num_labels),
            id2label: labels.then(|| {
                id2label
                    .clone()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect()
            }),
            label2id: labels.then(|| id2label.map(|(k, v)| (v.clone(), *k)).collect()),
        })
    }

    /// Elements per attention head: `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Parses and validates a `config.json` text.
    ///
    /// # Errors
    /// [`ModelError::ConfigJson`] for malformed JSON or JSON that is not an object, and the
    /// errors of the `TryFrom` conversion.
    pub fn from_json_str(json: &str) -> Result<RoFormerConfig> {
        RoFormerConfig::try_from(RawConfig::parse(json, Path::new("<string>"))?)
    }

    /// Reads, parses and validates a `config.json` file.
    ///
    /// # Errors
    /// [`ModelError::Io`], [`ModelError::ConfigJson`] (naming the file) and the errors of the
    /// `TryFrom` conversion.
    pub fn from_file(path: &Path) -> Result<RoFormerConfig> {
        let text = crate::memory::read_input_text(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        RoFormerConfig::try_from(RawConfig::parse(&text, path)?)
    }
}

impl RawConfig {
    /// Parses the text of a `config.json` (`path` names it in errors). The text must hold a
    /// JSON object: serde would read a struct from an array too, field by field in declaration
    /// order, so that is refused first. A name that is not one of a named field's values (an
    /// activation, a norm, an attention or position type) is an error naming the field.
    ///
    /// # Errors
    /// [`ModelError::ConfigJson`] for malformed JSON, JSON that is not an object, or a field of
    /// the wrong type; [`ModelError::UnknownActivation`] and [`ModelError::InvalidConfig`] for
    /// an unknown name.
    pub fn parse(json: &str, path: &Path) -> Result<RawConfig> {
        let malformed = |source| ModelError::ConfigJson {
            path: path.to_path_buf(),
            source,
        };
        let fields = serde_json::from_str::<BTreeMap<String, Value>>(json).map_err(malformed)?;
        for field in ["hidden_act", "pooler_activation"] {
            if let Some(Value::String(name)) = fields.get(field) {
                Activation::parse(field, name)?;
            }
        }
        check_named::<NormType>(&fields, "norm_type")?;
        check_named::<AttentionType>(&fields, "attention_type")?;
        check_named::<PositionEmbeddingType>(&fields, "position_embedding_type")?;
        serde_json::from_str(json).map_err(malformed)
    }
}

/// The value of the enum `T` that `value` (a `config.json` string) names.
///
/// # Errors
/// [`ModelError::InvalidConfig`] for `field`, with serde's message (the name found and the
/// names accepted).
fn named<T: DeserializeOwned>(field: &'static str, value: &Value) -> Result<T> {
    T::deserialize(value).map_err(|e| invalid(field, e.to_string()))
}

/// Checks that `field`, when `fields` has it as a string, names a value of the enum `T`.
///
/// # Errors
/// As [`named`].
fn check_named<T: DeserializeOwned>(
    fields: &BTreeMap<String, Value>,
    field: &'static str,
) -> Result<()> {
    match fields.get(field) {
        Some(value @ Value::String(_)) => named::<T>(field, value).map(drop),
        _ => Ok(()),
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ModelError {
    ModelError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

/// The most entries (`max_position_embeddings x head_dim`) of the sinusoidal position table a
/// rotary model keeps (transformers' `embed_positions`, which this crate writes into the
/// checkpoints it saves): 2^28, 1 GiB of f32. Common checkpoints hold 1536 x 64.
pub const MAX_POSITION_TABLE_ENTRIES: usize = 1 << 28;

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

/// The most buckets of a T5 relative bias table (T5 uses 32): bucket indices stay u32.
pub const MAX_RELATIVE_BUCKETS: usize = 1 << 20;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_json_gives_transformers_defaults() {
        let c = RoFormerConfig::from_json_str("{}").unwrap();
        assert_eq!(c.vocab_size, 50000);
        assert_eq!(c.embedding_size, 768);
        assert_eq!(c.hidden_size, 768);
        assert_eq!(c.num_hidden_layers, 12);
        assert_eq!(c.num_attention_heads, 12);
        assert_eq!(c.intermediate_size, 3072);
        assert_eq!(c.hidden_act, Activation::Gelu);
        assert_eq!(c.max_position_embeddings, 1536);
        assert_eq!(c.type_vocab_size, 2);
        assert_eq!(c.layer_norm_eps, 1e-12);
        assert_eq!(c.pad_token_id, Some(0));
        assert!(!c.rotary_value && !c.is_decoder && c.tie_word_embeddings && c.use_bias);
        assert_eq!(c.norm_type, NormType::LayerNorm);
        assert_eq!(c.num_labels, 2);
    }

    #[test]
    fn unknown_fields_are_ignored_and_labels_counted() {
        let c = RoFormerConfig::from_json_str(
            r#"{"architectures": ["RoFormerForMaskedLM"], "model_type": "roformer",
                "hidden_size": 64, "num_attention_heads": 4, "embedding_size": null,
                "id2label": {"0": "a", "1": "b", "2": "c"}, "eos_token_id": [1, 2]}"#,
        )
        .unwrap();
        assert_eq!(c.embedding_size, 64);
        assert_eq!(c.head_dim(), 16);
        assert_eq!(c.num_labels, 3);
        assert_eq!(c.eos_token_id, Some(TokenIds::Many(vec![1, 2])));
    }

    #[test]
    fn invalid_configs_are_named() {
        let cases = [
            (
                r#"{"hidden_size": 100, "num_attention_heads": 3}"#,
                "num_attention_heads",
            ),
            (
                r#"{"hidden_size": 36, "num_attention_heads": 4}"#,
                "num_attention_heads",
            ),
            (r#"{"num_attention_heads": 0}"#, "num_attention_heads"),
            (r#"{"layer_norm_eps": -1}"#, "layer_norm_eps"),
            (r#"{"norm_type": "batch_norm"}"#, "norm_type"),
            (r#"{"vocab_size": 0}"#, "vocab_size"),
            (r#"{"hidden_dropout_prob": 2}"#, "hidden_dropout_prob"),
            (r#"{"id2label": {"x": "a"}}"#, "id2label"),
            (
                r#"{"position_embedding_type": "alibi", "attention_type": "linear"}"#,
                "attention_type",
            ),
            (
                r#"{"position_embedding_type": "t5_relative", "attention_type": "linear"}"#,
                "attention_type",
            ),
            (
                r#"{"relative_attention_num_buckets": 3}"#,
                "relative_attention_num_buckets",
            ),
            (
                r#"{"relative_attention_num_buckets": 1048577}"#,
                "relative_attention_num_buckets",
            ),
            (
                r#"{"relative_attention_num_buckets": 32, "relative_attention_max_distance": 8}"#,
                "relative_attention_max_distance",
            ),
            (
                r#"{"position_embedding_type": "t5"}"#,
                "position_embedding_type",
            ),
            (
                r#"{"position_embedding_type": "sinusoidal", "sinusoidal_amplitude": 0}"#,
                "sinusoidal_amplitude",
            ),
            (
                r#"{"position_embedding_type": "sinusoidal", "initializer_range": -0.02}"#,
                "sinusoidal_amplitude",
            ),
        ];
        for (json, field) in cases {
            match RoFormerConfig::from_json_str(json) {
                Err(ModelError::InvalidConfig { field: f, .. }) => assert_eq!(f, field, "{json}"),
                other => panic!("{json}: {other:?}"),
            }
        }
    }

    #[test]
    fn bias_positions_parse_and_round_trip() {
        let c =
            RoFormerConfig::from_json_str(r#"{"position_embedding_type": "t5_relative"}"#).unwrap();
        assert_eq!(c.position_embedding_type, PositionEmbeddingType::T5Relative);
        assert_eq!(
            (
                c.relative_attention_num_buckets,
                c.relative_attention_max_distance
            ),
            (32, 128)
        );
        let raw = c.to_raw("RoFormerForMaskedLM");
        assert_eq!(raw.relative_attention_num_buckets, Some(32));
        assert_eq!(RoFormerConfig::try_from(raw).unwrap(), c);
        let alibi =
            RoFormerConfig::from_json_str(r#"{"position_embedding_type": "alibi"}"#).unwrap();
        assert_eq!(alibi.position_embedding_type, PositionEmbeddingType::Alibi);
        let raw = alibi.to_raw("RoFormerForMaskedLM");
        assert_eq!(
            raw.relative_attention_num_buckets, None,
            "written for T5 only"
        );
        assert_eq!(RoFormerConfig::try_from(raw).unwrap(), alibi);
    }

    #[test]
    fn sinusoidal_amplitude_defaults_to_the_init_scale_and_round_trips() {
        let c = RoFormerConfig::from_json_str(
            r#"{"position_embedding_type": "sinusoidal", "initializer_range": 0.05}"#,
        )
        .unwrap();
        assert_eq!(c.sinusoidal_amplitude, 0.05);
        let raw = c.to_raw("RoFormerForMaskedLM");
        assert_eq!(raw.sinusoidal_amplitude, Some(0.05));
        assert_eq!(RoFormerConfig::try_from(raw).unwrap(), c);
        let given = RoFormerConfig::from_json_str(
            r#"{"position_embedding_type": "sinusoidal", "sinusoidal_amplitude": 1.0}"#,
        )
        .unwrap();
        assert_eq!(given.sinusoidal_amplitude, 1.0);
        let rotary = RoFormerConfig::from_json_str(r#"{"initializer_range": 0}"#).unwrap();
        let raw = rotary.to_raw("RoFormerForMaskedLM");
        assert_eq!(
            raw.sinusoidal_amplitude, None,
            "written for sinusoidal only"
        );
        assert_eq!(RoFormerConfig::try_from(raw).unwrap(), rotary);
    }

    #[test]
    fn unknown_activation_is_named() {
        let err = RoFormerConfig::from_json_str(r#"{"hidden_act": "gelu_magic"}"#).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("gelu_magic") && msg.contains("gelu_new"),
            "{msg}"
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(matches!(
            RoFormerConfig::from_json_str("{\"hidden_size\": "),
            Err(ModelError::ConfigJson { .. })
        ));
        assert!(matches!(
            RoFormerConfig::from_json_str(r#"{"hidden_size": "big"}"#),
            Err(ModelError::ConfigJson { .. })
        ));
    }
}
