//! Bad checkpoints, bad directories and bad inputs give typed errors that name the problem.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use roformer::{
    Checkpoint, ModelDir, ModelError, Precision, RoFormerConfig, RoFormerForMaskedLM,
    RoFormerModel, RoFormerTokenizer, WeightProblem, WeightProblems,
};
use test_support::Scratch;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model")
        .join(case)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-errors", name)
}

/// A copy of fixture `case`'s config in a scratch directory, with `edit` applied to its JSON.
fn copy_config(case: &str, dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let text = std::fs::read_to_string(fixture(case).join("config.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut json);
    std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
}

fn load_tensors(case: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(case).join("model.safetensors"), &Device::Cpu).unwrap()
}

#[test]
fn every_missing_and_misshaped_tensor_is_reported() {
    let dir = scratch("problems");
    copy_config("mlm_gelu", &dir, |_| {});
    let mut t = load_tensors("mlm_gelu");
    t.remove("roformer.encoder.layer.1.attention.self.key.weight");
    t.remove("cls.predictions.bias");
    t.insert(
        "roformer.embeddings.token_type_embeddings.weight".into(),
        Tensor::zeros((3, 32), DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();

    let err = ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap_err();
    let ModelError::Weights { problems, .. } = &err else {
        panic!("{err}");
    };
    let expected = [
        WeightProblem::Missing {
            name: "roformer.encoder.layer.1.attention.self.key.weight".into(),
            expected: vec![32, 32],
        },
        WeightProblem::Shape {
            name: "roformer.embeddings.token_type_embeddings.weight".into(),
            expected: vec![2, 32],
            found: vec![3, 32],
        },
        WeightProblem::Missing {
            name: "cls.predictions.bias".into(),
            expected: vec![97],
        },
    ];
    for p in &expected {
        assert!(problems.0.contains(p), "{p} not in {problems}");
    }
    assert_eq!(problems.0.len(), expected.len(), "{problems}");
    let msg = err.to_string();
    assert!(msg.contains("[3, 32]") && msg.contains("[2, 32]"), "{msg}");
}

#[test]
fn untied_decoder_must_be_stored() {
    let dir = scratch("untied");
    copy_config("mlm_gelu", &dir, |j| {
        j["tie_word_embeddings"] = false.into()
    });
    std::fs::copy(
        fixture("mlm_gelu").join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let err = ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cls.predictions.decoder.weight") && msg.contains("[97, 32]"),
        "{msg}"
    );
}

#[test]
fn bare_checkpoint_has_no_mlm_head() {
    let err = ModelDir::open(&fixture("base_factorised_rotary_value"))
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cls.predictions.transform.dense.weight"),
        "{msg}"
    );
}

#[test]
fn unused_tensors_are_listed_but_not_the_position_table() {
    let dir = ModelDir::open(&fixture("mlm_gelu")).unwrap();
    assert!(dir.checkpoint.has_mlm_head());
    let loaded = dir
        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)
        .unwrap();
    assert!(loaded
        .unused
        .iter()
        .all(|n| n.starts_with("cls.predictions.")));
    assert!(loaded
        .unused
        .contains(&"cls.predictions.transform.dense.weight".to_string()));
    let with_head = dir
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap();
    assert!(with_head.unused.is_empty(), "{:?}", with_head.unused);
}

#[test]
fn truncated_and_garbage_checkpoints_are_clear_errors() {
    for (case, file) in [
        ("mlm_gelu", "model.safetensors"),
        ("mlm_pickle_relu", "pytorch_model.bin"),
    ] {
        let bytes = std::fs::read(fixture(case).join(file)).unwrap();
        for (label, content) in [
            ("truncated", bytes[..bytes.len() / 2].to_vec()),
            ("garbage", b"this is not a checkpoint at all".to_vec()),
        ] {
            let dir = scratch(&format!("{case}-{label}"));
            copy_config(case, &dir, |_| {});
            std::fs::write(dir.join(file), &content).unwrap();
            let result = ModelDir::open(&dir)
                .and_then(|d| d.load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32));
            match result {
                Err(ModelError::CorruptCheckpoint { path, .. }) => assert!(path.ends_with(file)),
                Err(ModelError::Weights { problems, .. }) => {
                    // A zip cut after its directory still lists tensors whose data is gone.
                    assert!(problems
                        .0
                        .iter()
                        .all(|p| matches!(p, WeightProblem::Unreadable { .. })));
                }
                other => panic!("{case} {label}: {other:?}"),
            }
        }
    }
}

