//! Target `config`: a `config.json` text, validated by `RoFormerConfig::from_json_str`, then
//! a model built from it against the masked-LM fixture checkpoint and run once.

use std::path::PathBuf;

use roformer::ModelDir;

use super::probe::load_and_run;
use crate::fixtures::{MLM_CONFIG, MLM_SAFETENSORS, OTHER_CONFIGS};
use crate::outcome::Outcome;

/// Every field `config.json` may have, for the mutator to add.
pub const FIELDS: &[&str] = &[
    "model_type",
    "position_embedding_type",
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "rotary_value",
    "is_decoder",
    "tie_word_embeddings",
    "num_labels",
    "id2label",
    "label2id",
    "norm_type",
    "use_bias",
    "pooler_activation",
    "attention_type",
    "relative_attention_num_buckets",
    "relative_attention_max_distance",
    "sinusoidal_amplitude",
];

/// The fixture configs.
pub fn seeds() -> Vec<Vec<u8>> {
    std::iter::once(MLM_CONFIG)
        .chain(OTHER_CONFIGS.iter().copied())
        .map(|c| c.as_bytes().to_vec())
        .collect()
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Rejected("not UTF-8".into());
    };
    let dir = ModelDir::from_memory(PathBuf::from("fuzz"), text, MLM_SAFETENSORS.to_vec());
    Outcome::from_result(dir.and_then(|dir| load_and_run(&dir)))
}
