//! The config: DINOv3's defaults, the real fixture configs, every refusal, the round trip.

use std::path::Path;

use crate::activation::Activation;
use crate::vision::config::{MlpKind, PositionKind, RawVisionConfig, VisionConfig};
use crate::vision::error::VisionError;
use crate::vision::positions::Coordinates;

fn fixture_config(case: &str) -> VisionConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vision")
        .join(case)
        .join("config.json");
    VisionConfig::from_file(&path).expect("a fixture config")
}

#[test]
fn vision_config_empty_json_is_dinov3_vit_small() {
    let c = VisionConfig::from_json_str("{}").unwrap();
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.num_attention_heads),
        (384, 12, 6)
    );
    assert_eq!(
        (c.intermediate_size, c.patch_size, c.num_channels),
        (1536, 16, 3)
    );
    assert_eq!(c.image_size, [224, 224]);
    assert_eq!(
        (c.rope_theta, c.layer_norm_eps, c.layerscale_value),
        (100.0, 1e-5, 1.0)
    );
    assert!(c.biases.query && !c.biases.key && c.biases.value && c.biases.proj && c.biases.mlp);
    assert_eq!((c.mlp, c.hidden_act), (MlpKind::Plain, Activation::Gelu));
    assert_eq!(c.num_register_tokens, 0);
    assert_eq!(c.position, PositionKind::RopeAxial);
    assert_eq!(c.coordinates, Coordinates::Normalised);
    assert_eq!(c.augmentation.rescale, Some(2.0));
}

/// Configs written by transformers 5 load as DINOv3: axial RoPE over normalised coordinates,
/// with their backbone fields ignored.
#[test]
fn vision_config_transformers_files_load_as_dinov3() {
    let base = fixture_config("base");
    assert_eq!(base.position, PositionKind::RopeAxial);
    assert_eq!(base.coordinates, Coordinates::Normalised);
    let gated = fixture_config("registers_gated");
    assert_eq!(gated.mlp, MlpKind::Gated);
    assert_eq!(gated.hidden_act, Activation::Silu);
    assert_eq!((gated.num_register_tokens, gated.rope_theta), (4, 1000.0));
    assert!(gated.biases.key);
    let no_bias = fixture_config("no_bias");
    assert_eq!(no_bias.image_size, [12, 20]);
    let b = no_bias.biases;
    assert!(!(b.query || b.key || b.value || b.proj || b.mlp));
    assert_eq!(fixture_config("small_heads").head_dim(), 4);
    // Older configs call the gated MLP use_swiglu_ffn.
    let old = VisionConfig::from_json_str(r#"{"use_swiglu_ffn": true}"#).unwrap();
    assert_eq!(old.mlp, MlpKind::Gated);
}

#[test]
fn vision_config_head_dims_rope_cannot_split_are_typed_errors() {
    // 36 / 3 = 12: fine for every kind; 24 / 4 = 6: odd pairs per axis.
    let json = |kind: &str, hidden: usize, heads: usize| {
        format!(
            r#"{{"hidden_size": {hidden}, "num_attention_heads": {heads},
                "position_embedding_type": "{kind}"}}"#
        )
    };
    for kind in ["rope_axial", "rope_mixed"] {
        assert!(VisionConfig::from_json_str(&json(kind, 36, 3)).is_ok());
        let err = VisionConfig::from_json_str(&json(kind, 24, 4)).unwrap_err();
        let VisionError::RopeHeadDim {
            head_dim, divisor, ..
        } = err
        else {
            panic!("{kind}: {err}");
        };
        assert_eq!((head_dim, divisor), (6, 4));
    }
    // 1D RoPE needs pairs only; no rotation needs nothing.
    assert!(VisionConfig::from_json_str(&json("rope_flat", 24, 4)).is_ok());
    let err = VisionConfig::from_json_str(&json("rope_flat", 15, 5)).unwrap_err();
    assert!(
        matches!(err, VisionError::RopeHeadDim { divisor: 2, .. }),
        "{err}"
    );
    for kind in ["absolute", "none"] {
        assert!(VisionConfig::from_json_str(&json(kind, 15, 5)).is_ok());
    }
    // The message says what to change.
    let err = VisionConfig::from_json_str(&json("rope_axial", 24, 4)).unwrap_err();
    assert!(err.to_string().contains("divisible by 4"), "{err}");
}

#[test]
fn vision_config_refusals_name_their_field() {
    let cases = [
        (r#"{"model_type": "roformer"}"#, "model_type"),
        (r#"{"patch_size": [16, 8]}"#, "patch_size"),
        (r#"{"patch_size": 0}"#, "patch_size"),
        (r#"{"patch_size": 4096}"#, "patch_size"),
        (r#"{"hidden_size": 0}"#, "hidden_size"),
        (r#"{"num_attention_heads": 5}"#, "num_attention_heads"),
        (r#"{"intermediate_size": 0}"#, "intermediate_size"),
        (r#"{"num_channels": 0}"#, "num_channels"),
        (r#"{"rope_theta": 0}"#, "rope_theta"),
        (r#"{"layer_norm_eps": -1}"#, "layer_norm_eps"),
        (r#"{"attention_dropout": 1.0}"#, "attention_dropout"),
        (r#"{"drop_path_rate": -0.1}"#, "drop_path_rate"),
        (r#"{"hidden_act": "nope"}"#, "hidden_act"),
        (
            r#"{"position_embedding_type": "absolute", "image_size": 8}"#,
            "image_size",
        ),
    ];
    for (json, field) in cases {
        let err = VisionConfig::from_json_str(json).unwrap_err();
        assert!(err.to_string().contains(field), "{json}: {err}");
    }
    for bad in [
        r#"{"position_embedding_type": "rope_2d"}"#,
        r#"{"rope_coordinates": "pixels"}"#,
        "[1, 2]",
        "{",
    ] {
        let err = VisionConfig::from_json_str(bad).unwrap_err();
        assert!(
            matches!(
                err,
                VisionError::Model(crate::ModelError::ConfigJson { .. })
            ),
            "{bad}: {err}"
        );
    }
}

#[test]
fn vision_config_round_trips_through_config_json() {
    let json = r#"{"position_embedding_type": "rope_mixed", "rope_coordinates": "indices",
        "num_register_tokens": 3, "use_gated_mlp": true, "hidden_act": "silu",
        "image_size": [32, 48], "patch_size": [8, 8], "id2label": {"0": "cat", "1": "dog"},
        "pos_embed_jitter": 1.5, "query_bias": false}"#;
    let c = VisionConfig::from_json_str(json).unwrap();
    assert_eq!(c.num_labels, 2);
    assert_eq!(
        (c.label(1), c.label(5)),
        ("dog".to_string(), "LABEL_5".to_string())
    );
    let raw = c.to_raw("DINOv3ViTModel");
    let text = serde_json::to_string(&raw).unwrap();
    let back = VisionConfig::try_from(RawVisionConfig::parse(&text, Path::new("x")).unwrap());
    assert_eq!(back.unwrap(), c);
    // Normalised coordinates are accepted in either spelling.
    let us = VisionConfig::from_json_str(r#"{"rope_coordinates": "normalized"}"#).unwrap();
    assert_eq!(us.coordinates, Coordinates::Normalised);
}
