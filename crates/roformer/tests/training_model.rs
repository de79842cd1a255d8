//! The trainable model beyond parity: config round trips, transformers' initialisation,
//! train/inference modes, and the position variants (rotary, absolute, sinusoidal, ALiBi, T5
//! relative, none).

use candle_core::{DType, Device, Tensor};
use roformer::train::{build_trainable, mlm_loss, BatchInputs, IGNORE};
use roformer::{
    Dropout, HeadModel, Mode, PositionEmbeddingType, Precision, RawConfig, RoFormerConfig,
    RoFormerForMaskedLM, RoFormerForSequenceClassification,
};
use test_support::{max_abs_diff, Scratch};

fn config(position: &str) -> RoFormerConfig {
    RoFormerConfig::try_from(RawConfig {
        vocab_size: 50,
        hidden_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 64,
        max_position_embeddings: 16,
        position_embedding_type: Some(roformer::PositionEmbeddingType::parse(position).unwrap()),
        ..RawConfig::default()
    })
    .unwrap()
}

fn ids(rows: &[&[u32]]) -> Tensor {
    let t = rows[0].len();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), t), &Device::Cpu).unwrap()
}

#[test]
fn config_round_trips_through_config_json() {
    for position in [
        "rotary",
        "absolute",
        "sinusoidal",
        "alibi",
        "t5_relative",
        "none",
    ] {
        let mut cfg = config(position);
        cfg.id2label = [(0, "neg".to_string()), (1, "pos".to_string())].into();
        let json = serde_json::to_string(&cfg.to_raw("RoFormerForMaskedLM")).unwrap();
        let back = RoFormerConfig::from_json_str(&json).unwrap();
        assert_eq!(back, cfg, "{position}: {json}");
    }
    let bert = config("absolute").to_raw("BertForMaskedLM");
    assert_eq!(bert.model_type.as_deref(), Some("bert"));
    assert_eq!(
        bert.embedding_size, None,
        "BERT configs have no embedding_size"
    );
}

#[test]
fn bert_configs_default_to_absolute_and_refuse_other_positions() {
    let c = RoFormerConfig::from_json_str(
        r#"{"model_type": "bert", "hidden_size": 32, "num_attention_heads": 4}"#,
    )
    .unwrap();
    assert_eq!(c.position_embedding_type, PositionEmbeddingType::Absolute);
    assert_eq!(c.base_prefix(), "bert");
    let err = RoFormerConfig::from_json_str(
        r#"{"model_type": "bert", "position_embedding_type": "relative_key"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("position_embedding_type"), "{err}");
}

#[test]
fn fresh_weights_follow_transformers_initialisation() {
    let cfg = config("absolute");
    let a = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 3, &Device::Cpu).unwrap();
    let b = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 3, &Device::Cpu).unwrap();
    let c = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 4, &Device::Cpu).unwrap();
    assert_eq!(a.initialised.len(), a.params.vars().len());
    let values = |t: &roformer::train::Trainable<RoFormerForMaskedLM>, name: &str| {
        t.params
            .get(name)
            .unwrap()
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let q = "bert.encoder.layer.0.attention.self.query.weight";
    assert_eq!(values(&a, q), values(&b, q), "same seed, same weights");
    assert_ne!(values(&a, q), values(&c, q), "another seed, other weights");
    // N(0, 0.02^2) over 1024 values: the sample std is within 10% with overwhelming odds.
    let w = values(&a, q);
    let std = (w.iter().map(|x| x * x).sum::<f32>() / w.len() as f32).sqrt();
    assert!((std - 0.02).abs() < 0.002, "std {std}");
    assert!(values(&a, "bert.embeddings.LayerNorm.weight")
        .iter()
        .all(|&x| x == 1.0));
    assert!(values(&a, "bert.encoder.layer.1.output.dense.bias")
        .iter()
        .all(|&x| x == 0.0));
    assert!(values(&a, "cls.predictions.bias").iter().all(|&x| x == 0.0));
    let words = values(&a, "bert.embeddings.word_embeddings.weight");
    assert!(
        words[..32].iter().all(|&x| x == 0.0),
        "the padding row is 0"
    );
    assert!(words[32..64].iter().any(|&x| x != 0.0));
}

