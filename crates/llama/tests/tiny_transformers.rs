//! A tiny LLaMA written by gguf-py (`scripts/make_tiny_llama.py`: Q8_0 weights, q/k rows
//! permuted as llama.cpp's converter does, a byte-level BPE vocabulary) against what Hugging
//! Face transformers computes after loading the same file: tokens, logits, greedy steps. It runs
//! on every checkout (the files are committed, 104 KB), unlike the SmolLM2 tests.

mod common;

use candle_core::{Device, Tensor};
use common::logits_all;
use llama::generate::{generate, Sampling};
use llama::gguf::GgufFile;
use llama::{Llama, LlamaConfig, LoadOptions, Logits, Tokenizer};
use rotary::Layout;
use serde::Deserialize;
use test_support::max_abs_diff;

#[derive(Deserialize)]
struct Expected {
    tokenize: Vec<Tokenized>,
    logits: Vec<LogitsCase>,
    greedy: Greedy,
}

#[derive(Deserialize)]
struct Tokenized {
    text: String,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct LogitsCase {
    ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Greedy {
    prompt_ids: Vec<u32>,
    new_ids: Vec<u32>,
    step_logits: Vec<Vec<f32>>,
}

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-llama");

fn expected() -> Expected {
    serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/expected.json")).unwrap()).unwrap()
}

fn file() -> GgufFile {
    GgufFile::open(format!("{DIR}/tiny.gguf")).unwrap()
}

fn model(layout: Layout, dequantize: bool) -> Llama {
    let options = LoadOptions {
        layout,
        dequantize,
        ..LoadOptions::default()
    };
    Llama::load(&file(), &options).unwrap()
}

#[test]
fn reads_gguf_pys_file() {
    let file = file();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!(
        (config.layers, config.hidden, config.heads, config.kv_heads),
        (2, 64, 4, 2)
    );
    assert_eq!(
        (config.head_dim, config.intermediate, config.vocab_size),
        (16, 128, 64)
    );
    assert_eq!(config.rope_base, 10_000.0);
    assert!(
        !file.tensors().contains_key("output.weight"),
        "the head is tied"
    );
}

#[test]
fn tokenizes_as_transformers() {
    let tokenizer = Tokenizer::from_gguf(&file()).unwrap();
    for case in expected().tokenize {
        assert_eq!(
            tokenizer.encode(&case.text).unwrap(),
            case.ids,
            "{:?}",
            case.text
        );
        assert_eq!(tokenizer.decode(&case.ids).unwrap(), case.text);
    }
}

#[test]
fn logits_match_transformers_in_both_layouts() {
    for layout in [Layout::Interleaved, Layout::Half] {
        let model = model(layout, true);
        for case in expected().logits {
            let ours = logits_all(&model, &case.ids);
            // Logits up to ~10 from the same dequantized f32 weights; only the order of f32
            // sums differs (transformers matched a float64 reference within 4.4e-6).
            let diff = max_abs_diff(&ours, &case.logits);
            assert!(diff < 1e-4, "{layout:?} {:?}: {diff}", case.ids);
        }
    }
}

#[test]
fn greedy_steps_match_transformers() {
    let e = expected().greedy;
    let model = model(Layout::Interleaved, true);
    let n = e.new_ids.len();
    let out = generate(&model, &e.prompt_ids, n, Sampling::GREEDY, None, |_| Ok(())).unwrap();
    assert_eq!(out.tokens, e.new_ids);
    // The logits each step chose from, through the cache one token at a time.
    let mut cache = model.cache(1, 4);
    let mut steps = Vec::new();
    let prompt = Tensor::new(e.prompt_ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut last = model.forward(&prompt, &mut cache, Logits::Last).unwrap();
    for &token in &e.new_ids {
        steps.push(last.squeeze(0).unwrap().to_vec1::<f32>().unwrap());
        let x = Tensor::new(&[[token]], &Device::Cpu).unwrap();
        last = model.forward(&x, &mut cache, Logits::Last).unwrap();
    }
    let diff = max_abs_diff(&steps, &e.step_logits);
    assert!(diff < 1e-4, "step logits: {diff}");
}

#[test]
fn the_q8_0_kernels_stay_near_transformers() {
    let model = model(Layout::Interleaved, false);
    for case in expected().logits {
        let ours = logits_all(&model, &case.ids);
        // The activations are rounded to 8-bit blocks before each product; with rows of only
        // 64 to 128 values the errors average out little: measured 0.23 on logits up to 7.3.
        // A wrong block layout, row order or type would be off by the logits' own size.
        let diff = max_abs_diff(&ours, &case.logits);
        assert!(diff < 0.5, "{:?}: {diff}", case.ids);
    }
}
