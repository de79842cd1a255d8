//! `roformer bench attention`: softmax against linear attention, records, crossover, plot.

use serde_json::Value;

use crate::common::{assert_each_fails, roformer};
use crate::plot_files::{assert_png, out_path};

/// Runs the benchmark with `args` plus `--json` and splits its lines into case records and
/// crossover records.
fn run(args: &[&str]) -> (Vec<Value>, Vec<Value>) {
    let mut all = vec!["bench", "attention", "--json", "--seconds", "0"];
    all.extend_from_slice(args);
    let out = roformer(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines
        .into_iter()
        .partition(|v| v.get("crossover").is_none())
}

fn find<'a>(records: &'a [Value], attention: &str, masking: &str, len: u64) -> &'a Value {
    records
        .iter()
        .find(|r| r["attention"] == attention && r["masking"] == masking && r["len"] == len)
        .unwrap_or_else(|| panic!("no record for {attention} {masking} {len}"))
}

#[test]
fn every_case_is_measured_and_memory_is_plausible() {
    let png = out_path("bench_attention", "attention.png");
    let (records, crossovers) = run(&[
        "--min-len",
        "64",
        "--max-len",
        "512",
        "--out",
        png.to_str().unwrap(),
    ]);
    // 2 maskings x 4 lengths x 2 layers.
    assert_eq!(records.len(), 16);
    for r in &records {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["samples"].as_u64().unwrap() >= 3, "{r}");
    }
    for masking in ["bidirectional", "causal"] {
        let softmax = find(&records, "softmax", masking, 512)["peak_bytes"]
            .as_u64()
            .unwrap();
        let linear = find(&records, "linear", masking, 512)["peak_bytes"]
            .as_u64()
            .unwrap();
        // Softmax must hold the 512 x 512 f32 score matrix (1 MiB) at some point; linear
        // attention holds O(N (chunk + d)) floats, a few hundred KiB at this length.
        assert!(
            softmax >= 512 * 512 * 4,
            "{masking}: softmax peak {softmax}"
        );
        assert!(
            linear < softmax / 2,
            "{masking}: linear {linear} vs softmax {softmax}"
        );
    }
    assert_eq!(crossovers.len(), 2);
    for c in &crossovers {
        let c = &c["crossover"];
        // Linear attention already uses less memory at 512.
        assert!(c["memory_len"].as_u64().is_some_and(|n| n <= 512), "{c}");
        assert_eq!(c["shortest_common_len"], 64);
    }
    assert_png(&png, 1200, 520, 20_000);
}

#[test]
fn softmax_over_the_memory_budget_is_skipped() {
    // 1 MiB budget: softmax runs at 256 (256 KiB of scores) and 512 (1 MiB), not at 1024.
    let (records, crossovers) = run(&[
        "--min-len",
        "256",
        "--max-len",
        "1024",
        "--masking",
        "causal",
        "--memory-budget-mib",
        "1",
    ]);
    assert_eq!(records.len(), 6);
    assert_eq!(find(&records, "softmax", "causal", 512)["status"], "ok");
    let skipped = find(&records, "softmax", "causal", 1024);
    assert_eq!(skipped["status"], "skipped");
    assert!(skipped["reason"].as_str().unwrap().contains("budget"));
    assert!(skipped.get("median_s").is_none());
    assert_eq!(find(&records, "linear", "causal", 1024)["status"], "ok");
    assert_eq!(crossovers.len(), 1);
    assert_eq!(crossovers[0]["crossover"]["masking"], "causal");
}

#[test]
fn bad_arguments_fail_with_a_message() {
    assert_each_fails(
        &["bench", "attention"],
        &[
            &["--min-len", "0"],
            &["--min-len", "128", "--max-len", "64"],
            &["--head-dim", "7"],
            &["--chunk", "0"],
            &["--out", "bench.gif"],
            &["--seconds", "inf"],
            &["--seconds", "NaN"],
        ],
    );
}
