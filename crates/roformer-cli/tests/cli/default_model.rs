//! The built-in poetry model (`crates/roformer-builtin/assets/poetry-model/`): `fill-mask`,
//! `tokenize` and `embed` without `--model`.

use serde_json::Value;

use crate::fill_mask::{ok, scratch};

/// The `--json` predictions of `fill-mask` (built-in model) for the first mask of `text`:
/// (token, probability), most likely first.
fn predictions(text: &str) -> Vec<(String, f64)> {
    let out = ok(&["fill-mask", "--json", "--top-k", "5", text]);
    let report: Value = serde_json::from_str(&out).unwrap();
    report["masks"][0]["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["token"].as_str().unwrap().to_owned(),
                p["probability"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn fill_mask_without_model_completes_a_poem() {
    let top = predictions("床前明月[MASK]，疑是地上霜。");
    assert_eq!(top.len(), 5);
    assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "{top:?}");
    assert!(top.iter().map(|p| p.1).sum::<f64>() <= 1.0 + 1e-9);
    // The model card's example: a character first (夜, 0.48), never punctuation.
    assert!(
        top[0].0.chars().count() == 1 && top[0].0.chars().all(char::is_alphabetic),
        "{top:?}"
    );
}

#[test]
fn fill_mask_reads_both_scripts_and_completes_the_moon() {
    // The check: 举头望明[MASK] and 舉頭望明[MASK] both give 月 first (the model card
    // measures 0.56 and 0.61, the next candidate 0.07 and 0.07).
    for text in ["举头望明[MASK]", "舉頭望明[MASK]"] {
        let top = predictions(text);
        assert_eq!(top[0].0, "月", "{text}: {top:?}");
        assert!(top[0].1 > 2.0 * top[1].1, "{text}: {top:?}");
    }
}

#[test]
fn fill_mask_without_model_prints_a_table() {
    let out = ok(&["fill-mask", "床前明月[MASK]，疑是地上霜。"]);
    assert!(out.starts_with("mask 1 of 1 (token 5):"), "{out}");
    assert_eq!(out.lines().count(), 6, "{out}");
}

#[test]
fn tokenize_without_model_knows_both_scripts() {
    let out = ok(&["tokenize", "--json", "舉頭望明月", "举头望明月"]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let tokens = |v: &Value| -> Vec<String> {
        v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        tokens(&lines[0]),
        ["[CLS]", "舉", "頭", "望", "明", "月", "[SEP]"]
    );
    assert_eq!(
        tokens(&lines[1]),
        ["[CLS]", "举", "头", "望", "明", "月", "[SEP]"]
    );
    // Same characters, same ids; different characters, different ids (no [UNK]).
    let ids = |v: &Value| -> Vec<u64> {
        v["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect()
    };
    let (a, b) = (ids(&lines[0]), ids(&lines[1]));
    assert_eq!(a[3..], b[3..]);
    assert_ne!(a[1], b[1]);
    assert!(a.iter().chain(&b).all(|&id| id != 1), "[UNK] is id 1");
}

#[test]
fn embed_without_model_gives_one_vector_per_line() {
    let dir = scratch("default-embed");
    let input = dir.join("poems.txt");
    std::fs::write(
        &input,
        "床前明月光，疑是地上霜。\n舉頭望明月，低頭思故鄉。\n",
    )
    .unwrap();
    let output = dir.join("vectors.jsonl");
    ok(&[
        "embed",
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    let vectors: Vec<Vec<f64>> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(vectors.len(), 2);
    assert!(vectors.iter().all(|v| v.len() == 256));
    assert!(vectors.iter().flatten().all(|x| x.is_finite()));
    assert_ne!(vectors[0], vectors[1]);
}

#[test]
fn eval_mlm_scores_the_built_in_model_and_the_baseline() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/poetry");
    let out = ok(&[
        "eval",
        "mlm",
        "--corpus",
        corpus.to_str().unwrap(),
        "--also-simplified",
        "--validation",
        "0.5",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let all = &report["all"];
    let masked = all["masked"].as_u64().unwrap();
    assert!(masked > 0, "{report}");
    for key in ["model_top1", "model_top5", "baseline_top1", "baseline_top5"] {
        let rate = all[key].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{key}: {rate}");
    }
    assert!(all["model_top1"].as_f64() <= all["model_top5"].as_f64());
    // The sample's poems are (mostly) in the model's training data, so this is not the model
    // card's held-out figure; it pins that the shipped model reads context at all.
    let (model, baseline) = (
        all["model_top1"].as_f64().unwrap(),
        all["baseline_top1"].as_f64().unwrap(),
    );
    assert!(model > 2.0 * baseline, "{report}");
    assert!(all["baseline_top1"].as_f64() <= all["baseline_top5"].as_f64());
    assert_eq!(
        report["original"]["masked"].as_u64().unwrap()
            + report["simplified_copies"]["masked"].as_u64().unwrap(),
        masked
    );
    assert_eq!(report["baseline_top5_chars"].as_array().unwrap().len(), 5);
}

#[test]
fn transformers_loads_the_built_in_model() {
    // scripts/check_hf_roundtrip.py on the shipped model directory (see MODEL_CARD.md).
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/poetry_model_hf_report.json");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dir = &report["dirs"][0];
    assert_eq!(dir["architecture"], "RoFormerForMaskedLM");
    for key in ["missing", "unexpected", "mismatched", "error_msgs"] {
        assert_eq!(dir[key].as_array().unwrap().len(), 0, "{key}: {dir}");
    }
    assert_eq!(dir["logits_shape"], serde_json::json!([2, 14, 10000]));
    assert_eq!(report["ok"], true, "{report}");
    assert!(dir["max_abs_diff"].as_f64().unwrap() <= 1e-4, "{dir}");
    // The report is of the shipped weights: a new model needs a new report
    // (scripts/make_poetry_parity_report.sh).
    let weights = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../roformer-builtin/assets/poetry-model/model.safetensors"),
    )
    .unwrap();
    assert_eq!(
        report["model_crc32"].as_u64(),
        Some(u64::from(crc32fast::hash(&weights))),
        "the report was made for other weights"
    );
}

/// `roformer fill-mask ... | head`: when the reader has gone before the output is written, the
/// command ends quietly and successfully (it used to print "error: Broken pipe" and fail).
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(["fill-mask", "--top-k", "50", "床前明月[MASK]，疑是地上霜。"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the model has loaded: every write gets EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("error"), "{err}");
}