#[test]
fn missing_files_are_named() {
    let empty = scratch("empty");
    let err = ModelDir::open(&empty).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
    copy_config("mlm_gelu", &empty, |_| {});
    let err = ModelDir::open(&empty).unwrap_err();
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    let err = ModelDir::open(&empty.join("nope")).unwrap_err();
    assert!(matches!(err, ModelError::MissingFile { .. }), "{err}");
}

#[test]
fn malformed_config_is_named() {
    let dir = scratch("badconfig");
    std::fs::write(dir.join("config.json"), "{\"hidden_size\": 32,").unwrap();
    let err = ModelDir::open(&dir).unwrap_err();
    assert!(matches!(err, ModelError::ConfigJson { .. }), "{err}");
    assert!(err.to_string().contains("config.json"), "{err}");
}

#[test]
fn checkpoint_serves_bare_names_under_the_prefix() {
    let c = Checkpoint::open(&fixture("base_factorised_rotary_value").join("model.safetensors"))
        .unwrap();
    assert!(!c.is_prefixed());
    assert_eq!(
        c.resolve("roformer.embeddings.word_embeddings.weight"),
        Some("embeddings.word_embeddings.weight")
    );
    let p = Checkpoint::open(&fixture("mlm_gelu").join("model.safetensors")).unwrap();
    assert!(p.is_prefixed());
    assert_eq!(p.resolve("embeddings.word_embeddings.weight"), None);
}

fn ids(v: Vec<i64>, b: usize, t: usize) -> Tensor {
    Tensor::from_vec(v, (b, t), &Device::Cpu).unwrap()
}