#[test]
fn position_variants_start_from_the_same_shared_weights() {
    let build = |position: &str| {
        build_trainable::<RoFormerForMaskedLM>(&config(position), None, 5, &Device::Cpu).unwrap()
    };
    let values = |t: &roformer::train::Trainable<RoFormerForMaskedLM>, name: &str| {
        t.params
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let (rotary, bert) = (build("rotary"), build("absolute"));
    assert!(bert
        .params
        .get("bert.embeddings.position_embeddings.weight")
        .is_some());
    for name in [
        "embeddings.word_embeddings.weight",
        "encoder.layer.0.attention.self.query.weight",
        "encoder.layer.1.output.dense.weight",
    ] {
        assert_eq!(
            values(&rotary, &format!("roformer.{name}")),
            values(&bert, &format!("bert.{name}")),
            "{name}: the extra position table and the prefix must not change it"
        );
    }
    let q = "roformer.encoder.layer.0.attention.self.query.weight";
    let k = "roformer.encoder.layer.0.attention.self.key.weight";
    assert_ne!(values(&rotary, q), values(&rotary, k), "tensors draw apart");
}

#[test]
fn a_missing_head_is_initialised_and_listed_but_a_missing_encoder_tensor_is_an_error() {
    let cfg = config("rotary");
    let mlm = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 0, &Device::Cpu).unwrap();
    let scratch = Scratch::new("roformer-training-model", "head");
    let dir = scratch.join("model");
    let files =
        roformer::train::checkpoint::model_files(&cfg, "RoFormerForMaskedLM", &mlm.params).unwrap();
    roformer::train::checkpoint::write_dir_atomically(&dir, &files).unwrap();
    let md = roformer::ModelDir::open(&dir).unwrap();
    let cls = build_trainable::<RoFormerForSequenceClassification>(
        &md.config,
        Some(&md.checkpoint),
        0,
        &Device::Cpu,
    )
    .unwrap();
    let mut fresh = cls.initialised.clone();
    fresh.sort();
    assert_eq!(
        fresh,
        [
            "classifier.dense.bias",
            "classifier.dense.weight",
            "classifier.out_proj.bias",
            "classifier.out_proj.weight"
        ]
    );
    assert!(cls.unused.iter().any(|n| n.starts_with("cls.predictions.")));
    // A deeper config asks for encoder layers the checkpoint does not have: one problem.
    let mut deeper = md.config.clone();
    deeper.num_hidden_layers = 3;
    let err =
        build_trainable::<RoFormerForMaskedLM>(&deeper, Some(&md.checkpoint), 0, &Device::Cpu)
            .unwrap_err();
    assert!(
        err.to_string()
            .contains("config asks for 3 layers, the checkpoint has 2"),
        "{err}"
    );
}

#[test]
fn training_mode_without_dropout_is_the_inference_function() {
    for position in [
        "rotary",
        "absolute",
        "sinusoidal",
        "alibi",
        "t5_relative",
        "none",
    ] {
        let cfg = config(position);
        let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 1, &Device::Cpu).unwrap();
        let x = ids(&[&[2, 7, 9, 11, 3], &[2, 5, 4, 3, 0]]);
        let mask = ids(&[&[1, 1, 1, 1, 1], &[1, 1, 1, 1, 0]]);
        let inference = t.model.forward(&x, None, Some(&mask), None).unwrap();
        let train = t
            .model
            .forward_train(&x, None, Some(&mask), None, &Dropout::disabled())
            .unwrap();
        // The fused inference path and the op-by-op training path sum in other orders.
        let d = max_abs_diff(&inference.logits, &train.logits);
        assert!(d < 1e-5, "{position}: {d}");
        let dropped = t
            .model
            .forward_train(&x, None, Some(&mask), None, &Dropout::seeded(5))
            .unwrap();
        let again = t
            .model
            .forward_train(&x, None, Some(&mask), None, &Dropout::seeded(5))
            .unwrap();
        assert!(
            max_abs_diff(&inference.logits, &dropped.logits) > 1e-3,
            "{position}: dropout ran"
        );
        assert_eq!(
            max_abs_diff(&dropped.logits, &again.logits),
            0.0,
            "{position}: seeded"
        );
    }
}

#[test]
fn positions_matter_except_with_none() {
    let forward = |position: &str, tokens: &[u32]| {
        // Weights large enough for attention to be far from uniform.
        let mut cfg = config(position);
        cfg.initializer_range = 0.5;
        let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 2, &Device::Cpu).unwrap();
        t.model
            .forward(&ids(&[tokens]), None, None, None)
            .unwrap()
            .logits
    };
    let (a, b) = ([2u32, 7, 9, 11, 3], [2u32, 9, 7, 11, 3]);
    for position in [
        "rotary",
        "absolute",
        "sinusoidal",
        "alibi",
        "t5_relative",
        "none",
    ] {
        // Swapping tokens 1 and 2: without positions the outputs are swapped with them.
        let (la, lb) = (forward(position, &a), forward(position, &b));
        let swapped = Tensor::cat(
            &[
                la.narrow(1, 0, 1).unwrap(),
                la.narrow(1, 2, 1).unwrap(),
                la.narrow(1, 1, 1).unwrap(),
                la.narrow(1, 3, 2).unwrap(),
            ],
            1,
        )
        .unwrap();
        let d = max_abs_diff(&swapped, &lb);
        if position == "none" {
            assert!(d < 1e-5, "none: {d}");
        } else {
            assert!(d > 1e-4, "{position}: positions had no effect ({d})");
        }
    }
}

