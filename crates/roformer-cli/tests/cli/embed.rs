//! `roformer embed` against `roformer forward` run on each text alone, its output formats and
//! its errors (model directory as in the fill-mask tests).

use std::path::Path;

use candle_core::Tensor;
use test_support::max_abs_diff;

use crate::fill_mask::{fails, forward, model_dir, ok, scratch, token_ids};

/// Texts of different lengths in an order that batching by length reorders.
const TEXTS: [&str; 7] = [
    "今天天气非常好，我们在北京学习自然语言处理",
    "你好",
    "hello world",
    "人工智能",
    "我们在北京",
    "今天",
    "深度学习模型发布了一件T恤和电话",
];

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn texts() -> Vec<String> {
    TEXTS.iter().map(|t| t.to_string()).collect()
}

fn embed(model: &Path, input: &Path, output: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

fn read_json_lines(path: &Path) -> Vec<Vec<f32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The pooled last hidden state of `text` run alone (no padding) by `roformer forward`:
/// `[CLS]`'s row, or the mean of all rows.
fn reference(model: &Path, text: &str, mean: bool, dir: &Path) -> Vec<f32> {
    reference_of_ids(model, &token_ids(model, text), mean, dir)
}

/// As [`reference`], for given ids.
fn reference_of_ids(model: &Path, ids: &[i64], mean: bool, dir: &Path) -> Vec<f32> {
    let h = forward(model, ids, dir)["last_hidden_state"]
        .get(0)
        .unwrap()
        .clone(); // [seq, hidden]
    let pooled: Tensor = if mean {
        h.mean(0).unwrap()
    } else {
        h.get(0).unwrap()
    };
    assert_eq!(pooled.dims().len(), 1);
    pooled.to_vec1().unwrap()
}

/// Batched (size 3, padded, reordered by length) vectors equal the unbatched forward's, in
/// input order. Tolerance 1e-5: padding changes the matrix shapes and so the summation order
/// of the f32 products (values are O(1)); a masking or ordering mistake moves them by O(1).
#[test]
fn vectors_equal_pooled_forward_states_in_input_order() {
    let model = model_dir("mlm_gelu", "embed-parity");
    let dir = scratch("embed-parity-io");
    let input = dir.join("texts.txt");
    write_lines(&input, &texts());
    for (pooling, mean) in [("mean", true), ("cls", false)] {
        let output = dir.join(format!("{pooling}.jsonl"));
        embed(
            &model,
            &input,
            &output,
            &["--pooling", pooling, "--batch-size", "3"],
        );
        let got = read_json_lines(&output);
        assert_eq!(got.len(), TEXTS.len());
        for (text, vector) in TEXTS.iter().zip(&got) {
            assert_eq!(vector.len(), 32);
            let want = reference(&model, text, mean, &dir);
            let diff = max_abs_diff(vector, &want);
            assert!(diff <= 1e-5, "{pooling} {text}: {diff}");
        }
    }
}

/// Parses a version 1.0 .npy file written by `embed`: returns the header dict and the f32
/// values; checks magic, version and the 64-byte alignment of the data.
fn read_npy(path: &Path) -> (String, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    assert_eq!(&bytes[6..8], [1, 0]);
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let data_start = 10 + header_len;
    assert_eq!(data_start % 64, 0, "data not 64-byte aligned");
    let header = std::str::from_utf8(&bytes[10..data_start]).unwrap();
    assert!(header.ends_with('\n'));
    let values = bytes[data_start..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!((bytes.len() - data_start) % 4, 0);
    (header.trim_end().to_string(), values)
}

#[test]
fn npy_output_has_the_shape_and_the_values_of_json_lines() {
    let model = model_dir("mlm_gelu", "embed-npy");
    let dir = scratch("embed-npy-io");
    let input = dir.join("texts.txt");
    write_lines(&input, &texts());
    let (npy, jsonl) = (dir.join("v.npy"), dir.join("v.jsonl"));
    embed(&model, &input, &npy, &["--batch-size", "2"]);
    embed(&model, &input, &jsonl, &["--batch-size", "2"]);
    let (header, values) = read_npy(&npy);
    assert!(header.starts_with('{') && header.ends_with('}'), "{header}");
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    assert!(header.contains("'shape': (7, 32)"), "{header}");
    let rows = read_json_lines(&jsonl);
    let flat: Vec<f32> = rows.into_iter().flatten().collect();
    // Same computation, written twice: bit-identical (JSON floats round-trip f32).
    assert_eq!(values, flat);
}

#[test]
fn json_lines_input_reads_the_text_field() {
    let model = model_dir("mlm_gelu", "embed-jsonl-in");
    let dir = scratch("embed-jsonl-in-io");
    let (plain, json) = (dir.join("texts.txt"), dir.join("texts.jsonl"));
    write_lines(&plain, &texts());
    let lines: Vec<String> = TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"id": i, "text": t}).to_string())
        .collect();
    write_lines(&json, &lines);
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    embed(&model, &plain, &a, &[]);
    embed(&model, &json, &b, &[]);
    assert_eq!(read_json_lines(&a), read_json_lines(&b));
}