fn input_error(r: roformer::error::Result<Tensor>) -> String {
    match r {
        Err(ModelError::Input(msg)) => msg,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_input_errors() {
    let model = ModelDir::open(&fixture("mlm_gelu"))
        .unwrap()
        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let good = ids(vec![1, 2, 3, 4, 5, 6], 2, 3);
    let f = |i: &Tensor, t: Option<&Tensor>, m: Option<&Tensor>, p: Option<&Tensor>| {
        model.forward(i, t, m, p)
    };

    let msg = input_error(f(&ids(vec![1, 2, 3, 4, 97, 6], 2, 3), None, None, None));
    assert!(
        msg.contains("input_ids[1][1] = 97") && msg.contains("97"),
        "{msg}"
    );
    let msg = input_error(f(&ids(vec![1, 2, -3, 4, 5, 6], 2, 3), None, None, None));
    assert!(msg.contains("input_ids[0][2] = -3"), "{msg}");
    let msg = input_error(f(
        &good,
        Some(&ids(vec![0, 1, 2, 0, 0, 0], 2, 3)),
        None,
        None,
    ));
    assert!(
        msg.contains("token_type_ids[0][2] = 2") && msg.contains("type_vocab_size"),
        "{msg}"
    );
    let msg = input_error(f(&good, None, Some(&ids(vec![1, 1, 1], 1, 3)), None));
    assert!(msg.contains("attention_mask has shape [1, 3]"), "{msg}");
    let msg = input_error(f(
        &good,
        None,
        Some(&ids(vec![1, 1, 2, 1, 1, 1], 2, 3)),
        None,
    ));
    assert!(msg.contains("neither 0 nor 1"), "{msg}");
    let msg = input_error(f(&good, None, None, Some(&ids(vec![0, 1, 2, 3], 2, 2))));
    assert!(msg.contains("position_ids has shape [2, 2]"), "{msg}");
    let msg = input_error(f(
        &good,
        None,
        None,
        Some(&ids(vec![0, 1, 2, 0, -1, 2], 2, 3)),
    ));
    assert!(msg.contains("position_ids[1][1] = -1"), "{msg}");
    let floats = Tensor::from_vec(vec![1f32, 2., 3.], (1, 3), &Device::Cpu).unwrap();
    let msg = input_error(f(&floats, None, None, None));
    assert!(msg.contains("integers"), "{msg}");
    let flat = Tensor::from_vec(vec![1i64, 2, 3], 3, &Device::Cpu).unwrap();
    let msg = input_error(f(&flat, None, None, None));
    assert!(msg.contains("[batch, seq]"), "{msg}");
    let empty = Tensor::zeros((1, 0), DType::I64, &Device::Cpu).unwrap();
    input_error(f(&empty, None, None, None));
}

/// The fixture `mlm_gelu` with its config edited: the checkpoint (two layers of width 32)
/// cannot back what the config claims.
fn claiming(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Scratch {
    let dir = scratch(name);
    copy_config("mlm_gelu", &dir, edit);
    std::fs::copy(
        fixture("mlm_gelu").join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    dir
}

fn weight_problems(dir: &Path) -> Vec<WeightProblem> {
    let result = ModelDir::open(dir)
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32);
    match result {
        Err(ModelError::Weights { problems, .. }) => problems.0,
        other => panic!("expected weight problems, got {other:?}"),
    }
}

/// `num_hidden_layers` 10 000 000 took 3.8 GB and 8.7 s before aborting (100 000: 6 s and
/// 152 MB of "missing tensor" lines): the layer count is now one problem, found before anything
/// is built.
#[test]
fn more_layers_than_the_checkpoint_is_one_problem() {
    for layers in [100_000u64, 10_000_000] {
        let dir = claiming(&format!("layers{layers}"), |j| {
            j["num_hidden_layers"] = layers.into()
        });
        let problems = weight_problems(&dir);
        let want = WeightProblem::LayerCount {
            expected: layers as usize,
            found: 2,
        };
        assert_eq!(problems, std::slice::from_ref(&want));
        assert_eq!(
            want.to_string(),
            format!("config asks for {layers} layers, the checkpoint has 2")
        );
    }
}

/// `hidden_size` 4e9 with one head aborted allocating its rotary frequencies, and 1e9 with 4
/// heads used 983 MB before its shape errors: config sizes the checkpoint does not hold are
/// compared with its shapes before anything is allocated (rotary dims above the rotary cap are
/// refused with the config already).
#[test]
fn sizes_the_checkpoint_does_not_hold_fail_before_allocating() {
    let dir = claiming("hidden4e9", |j| {
        j["hidden_size"] = 4_000_000_000u64.into();
        j["num_attention_heads"] = 1.into();
        j["position_embedding_type"] = "none".into();
    });
    let problems = weight_problems(&dir);
    let query = WeightProblem::Shape {
        name: "roformer.encoder.layer.0.attention.self.query.weight".into(),
        expected: vec![4_000_000_000, 4_000_000_000],
        found: vec![32, 32],
    };
    assert!(problems.contains(&query), "{problems:?}");
    // 2^32 over 2^16 heads: rotary dims at the cap, a checkpoint of width 32.
    let dir = claiming("hidden2e32", |j| {
        j["hidden_size"] = (1u64 << 32).into();
        j["num_attention_heads"] = (1u64 << 16).into();
        j["embedding_size"] = serde_json::Value::Null;
    });
    let problems = weight_problems(&dir);
    assert!(
        problems
            .iter()
            .all(|p| matches!(p, WeightProblem::Shape { .. })),
        "{problems:?}"
    );
    for (hidden, heads) in [
        (4_000_000_000u64, 1u64),
        (u64::MAX - 1, 1),
        (1_000_000_000, 4),
    ] {
        let dir = claiming(&format!("hidden{hidden}-{heads}"), |j| {
            j["hidden_size"] = hidden.into();
            j["num_attention_heads"] = heads.into();
        });
        let err = ModelDir::open(&dir).unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::InvalidConfig {
                    field: "hidden_size",
                    ..
                }
            ),
            "{err}"
        );
    }
}

/// Thousands of problems are listed up to a few dozen, then counted.
#[test]
fn long_problem_lists_are_summarised() {
    let problems = WeightProblems(
        (0..1000)
            .map(|i| WeightProblem::Missing {
                name: format!("t{i}"),
                expected: vec![1],
            })
            .collect(),
    );
    let text = problems.to_string();
    assert_eq!(
        text.lines().count(),
        1 + WeightProblems::LISTED + 1,
        "{text}"
    );
    assert!(text.starts_with("1000 tensor problem(s):"), "{text}");
    let rest = 1000 - WeightProblems::LISTED;
    assert!(text.ends_with(&format!("... and {rest} more")), "{text}");
}

/// A JSON array as config.json was read field by field (`[117,32,32,2,4,64,"gelu"]` loaded and
/// ran); it must be an object.
#[test]
fn config_must_be_a_json_object() {
    let dir = scratch("array-config");
    std::fs::write(dir.join("config.json"), r#"[117,32,32,2,4,64,"gelu"]"#).unwrap();
    let err = ModelDir::open(&dir).unwrap_err();
    assert!(matches!(err, ModelError::ConfigJson { .. }), "{err}");
    assert!(chain(&err).contains("expected a map"), "{}", chain(&err));
    assert!(RoFormerConfig::from_json_str("[1, 2, 3]").is_err());
}

/// Config values that no checkpoint can satisfy are refused with the config.
#[test]
fn impossible_config_values_are_refused() {
    for (json, field) in [
        (r#"{"vocab_size": 10, "pad_token_id": 10}"#, "pad_token_id"),
        (
            r#"{"vocab_size": 10, "pad_token_id": 4000000000}"#,
            "pad_token_id",
        ),
        (
            r#"{"hidden_size": 64, "num_attention_heads": 1, "max_position_embeddings": 18446744073709551615}"#,
            "max_position_embeddings",
        ),
        (
            r#"{"hidden_size": 262144, "num_attention_heads": 2}"#,
            "hidden_size",
        ),
    ] {
        match RoFormerConfig::from_json_str(json) {
            Err(ModelError::InvalidConfig { field: f, .. }) => assert_eq!(f, field, "{json}"),
            other => panic!("{json}: {other:?}"),
        }
    }
    // Non-rotary models keep no position table: a large max_position_embeddings is theirs.
    let absolute =
        r#"{"position_embedding_type": "none", "max_position_embeddings": 1000000000000}"#;
    assert!(RoFormerConfig::from_json_str(absolute).is_ok());
}

/// The message of `err` and of every source below it, as `{:#}` of anyhow prints them.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// serde's message was printed twice ("line 1 column 1: ...line 1 column 1"): the error's
/// message named its source and the chain repeated it.
#[test]
fn parser_and_io_messages_appear_once_in_the_chain() {
    let dir = scratch("badconfig-once");
    std::fs::write(dir.join("config.json"), "{\"hidden_size\": \"big\"}").unwrap();
    let err = ModelDir::open(&dir).unwrap_err();
    let text = chain(&err);
    assert_eq!(text.matches("line 1 column").count(), 1, "{text}");
    assert!(
        text.contains("config.json") && text.contains("invalid type"),
        "{text}"
    );
    let err = RoFormerConfig::from_file(&dir.join("nope.json")).unwrap_err();
    let text = chain(&err);
    assert_eq!(text.matches("No such file").count(), 1, "{text}");
}

/// A directory named `model.safetensors` was reported as missing, one named `config.json` too;
/// both now say what is there.
#[test]
fn directories_where_files_belong_are_named() {
    let dir = scratch("dir-checkpoint");
    copy_config("mlm_gelu", &dir, |_| {});
    std::fs::create_dir(dir.join("model.safetensors")).unwrap();
    let err = ModelDir::open(&dir).unwrap_err();
    let text = chain(&err);
    assert!(matches!(err, ModelError::Io { .. }), "{text}");
    assert!(
        text.contains("model.safetensors") && text.contains("directory"),
        "{text}"
    );

    let dir = scratch("dir-config");
    std::fs::create_dir(dir.join("config.json")).unwrap();
    let text = chain(&ModelDir::open(&dir).unwrap_err());
    assert!(
        text.contains("config.json") && text.contains("directory"),
        "{text}"
    );
}

/// A directory named `tokenizer_config.json` was silently ignored (the defaults used).
#[test]
fn a_tokenizer_config_directory_is_an_error() {
    let dir = scratch("dir-tokenizer-config");
    std::fs::write(
        dir.join("vocab.txt"),
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n",
    )
    .unwrap();
    assert!(RoFormerTokenizer::from_dir(&dir).is_ok());
    std::fs::create_dir(dir.join("tokenizer_config.json")).unwrap();
    let err = RoFormerTokenizer::from_dir(&dir).unwrap_err();
    let text = chain(&err);
    assert!(
        text.contains("tokenizer_config.json") && text.contains("directory"),
        "{text}"
    );
}

/// Training from a checkpoint (`train mlm --init`) compares the encoder's shapes first too:
/// ten million layers claimed over a two-layer file is one problem, found before building.
#[test]
fn training_from_a_checkpoint_checks_sizes_first() {
    let dir = claiming("train-layers", |j| {
        j["num_hidden_layers"] = 10_000_000u64.into()
    });
    let md = ModelDir::open(&dir).unwrap();
    let result = roformer::train::build_trainable::<RoFormerForMaskedLM>(
        &md.config,
        Some(&md.checkpoint),
        0,
        &Device::Cpu,
    );
    match result {
        Err(ModelError::Weights { problems, .. }) => assert_eq!(
            problems.0,
            [WeightProblem::LayerCount {
                expected: 10_000_000,
                found: 2
            }]
        ),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("built"),
    }
}
