//! `roformer forward` on the committed parity fixtures (crates/roformer/tests/fixtures/model,
//! made by scripts/make_roformer_fixtures.py from transformers), and its bad-input errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use crate::common::roformer;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../roformer/tests/fixtures/model")
        .join(case)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "roformer-cli-forward-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rows(t: &Tensor) -> serde_json::Value {
    let v: Vec<Vec<i64>> = t.to_dtype(DType::I64).unwrap().to_vec2().unwrap();
    serde_json::json!(v)
}

/// Writes the reference inputs of `case` as INPUT.json and returns the reference tensors.
fn input_json(case: &str, path: &Path) -> HashMap<String, Tensor> {
    let r =
        candle_core::safetensors::load(fixture(case).join("reference.safetensors"), &Device::Cpu)
            .unwrap();
    let mut json = serde_json::Map::new();
    for key in ["input_ids", "attention_mask", "token_type_ids"] {
        if let Some(t) = r.get(key) {
            json.insert(key.into(), rows(t));
        }
    }
    std::fs::write(path, serde_json::Value::Object(json).to_string()).unwrap();
    r
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn run_forward(model: &Path, input: &Path, output: &Path) -> std::process::Output {
    roformer(&[
        "forward",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ])
}

/// Hidden states and MLM logits within 1e-4 of transformers (see the library's parity tests
/// for the tolerance).
#[test]
fn forward_matches_transformers_on_a_masked_lm() {
    let dir = scratch("mlm");
    let (input, output) = (dir.join("input.json"), dir.join("out.safetensors"));
    let r = input_json("mlm_gelu", &input);
    let out = run_forward(&fixture("mlm_gelu"), &input, &output);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    assert_eq!(got["last_hidden_state"].dtype(), DType::F32);
    assert!(max_abs_diff(&got["last_hidden_state"], &r["last_hidden_state"]) <= 1e-4);
    assert!(max_abs_diff(&got["logits"], &r["logits"]) <= 1e-4);
}

#[test]
fn forward_on_a_bare_model_writes_hidden_states_only() {
    let dir = scratch("bare");
    let (input, output) = (dir.join("input.json"), dir.join("out.safetensors"));
    let r = input_json("base_long_silu", &input);
    let out = run_forward(&fixture("base_long_silu"), &input, &output);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    assert_eq!(got.len(), 1);
    assert!(max_abs_diff(&got["last_hidden_state"], &r["last_hidden_state"]) <= 1e-4);
}

/// Runs `forward` with an input file holding `json` (or no file when `None`) on `model` and
/// returns stderr, checking a clean failure: non-zero exit, no panic.
fn failure(name: &str, model: &Path, json: Option<&str>) -> String {
    let dir = scratch(name);
    let (input, output) = (dir.join("input.json"), dir.join("out.safetensors"));
    if let Some(json) = json {
        std::fs::write(&input, json).unwrap();
    }
    let out = run_forward(model, &input, &output);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{name}: succeeded");
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    assert!(!output.exists(), "{name}: wrote an output");
    stderr
}

#[test]
fn bad_inputs_fail_cleanly() {
    let model = fixture("mlm_gelu");
    let ok_ids = r#"{"input_ids": [[1, 2, 3]]}"#;
    let cases: &[(&str, PathBuf, Option<&str>, &[&str])] = &[
        ("no-model", model.join("nope"), Some(ok_ids), &["nope"]),
        ("no-input", model.clone(), None, &["input.json"]),
        (
            "malformed",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2"#),
            &["malformed input JSON"],
        ),
        (
            "ragged",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2, 3], [4, 5]]}"#),
            &["ragged", "row 1"],
        ),
        (
            "vocab",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2, 500]]}"#),
            &["input_ids[0][2] = 500", "vocab_size"],
        ),
        (
            "types",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2]], "token_type_ids": [[0, 5]]}"#),
            &["token_type_ids[0][1] = 5"],
        ),
        (
            "mask-shape",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2]], "attention_mask": [[1, 1, 1]]}"#),
            &["attention_mask has shape [1, 3]"],
        ),
        (
            "typo",
            model.clone(),
            Some(r#"{"input_ids": [[1, 2]], "attention-mask": [[1, 1]]}"#),
            &["attention-mask"],
        ),
        (
            "empty",
            model.clone(),
            Some(r#"{"input_ids": []}"#),
            &["input_ids is empty"],
        ),
    ];
    for (name, model, json, needles) in cases {
        let stderr = failure(name, model, *json);
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "{name}: {needle:?} not in {stderr}"
            );
        }
    }
}

#[test]
fn missing_checkpoint_file_fails_cleanly() {
    let dir = scratch("nockpt");
    std::fs::copy(
        fixture("mlm_gelu").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let stderr = failure("nockpt-run", &dir, Some(r#"{"input_ids": [[1, 2, 3]]}"#));
    assert!(
        stderr.contains("model.safetensors or pytorch_model.bin"),
        "{stderr}"
    );
}
