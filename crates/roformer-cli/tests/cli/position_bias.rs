//! `train mlm --config` with ALiBi and T5 relative positions end to end: the loss falls, the
//! checkpoint holds what the type needs, and `fill-mask` runs on it.

use serde_json::Value;

use crate::common::roformer_ok;
use crate::train::{tiny_config, tiny_run};

/// The step losses of a `--json` run's stdout.
fn step_losses(stdout: &[u8]) -> Vec<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "step")
        .filter_map(|v| v["loss"].as_f64())
        .collect()
}

/// 80 steps of a tiny model (hidden 64, 2 layers, batch 8 of 64 tokens, lr 2e-3): the mean loss
/// of the last 10 steps is at least 1 nat below that of the first 5 (from about ln(vocab)).
fn trains(position: &str) {
    let t = tiny_run(&format!("bias-{position}"));
    let config = tiny_config(&t.dir, position);
    let out = t.dir.join("run");
    let args = t
        .mlm(&out, "80")
        .set("--config", config.to_str().unwrap())
        .set("--validation", "0");
    let run = roformer_ok(&args.strs());
    let losses = step_losses(&run.stdout);
    assert_eq!(losses.len(), 80, "{position}");
    let first = losses[..5].iter().sum::<f64>() / 5.0;
    let last = losses[70..].iter().sum::<f64>() / 10.0;
    assert!(
        last < first - 1.0,
        "{position}: the loss went from {first} to {last}"
    );
    let checkpoint = out.join("checkpoint");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(saved["position_embedding_type"], position);
    // The safetensors header: its length as a little-endian u64, then the JSON of the tensors.
    let weights = std::fs::read(checkpoint.join("model.safetensors")).unwrap();
    let len = u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&weights[8..8 + len]).unwrap();
    let table = &header["roformer.encoder.relative_attention_bias.weight"]["shape"];
    match position {
        "t5_relative" => assert_eq!(table, &serde_json::json!([32, 4])),
        _ => assert!(table.is_null(), "{position}: {table}"),
    }
    let filled = roformer_ok(&[
        "fill-mask",
        "--model",
        checkpoint.to_str().unwrap(),
        "--json",
        "床前明月[MASK]",
    ]);
    let v: Value = serde_json::from_slice(&filled.stdout).unwrap();
    assert_eq!(v["masks"][0]["predictions"].as_array().unwrap().len(), 5);
}

#[test]
fn train_mlm_with_alibi_positions_learns() {
    trains("alibi");
}

#[test]
fn train_mlm_with_t5_relative_positions_learns() {
    trains("t5_relative");
}
