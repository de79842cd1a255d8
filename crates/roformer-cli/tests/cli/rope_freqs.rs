//! `roformer rope freqs`: the schedule a config.json implies, against transformers' values
//! (the rotary crate's fixtures, made by scripts/make_scaling_fixtures.py).

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::common::roformer;

/// Writes `config` to a fresh file for test `test` in Cargo's per-target temporary directory.
fn config_file(test: &str, config: &Value) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rope_freqs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{test}.json"));
    std::fs::write(&path, serde_json::to_string(config).unwrap()).unwrap();
    path
}

fn fixtures() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../rotary/tests/fixtures/scaling/cases.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn run_json(path: &std::path::Path, seq_len: Option<u64>) -> Value {
    let path = path.to_str().unwrap();
    let seq = seq_len.map(|n| n.to_string());
    let mut args = vec!["rope", "freqs", "--config", path, "--json"];
    if let Some(s) = &seq {
        args.extend(["--seq-len", s.as_str()]);
    }
    let out = roformer(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Relative error <= 1e-5 (transformers computes in float32).
fn assert_close(ours: f64, theirs: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= 1e-5 * theirs.abs(),
        "{what}: {ours} vs {theirs}"
    );
}

#[test]
fn json_matches_transformers() {
    let wanted = [
        "llama3_legacy",
        "qwen2_yarn_legacy",
        "llama_dynamic_legacy",
        "phi3_longrope_legacy",
    ];
    for case in fixtures() {
        let name = case["name"].as_str().unwrap();
        if !wanted.contains(&name) {
            continue;
        }
        let path = config_file(name, &case["config"]);
        for check in case["checks"].as_array().unwrap() {
            let seq_len = check["seq_len"].as_u64();
            let out = run_json(&path, seq_len);
            let mut keys: Vec<&String> = out.as_object().unwrap().keys().collect();
            keys.sort();
            assert_eq!(keys, ["attention_factor", "inv_freq"]);
            let ours = out["inv_freq"].as_array().unwrap();
            let theirs = check["inv_freq"].as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{name}");
            for (a, b) in ours.iter().zip(theirs) {
                assert_close(a.as_f64().unwrap(), b.as_f64().unwrap(), name);
            }
            assert_close(
                out["attention_factor"].as_f64().unwrap(),
                check["attention_factor"].as_f64().unwrap(),
                name,
            );
        }
    }
}

#[test]
fn table_lists_every_frequency() {
    let config = json!({"hidden_size": 64, "num_attention_heads": 2, "rope_theta": 100.0});
    let path = config_file("table", &config);
    let out = roformer(&["rope", "freqs", "--config", path.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("rope_type default"), "{text}");
    assert!(text.contains("attention_factor 1"), "{text}");
    // Header lines plus one row per frequency (32 / 2 = 16).
    let rows = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(rows, 16, "{text}");
}

/// `roformer rope freqs ... | head -0`: a table printed line by line into a pipe whose reader
/// has gone ends quietly and successfully (`println!` panicked there, exit status 101).
#[test]
fn table_into_a_closed_pipe_ends_quietly() {
    let config = json!({"hidden_size": 64, "num_attention_heads": 2});
    let path = config_file("closed_pipe", &config);
    // The read end is closed before the command starts: its first write gets EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(["rope", "freqs", "--config", path.to_str().unwrap()])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(err.is_empty(), "{err}");
}

#[test]
fn uninterpretable_config_names_the_field() {
    let cases = [
        (
            json!({"head_dim": 64, "rope_scaling": {"type": "linear"}}),
            "rope_scaling.factor",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {"rope_type": "warp"}}),
            "rope_parameters.rope_type",
        ),
        (json!({"vocab_size": 10}), "head_dim"),
    ];
    for (i, (config, field)) in cases.into_iter().enumerate() {
        let path = config_file(&format!("bad{i}"), &config);
        let out = roformer(&[
            "rope",
            "freqs",
            "--config",
            path.to_str().unwrap(),
            "--json",
        ]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "{field}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = roformer(&["rope", "freqs", "--config", "/nonexistent/config.json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/config.json"));
}

/// `"head_dim": 18446744073709551615` panicked (capacity overflow) and 2^40 aborted allocating
/// the frequencies: rotary dims above the rotary crate's limit name the field.
#[test]
fn head_dims_past_the_limit_name_the_field() {
    for (i, config) in [
        json!({"head_dim": u64::MAX}),
        json!({"head_dim": 1u64 << 40}),
        json!({"hidden_size": u64::MAX - 1, "num_attention_heads": 1}),
    ]
    .into_iter()
    .enumerate()
    {
        let path = config_file(&format!("huge{i}"), &config);
        let out = roformer(&["rope", "freqs", "--config", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config}");
        assert!(stderr.contains("limit of 65536"), "{config}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
