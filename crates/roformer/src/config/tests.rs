//! Reading, validating and writing configs.

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
    let c = RoFormerConfig::from_json_str(r#"{"position_embedding_type": "t5_relative"}"#).unwrap();
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
    let alibi = RoFormerConfig::from_json_str(r#"{"position_embedding_type": "alibi"}"#).unwrap();
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
