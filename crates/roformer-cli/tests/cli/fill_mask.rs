//! `roformer fill-mask` against `roformer forward` on the same ids, and its errors.
//!
//! The model directory is put together from committed fixtures: the MLM checkpoint `mlm_gelu`
//! (made by transformers, vocab_size 97) with the first 97 lines of the tokenizer fixture's
//! vocab.txt, which hold the special tokens and the Chinese words the texts use. The helpers
//! here serve the `embed` tests too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::common::roformer;
use test_support::Scratch;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures")
}

/// A fresh scratch directory for test `name`.
pub(crate) fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-cli-fill-embed", name)
}

/// A model directory `name`: config and checkpoint of the fixture `case`, and a vocab.txt of
/// as many lines as its config's vocab_size, taken from the tokenizer fixture.
pub(crate) fn model_dir(case: &str, name: &str) -> Scratch {
    let dir = scratch(name);
    let src = fixtures().join("model").join(case);
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let vocab_size = config["vocab_size"].as_u64().unwrap() as usize;
    let vocab = std::fs::read_to_string(fixtures().join("tokenizer/vocab.txt")).unwrap();
    let lines: Vec<&str> = vocab.lines().take(vocab_size).collect();
    assert_eq!(
        lines.len(),
        vocab_size,
        "the tokenizer fixture is too small"
    );
    std::fs::write(dir.join("vocab.txt"), lines.join("\n") + "\n").unwrap();
    dir
}

