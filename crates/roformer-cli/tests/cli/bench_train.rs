//! `roformer bench train` on the tiny config: the records it prints and its option errors (no
//! timing asserts).

use crate::common::{assert_each_fails, roformer_ok, table_rows};

/// Trainable scalars of the tiny config's `RoFormerForMaskedLM`: embeddings 97x32 + 2x32 +
/// norm, two layers of 4 (32x32 + 32), 2 norms, 32x64 + 64 and 64x32 + 32, the MLM transform
/// 32x32 + 32 with its norm and the 97 output biases (the decoder is the tied word embedding).
const TINY_PARAMS: u64 = {
    let layer = 4 * (32 * 32 + 32) + 2 * 64 + (32 * 64 + 64) + (64 * 32 + 32);
    97 * 32 + 2 * 32 + 64 + 2 * layer + (32 * 32 + 32) + 64 + 97
};

#[test]
fn bf16_records_its_precision_and_learns() {
    let out = roformer_ok(&[
        "bench",
        "train",
        "--json",
        "--config",
        "tiny",
        "--shapes",
        "2x16",
        "--seconds",
        "0",
        "--min-steps",
        "3",
        "--precision",
        "bf16",
    ]);
    let record: serde_json::Value =
        serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    // bf16 where the CPU has a native bf16 dot product, else the f32 it fell back to (and said).
    let said = String::from_utf8_lossy(&out.stderr).contains("running in f32");
    assert_eq!(
        record["precision"],
        if said { "f32" } else { "bf16" },
        "{record}"
    );
    assert!(record["last_loss"].as_f64().unwrap() < record["first_loss"].as_f64().unwrap());
}

#[test]
fn json_records_for_each_shape() {
    let out = roformer_ok(&[
        "bench",
        "train",
        "--json",
        "--config",
        "tiny",
        "--shapes",
        "2x16,1x8",
        "--seconds",
        "0",
        "--min-steps",
        "2",
    ]);
    let records: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    for (r, (batch, seq)) in records.iter().zip([(2u64, 16u64), (1, 8)]) {
        assert_eq!(r["impl"], "roformer-rs");
        assert_eq!(r["config"], "tiny");
        assert_eq!(r["batch"].as_u64(), Some(batch));
        assert_eq!(r["seq"].as_u64(), Some(seq));
        assert_eq!(r["params"].as_u64(), Some(TINY_PARAMS));
        assert_eq!(r["malloc_warm"], true);
        assert_eq!(r["precision"], "f32");
        let labelled = r["labelled"].as_u64().unwrap();
        assert!((1..=batch * seq).contains(&labelled), "{r}");
        assert!(r["steps"].as_u64().unwrap() >= 2);
        let step = r["step_s"].as_f64().unwrap();
        assert!(step > 0.0);
        assert!(r["p10_s"].as_f64().unwrap() <= step && step <= r["p90_s"].as_f64().unwrap());
        for phase in ["forward_s", "backward_s", "optimizer_s", "cpu_s"] {
            assert!(r[phase].as_f64().unwrap() >= 0.0, "{phase}: {r}");
        }
        let tokens_per_s = r["tokens_per_s"].as_f64().unwrap();
        let expected = (batch * seq) as f64 / step;
        assert!((tokens_per_s - expected).abs() <= 1e-9 * expected);
        // The child's whole peak: at least the parameters, their gradients and moments.
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 4 * 4 * TINY_PARAMS);
        for loss in ["first_loss", "last_loss"] {
            let l = r[loss].as_f64().unwrap();
            // Near ln(97) = 4.57 for a fresh model.
            assert!(l.is_finite() && (3.0..6.0).contains(&l), "{loss}: {r}");
        }
    }
}

#[test]
fn table_output_has_a_row_per_shape() {
    let out = roformer_ok(&[
        "bench",
        "train",
        "--config",
        "tiny",
        "--shapes",
        "1x4,2x8",
        "--seconds",
        "0",
        "--min-steps",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 thread(s)"), "{text}");
    // The header names the products' precision (it said f32 whatever ran).
    assert!(text.contains("products in f32"), "{text}");
    let rows = table_rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][..2], ["1", "4"], "{text}");
    assert_eq!(rows[1][..2], ["2", "8"], "{text}");
    assert!(rows.iter().all(|r| r.len() == 12), "{text}");
}

#[test]
fn bad_options_are_errors() {
    assert_each_fails(
        &["bench", "train", "--config", "tiny"],
        &[
            &["--shapes", "8"],
            &["--shapes", "0x4"],
            &["--config", "huge"],
            &["--seconds", "-1"],
            &["--min-steps", "0"],
            &["--threads", "0"],
        ],
    );
}
