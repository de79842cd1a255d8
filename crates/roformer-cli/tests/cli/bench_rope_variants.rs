//! `roformer bench rope --rotations`: the axial 2D and YaRN cases run (which includes the
//! benchmark's own check that our rotation agrees with candle-nn given the same cos/sin) and
//! report records comparable with 1D RoPE on the same shape. No timing is asserted.

use serde_json::Value;

use crate::common::{roformer, roformer_ok};

#[test]
fn axial2d_and_yarn_run_beside_rope1d_with_the_same_bytes() {
    let out = roformer_ok(&[
        "bench",
        "rope",
        "--shapes",
        "1x2x64x16",
        "--rotations",
        "rope1d,axial2d,yarn",
        "--seconds",
        "0",
        "--min-rounds",
        "1",
        "--json",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 3 rotations x 2 dtypes x 2 layouts x 5 implementations.
    assert_eq!(records.len(), 60, "{text}");
    let bytes_of = |rotation: &str| -> Vec<u64> {
        records
            .iter()
            .filter(|r| r["rotation"] == rotation)
            .map(|r| r["bytes"].as_u64().unwrap())
            .collect()
    };
    let reference = bytes_of("rope1d");
    assert_eq!(reference.len(), 20);
    assert_eq!(bytes_of("axial2d"), reference);
    assert_eq!(bytes_of("yarn"), reference);
}

#[test]
fn unknown_rotation_is_an_error() {
    let out = roformer(&["bench", "rope", "--rotations", "spiral"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("spiral"));
}

#[test]
fn axial2d_needs_head_dim_divisible_by_four() {
    let out = roformer(&[
        "bench",
        "rope",
        "--shapes",
        "1x1x4x6",
        "--rotations",
        "axial2d",
        "--seconds",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty());
}