/// Runs the binary and returns stdout, failing the test with stderr if it fails.
pub(crate) fn ok(args: &[&str]) -> String {
    let out = roformer(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the binary expecting a clean failure (non-zero exit, no panic) and returns stderr.
pub(crate) fn fails(args: &[&str]) -> String {
    let out = roformer(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    stderr
}

/// The ids of `[CLS] text [SEP]` as `roformer tokenize` gives them.
pub(crate) fn token_ids(model: &Path, text: &str) -> Vec<i64> {
    let line = ok(&[
        "tokenize",
        "--model",
        model.to_str().unwrap(),
        "--json",
        text,
    ]);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    v["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// The outputs of `roformer forward` on one unpadded sequence of ids.
pub(crate) fn forward(model: &Path, ids: &[i64], scratch_dir: &Path) -> HashMap<String, Tensor> {
    let input = scratch_dir.join("forward-input.json");
    let output = scratch_dir.join("forward-output.safetensors");
    std::fs::write(
        &input,
        serde_json::json!({ "input_ids": [ids] }).to_string(),
    )
    .unwrap();
    ok(&[
        "forward",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    candle_core::safetensors::load(&output, &Device::Cpu).unwrap()
}

fn fill_mask_json(model: &Path, text: &str, top_k: &str) -> serde_json::Value {
    fill_mask_json_with(model, text, top_k, &[])
}

/// [`fill_mask_json`] with `extra` flags.
fn fill_mask_json_with(model: &Path, text: &str, top_k: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "fill-mask",
        "--model",
        model.to_str().unwrap(),
        "--json",
        "--top-k",
        top_k,
    ];
    args.extend_from_slice(extra);
    args.push(text);
    serde_json::from_str(ok(&args).trim()).unwrap()
}

/// Each mask's predictions are the largest entries of softmax(forward's logits) at its
/// position: top-1 is the argmax, ids and probabilities agree with a softmax computed here,
/// probabilities are sorted and sum to at most 1.
#[test]
fn predictions_are_the_softmax_of_forward_logits() {
    let model = model_dir("mlm_gelu", "fill-softmax");
    let text = "今天[MASK]气非常好，我们在[MASK]京";
    let ids = token_ids(&model, text);
    let logits = &forward(&model, &ids, &model)["logits"];
    let report = fill_mask_json(&model, text, "7");
    assert_eq!(report["text"], text);
    let masks = report["masks"].as_array().unwrap();
    let mask_positions: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] == 9).collect();
    assert_eq!(
        mask_positions.len(),
        2,
        "[MASK] is id 9 in the fixture vocab"
    );
    assert_eq!(masks.len(), 2);
    for (mask, &position) in masks.iter().zip(&mask_positions) {
        assert_eq!(mask["position"].as_u64().unwrap() as usize, position);
        let row: Vec<f32> = logits
            .get(0)
            .unwrap()
            .get(position)
            .unwrap()
            .to_vec1()
            .unwrap();
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let denom: f64 = row.iter().map(|&z| f64::from(z - max).exp()).sum();
        let argmax = row.iter().position(|&z| z == max).unwrap();

        let predictions = mask["predictions"].as_array().unwrap();
        assert_eq!(predictions.len(), 7);
        assert_eq!(predictions[0]["id"].as_u64().unwrap() as usize, argmax);
        let mut previous = f64::INFINITY;
        let mut total = 0.0;
        for p in predictions {
            let id = p["id"].as_u64().unwrap() as usize;
            let prob = p["probability"].as_f64().unwrap();
            // f32 logits from two runs of the same binary on the same ids: the only
            // difference is the f32 -> f64 softmax, accurate far below 1e-6.
            let expected = f64::from(row[id] - max).exp() / denom;
            assert!(
                (prob - expected).abs() < 1e-6,
                "id {id}: {prob} vs {expected}"
            );
            assert!(prob <= previous, "not sorted");
            previous = prob;
            total += prob;
        }
        assert!(total <= 1.0 + 1e-12);
        // The listed tokens are the vocabulary's.
        let vocab = std::fs::read_to_string(model.join("vocab.txt")).unwrap();
        let tokens: Vec<&str> = vocab.lines().collect();
        assert_eq!(predictions[0]["token"], tokens[argmax]);
    }
}

/// `text` with its `n`-th `[MASK]` (0-based) replaced by `token` without its `##`.
fn filled(text: &str, n: usize, token: &str) -> String {
    let (at, _) = text.match_indices("[MASK]").nth(n).unwrap();
    let piece = token.strip_prefix("##").unwrap_or(token);
    format!("{}{piece}{}", &text[..at], &text[at + "[MASK]".len()..])
}

/// Each candidate's `sequence` fills its own mask with its token and leaves the others as
/// written, in the JSON and in the table.
#[test]
fn sequences_fill_one_mask_each() {
    let model = model_dir("mlm_gelu", "fill-sequence");
    let text = "今天[MASK]气非常好，我们在[MASK]京";
    let report = fill_mask_json(&model, text, "4");
    let masks = report["masks"].as_array().unwrap();
    assert_eq!(masks.len(), 2);
    let mut expected = Vec::new();
    for (n, mask) in masks.iter().enumerate() {
        for p in mask["predictions"].as_array().unwrap() {
            let sequence = filled(text, n, p["token"].as_str().unwrap());
            assert_eq!(p["sequence"], sequence.as_str(), "mask {n}: {p}");
            assert_eq!(sequence.matches("[MASK]").count(), 1);
            expected.push((p["token"].as_str().unwrap().to_owned(), sequence));
        }
    }
    let table = ok(&[
        "fill-mask",
        "--model",
        model.to_str().unwrap(),
        "--top-k",
        "4",
        text,
    ]);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2', '3', '4']))
        .collect();
    assert_eq!(rows.len(), expected.len(), "{table}");
    for (row, (token, sequence)) in rows.iter().zip(&expected) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "rank, probability, token, sequence: {row}");
        assert_eq!(
            (fields[2], fields[3]),
            (token.as_str(), sequence.as_str()),
            "{table}"
        );
    }
}

#[test]
fn top_k_larger_than_the_vocabulary_lists_every_token_once() {
    let model = model_dir("mlm_gelu", "fill-all");
    let report = fill_mask_json(&model, "[MASK]", "1000");
    let predictions = report["masks"][0]["predictions"].as_array().unwrap();
    assert_eq!(predictions.len(), 97);
    let mut ids: Vec<u64> = predictions
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..97).collect::<Vec<u64>>());
    let total: f64 = predictions
        .iter()
        .map(|p| p["probability"].as_f64().unwrap())
        .sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
}

