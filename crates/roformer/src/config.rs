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

mod kinds;
#[cfg(test)]
mod tests;
pub(crate) mod validate;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::kinds::named;
pub use self::kinds::{AttentionType, NormType, PositionEmbeddingType, TokenIds};
use crate::activation::Activation;
use crate::error::{ModelError, Result};

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
        /// paper's eq. 19, see [`crate::measure::LinearAttention`]).
        attention_type: AttentionType = AttentionType::Softmax,
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

/// The most entries (`max_position_embeddings x head_dim`) of the sinusoidal position table a
/// rotary model keeps (transformers' `embed_positions`, which this crate writes into the
/// checkpoints it saves): 2^28, 1 GiB of f32. Common checkpoints hold 1536 x 64.
pub const MAX_POSITION_TABLE_ENTRIES: usize = 1 << 28;

/// The most buckets of a T5 relative bias table (T5 uses 32): bucket indices stay u32.
pub const MAX_RELATIVE_BUCKETS: usize = 1 << 20;
