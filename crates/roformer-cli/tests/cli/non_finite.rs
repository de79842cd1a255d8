//! A checkpoint whose weights are finite but huge (3e38 in a dense weight: loading accepts it)
//! overflows f32 on every input. No command may pass the NaNs off as results: fill-mask, embed
//! and eval fail naming where, forward warns (its file keeps the raw values), and no JSON says
//! `null` for a number.

use candle_core::{Device, Tensor};
use std::collections::HashMap;
use test_support::Scratch;

use crate::common::roformer;
use crate::fill_mask::{fails, model_dir, scratch};

/// The `mlm_gelu` model directory `name` with every weight of layer 1's output dense set to
/// 3e38.
fn huge_model(name: &str) -> Scratch {
    let dir = model_dir("mlm_gelu", name);
    let path = dir.join("model.safetensors");
    let mut tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let key = "roformer.encoder.layer.1.output.dense.weight";
    let shape = tensors[key].shape().clone();
    tensors.insert(
        key.to_owned(),
        Tensor::full(3e38f32, shape, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&tensors, &path).unwrap();
    dir
}

#[test]
fn fill_mask_refuses_non_finite_logits() {
    let model = huge_model("nonfinite-fill");
    let out = roformer(&[
        "fill-mask",
        "--model",
        model.to_str().unwrap(),
        "--json",
        "今天[MASK]气",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(!stdout.contains("null"), "{stdout}");
    assert!(
        stderr.contains("not finite") && stderr.contains("token 2"),
        "{stderr}"
    );
}

#[test]
fn embed_refuses_non_finite_vectors_naming_the_line() {
    let model = huge_model("nonfinite-embed");
    let dir = scratch("nonfinite-embed-io");
    let (input, output) = (dir.join("t.txt"), dir.join("v.jsonl"));
    std::fs::write(&input, "今天\n你好\n").unwrap();
    let stderr = fails(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(
        stderr.contains("line 1") && stderr.contains("not finite") && stderr.contains("token"),
        "{stderr}"
    );
    assert!(!output.exists(), "wrote an output");
}

#[test]
fn forward_warns_and_keeps_the_raw_values() {
    let model = huge_model("nonfinite-forward");
    let dir = scratch("nonfinite-forward-io");
    let (input, output) = (dir.join("in.json"), dir.join("out.safetensors"));
    std::fs::write(&input, r#"{"input_ids": [[7, 10, 11, 8]]}"#).unwrap();
    let out = crate::common::roformer_ok(&[
        "forward",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: last_hidden_state is not finite")
            && stderr.contains("last_hidden_state[0, 0, 0]")
            && stderr.contains("warning: logits is not finite"),
        "{stderr}"
    );
    let got = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    let values: Vec<f32> = got["logits"].flatten_all().unwrap().to_vec1().unwrap();
    assert!(values.iter().all(|v| v.is_nan()));
}

#[test]
fn eval_refuses_non_finite_logits() {
    let model = huge_model("nonfinite-eval");
    let dir = scratch("nonfinite-eval-io");
    let corpus = dir.join("corpus.txt");
    let docs: Vec<String> = (0..40)
        .map(|i| {
            let words = ["今天", "天气", "非常", "好", "我们", "在", "北京", "学习"];
            (0..6)
                .map(|j| words[(i * 7 + j * 3) % words.len()])
                .collect()
        })
        .collect();
    std::fs::write(&corpus, docs.join("\n") + "\n").unwrap();
    let out = roformer(&[
        "eval",
        "mlm",
        "--model",
        model.to_str().unwrap(),
        "--corpus",
        corpus.to_str().unwrap(),
        "--validation",
        "0.5",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("held-out document") && stderr.contains("not finite"),
        "{stderr}"
    );
}
