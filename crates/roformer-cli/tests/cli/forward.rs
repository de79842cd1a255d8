//! `roformer forward` on the committed parity fixtures (crates/roformer/tests/fixtures/model,
//! made by scripts/make_roformer_fixtures.py from transformers), and its bad-input errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use test_support::max_abs_diff;

use crate::common::roformer;
use test_support::Scratch;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../roformer/tests/fixtures/model")
        .join(case)
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-cli-forward", name)
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

/// A zip archive holding `files` uncompressed (what `torch.save` writes, minus compression).
fn stored_zip(files: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for (name, data) in files {
        let crc = crc32fast::hash(data);
        let (offset, size, name_len) = (out.len() as u32, data.len() as u32, name.len() as u16);
        // Local header: signature, version 2.0, no flags, stored, no time, crc, sizes, name.
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for v in [crc, size, size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        // Central directory entry.
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for v in [crc, size, size] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&name_len.to_le_bytes());
        central.extend_from_slice(&[0; 12]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let (central_offset, central_len) = (out.len() as u32, central.len() as u32);
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    let n = files.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&central_len.to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

/// With RUST_BACKTRACE=1, a user error is one message: candle used to append its captured
/// backtrace (stack frames) to the errors it makes, here the pickle reader's.
#[test]
fn errors_carry_no_backtrace_under_rust_backtrace() {
    let dir = scratch("backtrace");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::copy(
        fixture("mlm_gelu").join("config.json"),
        model.join("config.json"),
    )
    .unwrap();
    // A pickle with an unknown opcode (0xfe).
    let zip = stored_zip(&[
        ("archive/data.pkl", b"\x80\x02\xfe."),
        ("archive/version", b"3\n"),
    ]);
    std::fs::write(model.join("pytorch_model.bin"), zip).unwrap();
    let input = dir.join("input.json");
    std::fs::write(&input, r#"{"input_ids": [[1, 2, 3]]}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(["forward", "--model", model.to_str().unwrap()])
        .args(["--input", input.to_str().unwrap()])
        .args(["--output", dir.join("out.safetensors").to_str().unwrap()])
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("pytorch_model.bin"), "{stderr}");
    assert!(
        !stderr.contains("stack backtrace")
            && !stderr.contains("   0: ")
            && !stderr.contains(".rs:"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// A model directory holding `mlm_gelu`'s checkpoint and its config edited by `edit` (apart
/// from the scratch directory `failure` makes for the run of the same name).
fn model_claiming(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Scratch {
    let dir = scratch(&format!("{name}-model"));
    let text = std::fs::read_to_string(fixture("mlm_gelu").join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        fixture("mlm_gelu").join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    dir
}

/// Config sizes that panicked (capacity overflow), aborted (allocation failure) or cost
/// gigabytes and seconds before failing are clear errors found before the model is built.
#[test]
fn config_sizes_the_checkpoint_does_not_hold_fail_cleanly() {
    let ids = Some(r#"{"input_ids": [[1, 2, 3]]}"#);
    let cases: &[(&str, serde_json::Value, serde_json::Value, &[&str])] = &[
        (
            "hidden-max",
            "hidden_size".into(),
            (u64::MAX - 1).into(),
            &["hidden_size", "limit"],
        ),
        (
            "hidden-4e9",
            "hidden_size".into(),
            4_000_000_000u64.into(),
            &["hidden_size", "limit"],
        ),
        (
            "layers-1e7",
            "num_hidden_layers".into(),
            10_000_000u64.into(),
            &["config asks for 10000000 layers, the checkpoint has 2"],
        ),
        (
            "layers-1e5",
            "num_hidden_layers".into(),
            100_000u64.into(),
            &["config asks for 100000 layers, the checkpoint has 2"],
        ),
        (
            "pad",
            "pad_token_id".into(),
            97.into(),
            &["pad_token_id", "vocab_size 97"],
        ),
    ];
    for (name, field, value, needles) in cases {
        let model = model_claiming(name, |c| {
            c[field.as_str().unwrap()] = value.clone();
            if *name != "pad" && field == "hidden_size" {
                c["num_attention_heads"] = 1.into();
            }
        });
        let stderr = failure(name, &model, ids);
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "{name}: {needle:?} not in {stderr}"
            );
        }
        // One short message, not a line per tensor of ten million layers.
        assert!(stderr.lines().count() < 60, "{name}: {stderr}");
    }
    // Shapes the checkpoint does not hold, below the rotary limit: listed, not allocated.
    let model = model_claiming("hidden-2e32", |c| {
        c["hidden_size"] = (1u64 << 32).into();
        c["num_attention_heads"] = (1u64 << 16).into();
    });
    let stderr = failure("hidden-2e32", &model, ids);
    assert!(
        stderr.contains("has shape [32, 32], expected [4294967296, 4294967296]"),
        "{stderr}"
    );
}

/// A JSON array as config.json loaded and ran, read field by field; serde's message was printed
/// twice; directories named like the files were ignored or reported as missing.
#[test]
fn malformed_model_directories_fail_cleanly() {
    let ids = Some(r#"{"input_ids": [[1, 2, 3]]}"#);
    let array = model_claiming("array", |_| {});
    std::fs::write(array.join("config.json"), r#"[117,32,32,2,4,64,"gelu"]"#).unwrap();
    let stderr = failure("array", &array, ids);
    assert!(stderr.contains("expected a map"), "{stderr}");

    let typed = model_claiming("typed", |c| c["hidden_size"] = "big".into());
    let stderr = failure("typed", &typed, ids);
    assert_eq!(stderr.matches("line 1 column").count(), 1, "{stderr}");
    assert!(stderr.contains("malformed config"), "{stderr}");

    let dir = model_claiming("ckpt-dir", |_| {});
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    std::fs::create_dir(dir.join("model.safetensors")).unwrap();
    let stderr = failure("ckpt-dir", &dir, ids);
    assert!(
        stderr.contains("model.safetensors") && stderr.contains("is a directory"),
        "{stderr}"
    );
}
