//! `roformer llama generate`, `roformer llama logits` and `roformer bench llama` on the tiny
//! GGUF model of crates/llama/tests/fixtures/tiny-llama (written by gguf-py, with
//! transformers' outputs beside it, from scripts/make_tiny_llama.py), and their errors.

use std::path::Path;

use candle_core::Device;

use crate::common::{assert_each_fails, roformer, roformer_ok};
use test_support::Scratch;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../llama/tests/fixtures/tiny-llama")
        .join(name)
        .display()
        .to_string()
}

fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-cli-llama", name)
}

#[test]
fn generate_continues_greedily_as_transformers_does() {
    let e = expected();
    let text = e["tokenize"][0]["text"].as_str().unwrap();
    let gguf = fixture("tiny.gguf");
    let out = roformer_ok(&[
        "llama",
        "generate",
        "--gguf",
        &gguf,
        "--dequantize",
        "--max-new-tokens",
        "8",
        "--json",
        text,
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["prompt_ids"], e["tokenize"][0]["ids"]);
    // transformers' argmax loop does not stop at the end-of-sequence token; the tiny model's
    // eight greedy tokens contain none.
    assert_eq!(json["tokens"], e["greedy"]["new_ids"]);
    assert_eq!(json["stopped_at_eos"], false);
    assert!(json["decode_tokens_per_second"].as_f64().unwrap() > 0.0);

    // Streaming text: the same continuation, and the timings on stderr.
    let out = roformer_ok(&[
        "llama",
        "generate",
        "--gguf",
        &gguf,
        "--max-new-tokens",
        "4",
        text,
    ]);
    assert!(!out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("prefill: 6 tokens") && stderr.contains("tokens/s"),
        "{stderr}"
    );

    // --chat wraps the prompt in the model's ChatML turn.
    let out = roformer_ok(&[
        "llama",
        "generate",
        "--gguf",
        &gguf,
        "--chat",
        "--max-new-tokens",
        "1",
        "--json",
        "hi",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chat_ids = &e["tokenize"][1]["ids"];
    let ids = json["prompt_ids"].as_array().unwrap();
    // "<|im_start|>user\nhi<|im_end|>\n" then "<|im_start|>assistant\n".
    assert_eq!(&ids[..6], chat_ids.as_array().unwrap().as_slice());
    assert_eq!(ids[6], 1);
}

#[test]
fn logits_match_transformers_in_both_layouts() {
    let e = expected();
    let dir = scratch("logits");
    let input = dir.join("ids.json");
    let ids: Vec<serde_json::Value> = e["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ids"].clone())
        .take(1)
        .collect();
    std::fs::write(&input, serde_json::json!({ "input_ids": ids }).to_string()).unwrap();
    let want: Vec<Vec<f32>> = serde_json::from_value(e["logits"][0]["logits"].clone()).unwrap();
    for layout in ["interleaved", "half"] {
        let output = dir.join(format!("{layout}.safetensors"));
        roformer_ok(&[
            "llama",
            "logits",
            "--gguf",
            &fixture("tiny.gguf"),
            "--dequantize",
            "--layout",
            layout,
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ]);
        let out = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
        let got: Vec<Vec<f32>> = out["logits"].squeeze(0).unwrap().to_vec2().unwrap();
        let diff = got
            .iter()
            .flatten()
            .zip(want.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // As in the llama crate's test: the same f32 weights, sums in another order.
        assert!(diff < 1e-4, "{layout}: {diff}");
    }
}

#[test]
fn bench_llama_reports_both_phases() {
    let out = roformer_ok(&[
        "bench",
        "llama",
        "--gguf",
        &fixture("tiny.gguf"),
        "--prompt-tokens",
        "8",
        "--new-tokens",
        "4",
        "--repeats",
        "1",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "prefill_tok_s",
        "decode_tok_s",
        "rope_share_prefill",
        "rope_share_decode",
    ] {
        let v = json[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {json}"));
        assert!(v > 0.0, "{key} = {v}");
    }
    assert!(json["rope_share_decode"].as_f64().unwrap() < 1.0);
    assert_eq!(json["decode_tokens"], 4);
}

#[test]
fn bad_llama_inputs_are_clear_errors() {
    let dir = scratch("errors");
    let garbage = dir.join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
    let ragged = dir.join("ragged.json");
    std::fs::write(&ragged, r#"{"input_ids": [[1, 2], [3]]}"#).unwrap();
    let out_of_range = dir.join("range.json");
    std::fs::write(&out_of_range, r#"{"input_ids": [[1, 64]]}"#).unwrap();
    let out = dir.join("out.safetensors");
    let (gguf, garbage) = (fixture("tiny.gguf"), garbage.to_str().unwrap());
    let (out, ragged, out_of_range) = (
        out.to_str().unwrap(),
        ragged.to_str().unwrap(),
        out_of_range.to_str().unwrap(),
    );
    assert_each_fails(
        &["llama", "generate"],
        &[
            &["--gguf", "/nonexistent.gguf", "hello"],
            &["--gguf", garbage, "hello"],
            &["--gguf", &gguf, "--temperature", "-1", "hello"],
            &["--gguf", &gguf, "--max-new-tokens", "1000", "hello"], // context 128
            &["--gguf", &gguf, ""],
        ],
    );
    assert_each_fails(
        &["llama", "logits"],
        &[
            &["--gguf", &gguf, "--input", ragged, "--output", out],
            &["--gguf", &gguf, "--input", out_of_range, "--output", out],
            &["--gguf", garbage, "--input", ragged, "--output", out],
        ],
    );
    // Tests run in the crate's directory, where the default model path does not exist.
    let missing = roformer(&["llama", "generate", "hello"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("run scripts/fetch_smollm2.sh"));
}
