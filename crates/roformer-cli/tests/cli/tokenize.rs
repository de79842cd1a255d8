//! `roformer tokenize`: ids and JSON lines equal to transformers' (the tokenizer fixtures of
//! the roformer crate), and clear errors on bad checkpoints.

use std::path::PathBuf;

use serde_json::Value;
use test_support::Scratch;

use crate::common::roformer;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/tokenizer")
}

/// The fixture cases transformers encoded with the directory's own (default) configuration,
/// whose text can be passed as an argument (no NUL).
fn default_cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixture_dir().join("cases.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "single" && c["config"] == "default")
        .filter(|c| c.get("max_length").is_none())
        .filter(|c| !c["text"].as_str().unwrap().contains('\0'))
        .cloned()
        .collect()
}

#[test]
fn json_lines_match_transformers() {
    let cases = default_cases();
    assert!(cases.len() > 30);
    let dir = fixture_dir();
    let mut args = vec!["tokenize", "--model", dir.to_str().unwrap(), "--json", "--"];
    args.extend(cases.iter().map(|c| c["text"].as_str().unwrap()));
    let out = roformer(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), cases.len());
    for (line, case) in lines.iter().zip(&cases) {
        let got: Value = serde_json::from_str(line).unwrap();
        assert_eq!(got["input_ids"], case["input_ids"], "{}", case["text"]);
        assert_eq!(got["tokens"], case["tokens"], "{}", case["text"]);
        assert_eq!(got["offsets"], case["offsets"], "{}", case["text"]);
        assert_eq!(got.as_object().unwrap().len(), 3);
    }
}

#[test]
fn plain_output_is_ids_per_line_and_max_length_cuts() {
    let case = &default_cases()[0];
    let text = case["text"].as_str().unwrap();
    let want: Vec<String> = case["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.to_string())
        .collect();
    let dir = fixture_dir();
    let out = roformer(&["tokenize", "--model", dir.to_str().unwrap(), text, text]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout, format!("{0}\n{0}\n", want.join(" ")));

    let out = roformer(&[
        "tokenize",
        "--model",
        dir.to_str().unwrap(),
        "--max-length",
        "4",
        text,
    ]);
    assert!(out.status.success());
    let ids: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .split_whitespace()
        .collect();
    // [CLS], the first two tokens, [SEP].
    assert_eq!(ids, [&want[0], &want[1], &want[2], want.last().unwrap()]);
}

#[test]
fn bad_checkpoints_fail_with_a_clear_message() {
    let dir = Scratch::new("roformer-cli-tokenize", "bad-checkpoints");
    let d = dir.to_str().unwrap();

    let missing = dir.join("absent");
    let out = roformer(&["tokenize", "--model", missing.to_str().unwrap(), "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("vocab.txt"), "{err}");

    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[CLS]\n[SEP]\n[MASK]\nx\n").unwrap();
    let out = roformer(&["tokenize", "--model", d, "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no unk token \"[UNK]\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n").unwrap();
    let out = roformer(&["tokenize", "--model", d, "--max-length", "1", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_length 1"), "{err}");
}
