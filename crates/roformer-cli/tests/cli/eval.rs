//! `roformer eval mlm` with the built-in model on tiny corpora written here: the neighbour
//! baseline (`--baseline-k`) and the famous couplets (`--famous`, `--famous-file`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::fill_mask::{fails, ok, scratch};

/// Characters without a traditional form (no simplified copy differs).
const CYCLE: &str = "春夏秋冬山水花草木石天地日星月雨江河湖海";

/// A corpus of 180 distinct lines, each a run of the cycle [`CYCLE`] (from any start, 8 to 16
/// characters): every character has one successor and one predecessor, so a bigram model
/// knows a masked character from either neighbour.
fn cycle_corpus(dir: &Path) -> PathBuf {
    let chars: Vec<char> = CYCLE.chars().collect();
    let mut lines = Vec::new();
    for start in 0..chars.len() {
        for len in 8..17 {
            let line: String = (0..len).map(|i| chars[(start + i) % chars.len()]).collect();
            lines.push(line);
        }
    }
    let path = dir.join("corpus.txt");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn eval_json(args: &[&str]) -> Value {
    let mut all = vec!["eval", "mlm", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(&all)).unwrap()
}

fn rate(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {row}"))
}

#[test]
fn the_neighbour_baseline_reads_both_neighbours() {
    let dir = scratch("eval-neighbour");
    let corpus = cycle_corpus(&dir);
    let corpus = corpus.to_str().unwrap();
    let report = eval_json(&[
        "--corpus",
        corpus,
        "--validation",
        "0.5",
        "--baseline-k",
        "0.1",
    ]);
    assert_eq!(report["set"], "held-out");
    assert!(report["famous_file"].is_null());
    assert_eq!(report["baseline_k"], 0.1);
    let all = &report["all"];
    assert!(all["masked"].as_u64().unwrap() > 50, "{report}");
    // Only masks with both neighbours masked fall back to the unigram (1 in 20 right).
    let (neighbour, unigram) = (rate(all, "neighbour_top1"), rate(all, "baseline_top1"));
    assert!(neighbour > 0.9, "{report}");
    assert!(unigram < 0.3, "{report}");
    assert!(rate(all, "neighbour_top5") >= neighbour);
    let ratio = rate(all, "model_over_neighbour_top1");
    assert!((ratio - rate(all, "model_top1") / neighbour).abs() < 1e-12);
    let ratio5 = rate(all, "model_over_neighbour_top5");
    assert!((ratio5 - rate(all, "model_top5") / rate(all, "neighbour_top5")).abs() < 1e-12);

    let table = ok(&["eval", "mlm", "--corpus", corpus, "--validation", "0.5"]);
    assert!(
        table.contains("neighbour@1") && table.contains("model/nb@5"),
        "{table}"
    );
    assert!(table.contains("add-0.1 smoothing"), "{table}");

    for k in ["0", "-1", "nan", "inf"] {
        let flag = format!("--baseline-k={k}");
        let stderr = fails(&["eval", "mlm", "--corpus", corpus, &flag]);
        assert!(stderr.contains("--baseline-k"), "{k}: {stderr}");
    }
}

/// `--against-f32` runs the same batches in f32 beside bf16 and reports their agreement at the
/// masks. The share is at least 0.9 on any machine: bf16 logits of the built-in model differ
/// from f32's by a few hundredths, which reorders only near-ties (and on a CPU without bf16
/// both runs are f32: share 1, difference 0).
#[test]
fn against_f32_reports_the_agreement_of_bf16_with_f32() {
    let dir = scratch("eval-against-f32");
    let corpus = cycle_corpus(&dir);
    let corpus = corpus.to_str().unwrap();
    let base = ["--corpus", corpus, "--validation", "0.5"];
    let plain = eval_json(&base);
    assert!(plain["against_f32"].is_null(), "{plain}");
    assert_eq!(plain["precision"], "f32");

    let mut args = base.to_vec();
    args.extend(["--precision", "bf16", "--against-f32"]);
    let report = eval_json(&args);
    assert_eq!(report["precision"], "bf16");
    let a = &report["against_f32"];
    let masks = a["masks"].as_u64().unwrap();
    assert_eq!(masks, report["all"]["masked"].as_u64().unwrap(), "{report}");
    let same = a["same_top1"].as_u64().unwrap();
    assert!(same <= masks);
    assert!((rate(a, "same_top1_share") - same as f64 / masks as f64).abs() < 1e-12);
    assert!(rate(a, "same_top1_share") >= 0.9, "{report}");
    let diff = rate(a, "max_abs_logit_diff");
    assert!(diff.is_finite() && diff >= 0.0, "{report}");
    // The masks and the f32 baselines do not depend on the precision.
    assert_eq!(report["all"]["masked"], plain["all"]["masked"]);
    assert_eq!(
        report["all"]["neighbour_top1"],
        plain["all"]["neighbour_top1"]
    );

    let mut table_args = vec!["eval", "mlm"];
    table_args.extend(&args);
    let table = ok(&table_args);
    assert!(
        table.contains("bf16 against f32: the same top-1 at"),
        "{table}"
    );

    let stderr = fails(&["eval", "mlm", "--corpus", corpus, "--against-f32"]);
    assert!(
        stderr.contains("--against-f32") && stderr.contains("--precision bf16"),
        "{stderr}"
    );
}

/// Three poems in the layout of `tangshisanbaishou.json`, with a note to strip: 6 couplets.
const FAMOUS: &str = r#"{"title": "唐詩三百首", "content": [
  {"type": "五言絕句", "content": [
    {"chapter": "登鸛雀樓", "subchapter": null, "author": "王之渙",
     "paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]},
    {"chapter": "相思", "subchapter": null, "author": "王維",
     "paragraphs": ["紅豆生南國，春來發幾枝。(春來 一作：秋來)", "願君多采擷，此物最相思。"]}]},
  {"type": "五言古詩", "content": [
    {"chapter": "靜夜思", "subchapter": null, "author": "李白",
     "paragraphs": ["床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。"]}]}]}"#;