#[test]
fn absolute_positions_stop_at_the_table_while_the_others_go_on() {
    let long: Vec<u32> = (0..40).map(|i| 5 + i % 40).collect();
    for position in [
        "rotary",
        "sinusoidal",
        "alibi",
        "t5_relative",
        "none",
        "absolute",
    ] {
        let cfg = config(position);
        let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 0, &Device::Cpu).unwrap();
        let out = t.model.forward(&ids(&[&long]), None, None, None);
        if position == "absolute" {
            let err = out.unwrap_err().to_string();
            assert!(err.contains("max_position_embeddings = 16"), "{err}");
        } else {
            assert_eq!(out.unwrap().logits.dims(), [1, 40, 50]);
        }
    }
}

#[test]
fn every_parameter_gets_a_gradient_in_every_variant() {
    for position in [
        "rotary",
        "absolute",
        "sinusoidal",
        "alibi",
        "t5_relative",
        "none",
    ] {
        let cfg = config(position);
        let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 0, &Device::Cpu).unwrap();
        let x = ids(&[&[2, 4, 9, 4, 3], &[2, 8, 4, 6, 3]]);
        let labels = [
            IGNORE, 7, IGNORE, 10, IGNORE, IGNORE, IGNORE, 12, IGNORE, IGNORE,
        ];
        let out = mlm_loss(
            &t.model,
            BatchInputs {
                input_ids: &x,
                token_type_ids: None,
                attention_mask: None,
            },
            &labels,
            Mode::Train {
                dropout: &Dropout::seeded(0),
                precision: Precision::F32,
            },
        )
        .unwrap();
        assert_eq!(out.count, 3);
        let grads = out.loss.backward().unwrap();
        for (name, var) in t.params.vars() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{position}: no gradient for {name}"));
            assert_eq!(g.dtype(), DType::F32);
            if name.contains("token_type") {
                continue; // only type 0 is used: the other rows get 0
            }
            let size = g
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(size > 0.0, "{position}: zero gradient for {name}");
        }
    }
}

fn model_fixture(case: &str) -> roformer::ModelDir {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model")
        .join(case);
    roformer::ModelDir::open(&dir).unwrap()
}

/// Fine-tuning starts from any checkpoint the inference loader reads: a pickle
/// (`pytorch_model.bin`) with an MLM head, and an unprefixed bare `RoFormerModel` whose
/// classifier is then new; the trainable model computes what the inference model does.
#[test]
fn trainable_models_load_pickles_and_unprefixed_checkpoints() {
    let pickle = model_fixture("mlm_pickle_relu");
    assert_eq!(pickle.checkpoint.format(), roformer::Format::Pickle);
    let t = build_trainable::<RoFormerForMaskedLM>(
        &pickle.config,
        Some(&pickle.checkpoint),
        0,
        &Device::Cpu,
    )
    .unwrap();
    assert!(t.initialised.is_empty(), "{:?}", t.initialised);
    let inference = pickle
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let x = ids(&[&[2, 7, 9, 11, 3]]);
    let a = t.model.forward(&x, None, None, None).unwrap().logits;
    let b = inference.forward(&x, None, None, None).unwrap().logits;
    assert_eq!(max_abs_diff(&a, &b), 0.0);

    let bare = model_fixture("base_long_silu");
    assert!(!bare.checkpoint.is_prefixed());
    let cls = build_trainable::<RoFormerForSequenceClassification>(
        &bare.config,
        Some(&bare.checkpoint),
        0,
        &Device::Cpu,
    )
    .unwrap();
    assert!(cls.initialised.iter().all(|n| n.starts_with("classifier.")));
    assert_eq!(cls.initialised.len(), 4);
    assert!(cls.unused.is_empty(), "{:?}", cls.unused);
    // Saved, it is a prefixed head-model checkpoint.
    assert!(cls
        .params
        .vars()
        .iter()
        .any(|(n, _)| n == "roformer.embeddings.word_embeddings.weight"));
}