#[test]
fn table_output_lists_each_mask() {
    let model = model_dir("mlm_gelu", "fill-table");
    let out = ok(&[
        "fill-mask",
        "--model",
        model.to_str().unwrap(),
        "--top-k",
        "3",
        "[MASK]天[MASK]",
    ]);
    assert!(out.contains("mask 1 of 2 (token 1):"), "{out}");
    assert!(out.contains("mask 2 of 2 (token 3):"), "{out}");
    let ranks = out
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2', '3']))
        .count();
    assert_eq!(ranks, 6, "{out}");
}

#[test]
fn a_text_without_mask_is_an_error() {
    let model = model_dir("mlm_gelu", "fill-nomask");
    let stderr = fails(&["fill-mask", "--model", model.to_str().unwrap(), "今天天气"]);
    assert!(
        stderr.contains("no mask token") && stderr.contains("[MASK]"),
        "{stderr}"
    );
}

#[test]
fn a_checkpoint_without_mlm_head_is_an_error() {
    let model = model_dir("base_long_silu", "fill-nohead");
    let stderr = fails(&["fill-mask", "--model", model.to_str().unwrap(), "今[MASK]"]);
    assert!(stderr.contains("no masked-LM head"), "{stderr}");
}

#[test]
fn bad_arguments_are_errors() {
    let model = model_dir("mlm_gelu", "fill-args");
    let m = model.to_str().unwrap();
    fails(&["fill-mask", "--model", m, "--top-k", "0", "[MASK]"]);
    let stderr = fails(&["fill-mask", "--model", "/nonexistent/dir", "[MASK]"]);
    assert!(stderr.contains("/nonexistent/dir"), "{stderr}");
}

/// Texts longer than max_position_embeddings (64) are cut by default, with a note and a
/// `truncated` field; a mask past the cut is an error, not a silently missing prediction.
#[test]
fn long_texts_are_cut_and_masks_past_the_cut_are_errors() {
    let model = model_dir("mlm_gelu", "fill-long");
    let m = model.to_str().unwrap();
    let tail = format!("{}[MASK]", "我们在北京学习".repeat(40));
    let stderr = fails(&["fill-mask", "--model", m, &tail]);
    assert!(
        stderr.contains("1 of the text's 1 mask tokens") && stderr.contains("--max-length"),
        "{stderr}"
    );
    let out = ok(&[
        "fill-mask",
        "--model",
        m,
        "--max-length",
        "0",
        "--json",
        &tail,
    ]);
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(report["truncated"].is_null());
    assert!(report["masks"][0]["position"].as_u64().unwrap() > 64);

    let head = format!("[MASK]{}", "我们在北京学习".repeat(40));
    let out = roformer(&["fill-mask", "--model", m, "--json", &head]);
    assert!(out.status.success());
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(
        report["truncated"],
        serde_json::json!({"tokens": token_ids(&model, &head).len(), "kept": 64})
    );
    assert_eq!(report["masks"][0]["position"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the text: ") && stderr.contains("cut to 64"),
        "{stderr}"
    );
}

/// `--precision bf16` (weights packed once at load) ranks as f32 does here, with probabilities
/// within 2e-2 (each bf16 operand is within 2^-9 relative; the fixture's logits are of size
/// ~1, so they move by ~1e-2 at most and the probabilities by less).
#[test]
fn bf16_predictions_are_within_rounding_of_f32() {
    let model = model_dir("mlm_gelu", "fill-bf16");
    let text = "今天[MASK]气非常好，我们在[MASK]京";
    let f32_report = fill_mask_json(&model, text, "3");
    let bf16_report = fill_mask_json_with(&model, text, "3", &["--precision", "bf16"]);
    let masks = |r: &serde_json::Value| r["masks"].as_array().unwrap().clone();
    for (a, b) in masks(&f32_report).iter().zip(&masks(&bf16_report)) {
        let (pa, pb) = (&a["predictions"][0], &b["predictions"][0]);
        assert_eq!(pa["id"], pb["id"]);
        let diff =
            (pa["probability"].as_f64().unwrap() - pb["probability"].as_f64().unwrap()).abs();
        assert!(diff < 2e-2, "{diff}");
    }
}