#[test]
fn famous_masks_one_character_per_couplet_in_both_scripts() {
    let dir = scratch("eval-famous");
    let corpus = cycle_corpus(&dir);
    let famous = dir.join("famous.json");
    std::fs::write(&famous, FAMOUS).unwrap();
    let args = [
        "--corpus",
        corpus.to_str().unwrap(),
        "--validation",
        "0.5",
        "--famous",
        "--famous-file",
        famous.to_str().unwrap(),
        "--seed",
        "3",
    ];
    let report = eval_json(&args);
    assert_eq!(report["set"], "famous");
    assert_eq!(report["famous_file"], famous.to_str().unwrap());
    for (row, n) in [("original", 6), ("simplified_copies", 6), ("all", 12)] {
        let r = &report[row];
        assert_eq!(r["documents"], n, "{row}: {report}");
        assert_eq!(r["masked"], n, "{row}: one mask per couplet: {report}");
        for key in [
            "model_top1",
            "model_top5",
            "baseline_top1",
            "baseline_top5",
            "neighbour_top1",
            "neighbour_top5",
        ] {
            assert!((0.0..=1.0).contains(&rate(r, key)), "{row}.{key}: {report}");
        }
        assert!(rate(r, "model_top1") <= rate(r, "model_top5"));
    }
    // Seeded: the same seed masks the same characters.
    assert_eq!(eval_json(&args), report);

    let mut table_args = vec!["eval", "mlm"];
    table_args.extend_from_slice(&args);
    let table = ok(&table_args);
    assert!(
        table.contains("couplets of") && table.contains("one character masked"),
        "{table}"
    );
}

#[test]
fn bad_famous_files_are_clear_errors() {
    let dir = scratch("eval-famous-bad");
    let corpus = cycle_corpus(&dir);
    let corpus = corpus.to_str().unwrap();
    let run = |file: &str| {
        fails(&[
            "eval",
            "mlm",
            "--corpus",
            corpus,
            "--famous",
            "--famous-file",
            file,
        ])
    };
    let missing = dir.join("missing.json");
    let stderr = run(missing.to_str().unwrap());
    assert!(
        stderr.contains("cannot read") && stderr.contains("missing.json"),
        "{stderr}"
    );
    for (name, text, expected) in [
        (
            "malformed.json",
            "{\"content\": [",
            "not the Three Hundred Tang Poems JSON",
        ),
        (
            "wrong.json",
            r#"{"content": [{"poems": []}]}"#,
            "missing field `content`",
        ),
        ("empty.json", r#"{"title": "x", "content": []}"#, "no poem"),
        (
            "blank.json",
            r#"{"content": [{"content": [{"chapter": "空", "author": "無名", "paragraphs": []}]}]}"#,
            "空 (無名), has no text",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let stderr = run(path.to_str().unwrap());
        assert!(
            stderr.contains(expected) && stderr.contains(name),
            "{name}: {stderr}"
        );
    }
    // The default file is looked for relative to the working directory.
    let stderr = fails(&["eval", "mlm", "--corpus", corpus, "--famous"]);
    assert!(stderr.contains("tangshisanbaishou.json"), "{stderr}");
}
