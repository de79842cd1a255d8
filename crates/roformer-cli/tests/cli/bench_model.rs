//! `roformer bench model` on the tiny config: the records it prints and its option errors (no
//! timing asserts).

use crate::common::{roformer, roformer_ok};

#[test]
fn json_records_for_each_config_and_shape() {
    let out = roformer_ok(&[
        "bench",
        "model",
        "--json",
        "--configs",
        "tiny",
        "--shapes",
        "1x8,2x16",
        "--seconds",
        "0",
        "--min-reps",
        "2",
    ]);
    let records: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    for (r, (batch, seq)) in records.iter().zip([(1u64, 8u64), (2, 16)]) {
        assert_eq!(r["impl"], "roformer-rs");
        assert_eq!(r["config"], "tiny");
        assert_eq!(r["batch"].as_u64(), Some(batch));
        assert_eq!(r["seq"].as_u64(), Some(seq));
        assert!(r["reps"].as_u64().unwrap() >= 2);
        // The tiny config: embeddings 97x32 + 2x32 + norm, two layers of 4 (32x32 + 32),
        // 2 norms, 32x64 + 64 and 64x32 + 32.
        let layer = 4 * (32 * 32 + 32) + 2 * 64 + (32 * 64 + 64) + (64 * 32 + 32);
        assert_eq!(
            r["params"].as_u64(),
            Some((97 * 32 + 2 * 32 + 64 + 2 * layer) as u64)
        );
        let seconds = r["seconds"].as_f64().unwrap();
        let tokens_per_s = r["tokens_per_s"].as_f64().unwrap();
        assert!(seconds > 0.0);
        let expected = (batch * seq) as f64 / seconds;
        assert!((tokens_per_s - expected).abs() <= 1e-9 * expected);
    }
}

#[test]
fn table_output_has_a_row_per_case() {
    let out = roformer(&[
        "bench",
        "model",
        "--configs",
        "tiny",
        "--shapes",
        "1x4",
        "--seconds",
        "0",
        "--min-reps",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("tiny")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    assert!(
        rows[0]
            .split_whitespace()
            .take(4)
            .eq(["tiny", "0.0", "1", "4"]),
        "{text}"
    );
}

#[test]
fn bad_options_are_errors() {
    for args in [
        &["--shapes", "8"][..],
        &["--shapes", "0x4"],
        &["--configs", "huge"],
        &["--seconds", "-1"],
        &["--min-reps", "0"],
    ] {
        let mut all = vec!["bench", "model", "--configs", "tiny"];
        all.extend_from_slice(args);
        let out = roformer(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
