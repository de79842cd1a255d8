//! Bad checkpoints, bad directories and bad inputs give typed errors that name the problem.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use roformer::{
    Checkpoint, HeadModel, ModelDir, ModelError, RoFormerForMaskedLM, RoFormerModel, WeightProblem,
};

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model")
        .join(case)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roformer-errors-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
        .load::<RoFormerForMaskedLM>(DType::F32, &Device::Cpu)
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
    let err = RoFormerForMaskedLM::load_from_dir(&dir, &Device::Cpu, DType::F32).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cls.predictions.decoder.weight") && msg.contains("[97, 32]"),
        "{msg}"
    );
}

#[test]
fn bare_checkpoint_has_no_mlm_head() {
    let err = RoFormerForMaskedLM::load_from_dir(
        &fixture("base_factorised_rotary_value"),
        &Device::Cpu,
        DType::F32,
    )
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
    let loaded = dir.load::<RoFormerModel>(DType::F32, &Device::Cpu).unwrap();
    assert!(loaded
        .unused
        .iter()
        .all(|n| n.starts_with("cls.predictions.")));
    assert!(loaded
        .unused
        .contains(&"cls.predictions.transform.dense.weight".to_string()));
    let with_head = dir
        .load::<RoFormerForMaskedLM>(DType::F32, &Device::Cpu)
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
                .and_then(|d| d.load::<RoFormerForMaskedLM>(DType::F32, &Device::Cpu));
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
    let model =
        RoFormerModel::load_from_dir(&fixture("mlm_gelu"), &Device::Cpu, DType::F32).unwrap();
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
