//! `roformer bench vision` on the tiny config: the records each part prints and its option
//! errors (no timing asserts).

use crate::common::{assert_each_fails, roformer_ok, table_rows};

/// The JSON lines of `roformer bench vision --json ARGS` on the tiny config, and its stderr.
fn records(args: &[&str]) -> (Vec<serde_json::Value>, String) {
    let mut all = vec![
        "bench",
        "vision",
        "--json",
        "--config",
        "tiny",
        "--seconds",
        "0",
    ];
    all.extend_from_slice(args);
    let out = roformer_ok(&all);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The fields every record has, with their relations.
fn check_common(r: &serde_json::Value, part: &str, batch: u64, size: u64) {
    assert_eq!(r["impl"], "roformer-rs", "{r}");
    assert_eq!(r["part"], part, "{r}");
    assert_eq!(r["config"], "tiny", "{r}");
    assert_eq!(r["size"].as_u64(), Some(size), "{r}");
    assert_eq!(r["batch"].as_u64(), Some(batch), "{r}");
    // CLS, 2 registers and (size / 4)^2 patches.
    assert_eq!(
        r["tokens"].as_u64(),
        Some(3 + (size / 4) * (size / 4)),
        "{r}"
    );
    assert_eq!(r["malloc_warm"], true, "{r}");
    let seconds = r["seconds"].as_f64().unwrap();
    assert!(seconds > 0.0, "{r}");
    assert!(r["p10_seconds"].as_f64().unwrap() <= seconds, "{r}");
    assert!(seconds <= r["p90_seconds"].as_f64().unwrap(), "{r}");
    let images_per_s = r["images_per_s"].as_f64().unwrap();
    assert!((images_per_s - batch as f64 / seconds).abs() <= 1e-9 * images_per_s);
    assert!(r["cpu_s"].as_f64().unwrap() >= 0.0, "{r}");
    assert!(r["params"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn forward_records_each_batch_size_and_its_precision() {
    for precision in ["f32", "bf16"] {
        let (lines, stderr) = records(&[
            "--batches",
            "1,3",
            "--size",
            "20",
            "--min-reps",
            "2",
            "--precision",
            precision,
        ]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        // bf16 where the CPU has a native bf16 dot product, else the f32 it fell back to.
        let ran = if stderr.contains("running in f32") {
            "f32"
        } else {
            precision
        };
        for (r, batch) in lines.iter().zip([1, 3]) {
            check_common(r, "forward", batch, 20);
            assert_eq!(r["precision"], ran, "{r}");
            assert!(r["reps"].as_u64().unwrap() >= 2, "{r}");
            assert!(r.get("first_loss").is_none(), "{r}");
        }
    }
}

#[test]
fn forward_takes_the_configs_size_by_default_and_the_backbone_alone() {
    let (lines, _) = records(&["--batches", "2", "--min-reps", "1"]);
    let r = &lines[0];
    check_common(r, "forward", 2, 16);
    // Patch kernel 3x4x4x32 + bias, CLS and 2 register tokens (no mask token: inference
    // never reads it), two layers of four projections (no key bias), two layer norms, two
    // layer scales and the MLP, the final norm: no classifier head.
    let layer = 4 * 32 * 32 + 3 * 32 + 2 * 64 + 2 * 32 + (32 * 64 + 64) + (64 * 32 + 32);
    let expected = 3 * 16 * 32 + 32 + 3 * 32 + 2 * layer + 64;
    assert_eq!(r["params"].as_u64(), Some(expected as u64), "{r}");
}

#[test]
fn train_records_phases_and_a_falling_loss() {
    let (lines, _) = records(&[
        "--part",
        "train",
        "--batches",
        "8",
        "--min-reps",
        "6",
        "--warmup",
        "1",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let r = &lines[0];
    check_common(r, "train", 8, 16);
    assert_eq!(r["precision"], "f32", "{r}");
    assert!(r["reps"].as_u64().unwrap() >= 6, "{r}");
    for phase in ["forward_s", "backward_s", "optimizer_s"] {
        assert!(r[phase].as_f64().unwrap() > 0.0, "{phase}: {r}");
    }
    let (first, last) = (
        r["first_loss"].as_f64().unwrap(),
        r["last_loss"].as_f64().unwrap(),
    );
    // Near ln(10) = 2.30 for a fresh head; the same batch every step, so it falls.
    assert!((1.5..3.5).contains(&first), "{r}");
    assert!(last < first, "{r}");
}

#[test]
fn table_output_has_a_row_per_batch() {
    let out = roformer_ok(&[
        "bench",
        "vision",
        "--config",
        "tiny",
        "--batches",
        "1,2",
        "--seconds",
        "0",
        "--min-reps",
        "1",
        "--threads",
        "1",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("VisionModel forward"), "{text}");
    assert!(text.contains("tiny config at 16x16"), "{text}");
    assert!(text.contains("1 thread(s)"), "{text}");
    let rows = table_rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][..2], ["1", "19"], "{text}");
    assert_eq!(rows[1][..2], ["2", "19"], "{text}");
}

#[test]
fn bad_options_are_errors() {
    assert_each_fails(
        &["bench", "vision", "--config", "tiny", "--seconds", "0"],
        &[
            &["--batches", "0"],
            &["--size", "0"],
            // Smaller than one 4-pixel patch.
            &["--size", "3"],
            &["--config", "huge"],
            &["--part", "backward"],
            &["--seconds", "-1"],
            &["--min-reps", "0"],
            &["--threads", "0"],
        ],
    );
}