/// A text cut by --max-length gets the vector of its first tokens.
#[test]
fn max_length_truncates_texts() {
    let model = model_dir("mlm_gelu", "embed-maxlen");
    let dir = scratch("embed-maxlen-io");
    let (input, output) = (dir.join("t.txt"), dir.join("v.jsonl"));
    write_lines(&input, &["今天天气非常好".to_string()]);
    embed(
        &model,
        &input,
        &output,
        &["--max-length", "4", "--pooling", "cls"],
    );
    let got = read_json_lines(&output);
    // [CLS], the first two tokens, [SEP].
    let full = token_ids(&model, "今天天气非常好");
    assert!(full.len() > 4);
    let cut = [full[0], full[1], full[2], full[full.len() - 1]];
    let want = reference_of_ids(&model, &cut, false, &dir);
    assert!(max_abs_diff(&got[0], &want) <= 1e-5);
}

#[test]
fn bad_inputs_are_errors() {
    let model = model_dir("mlm_gelu", "embed-bad");
    let dir = scratch("embed-bad-io");
    let m = model.to_str().unwrap();
    let run = |name: &str, content: &str, output: &str| {
        let input = dir.join(name);
        std::fs::write(&input, content).unwrap();
        let output = dir.join(output);
        let stderr = fails(&[
            "embed",
            "--model",
            m,
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ]);
        assert!(!output.exists(), "{name}: wrote an output");
        stderr
    };
    let stderr = run("empty-line.txt", "今天\n\n你好\n", "o.npy");
    assert!(
        stderr.contains("line 2") && stderr.contains("empty"),
        "{stderr}"
    );
    let stderr = run("blank.txt", "今天\n   \n", "o.npy");
    assert!(stderr.contains("line 2"), "{stderr}");
    let stderr = run("nothing.txt", "", "o.npy");
    assert!(stderr.contains("no text"), "{stderr}");
    let stderr = run(
        "bad.jsonl",
        "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n",
        "o.npy",
    );
    assert!(
        stderr.contains("line 2") && stderr.contains("\"text\""),
        "{stderr}"
    );
    let stderr = run("empty-text.jsonl", "{\"text\": \"\"}\n", "o.npy");
    assert!(
        stderr.contains("line 1") && stderr.contains("empty"),
        "{stderr}"
    );
    let stderr = run("ok.txt", "今天\n", "o.csv");
    assert!(stderr.contains(".npy"), "{stderr}");
}

/// A text far longer than the checkpoint's max_position_embeddings (64; ~1750 tokens, whose
/// attention once ran uncapped) is cut to 64 tokens by default, `[CLS]` ... `[SEP]` kept, and
/// the command says which line, from how many tokens, on stderr and in `--json`;
/// `--max-length 0` keeps every token and a larger `--max-length` is taken as given.
#[test]
fn long_texts_are_cut_to_max_position_embeddings_and_reported() {
    let model = model_dir("mlm_gelu", "embed-long");
    let dir = scratch("embed-long-io");
    let (input, output) = (dir.join("t.txt"), dir.join("v.jsonl"));
    let long = "我们在北京学习".repeat(500);
    write_lines(&input, &["今天".to_string(), long.clone()]);
    let full = token_ids(&model, &long);
    assert!(full.len() > 1000);
    let m = model.to_str().unwrap();
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "embed",
            "--model",
            m,
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--json",
            "--pooling",
            "cls",
        ];
        a.extend_from_slice(extra);
        a
    };
    let run = |extra: &[&'static str]| {
        let out = crate::common::roformer_ok(&args(extra));
        let summary: serde_json::Value =
            serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
        (summary, String::from_utf8(out.stderr).unwrap())
    };

    let (summary, stderr) = run(&[]);
    assert_eq!(summary["max_length"], 64);
    assert_eq!(
        summary["truncated"],
        serde_json::json!([{"line": 2, "tokens": full.len(), "kept": 64}])
    );
    assert!(
        stderr.contains(&format!("line 2: {} tokens cut to 64", full.len()))
            && stderr.contains("max_position_embeddings"),
        "{stderr}"
    );
    let mut cut = full[..63].to_vec();
    cut.push(full[full.len() - 1]);
    let want = reference_of_ids(&model, &cut, false, &dir);
    assert!(max_abs_diff(&read_json_lines(&output)[1], &want) <= 1e-5);

    let (summary, stderr) = run(&["--max-length", "0"]);
    assert_eq!(summary["max_length"], 0);
    assert_eq!(summary["truncated"], serde_json::json!([]));
    assert!(!stderr.contains("cut"), "{stderr}");

    let (summary, _) = run(&["--max-length", "100"]);
    assert_eq!(summary["truncated"][0]["kept"], 100);

    let stderr = fails(&args(&["--max-length", "1"]));
    assert!(stderr.contains("[CLS]"), "{stderr}");
}

/// One 1 MB line without a space: one `[UNK]` (WordPiece gives up on words over 100 chars).
#[test]
fn a_megabyte_word_is_one_unknown_token() {
    let model = model_dir("mlm_gelu", "embed-mb");
    let dir = scratch("embed-mb-io");
    let (input, output) = (dir.join("t.txt"), dir.join("v.jsonl"));
    write_lines(&input, &["a".repeat(1 << 20)]);
    let stdout = embed(&model, &input, &output, &["--json"]);
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["truncated"], serde_json::json!([]));
    assert_eq!(read_json_lines(&output).len(), 1);
}
