//! `roformer bench rope`: a tiny run's JSON lines carry every field with sane values, the table
//! has its ratio columns, and bad options fail cleanly. (No timing is asserted: only that
//! times are positive and GB/s follow from the byte formula.)

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::roformer;

/// Two shapes (a prefill big enough for threads, a decode step), tiny budget.
const TINY: [&str; 8] = [
    "bench",
    "rope",
    "--shapes",
    "2x4x256x64,1x4x1x32",
    "--seconds",
    "0",
    "--min-rounds",
    "2",
];

fn stdout_of(args: &[&str]) -> String {
    let out = roformer(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_lines_have_the_required_fields_and_consistent_rates() {
    let mut args = TINY.to_vec();
    args.push("--json");
    let text = stdout_of(&args);
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    // 2 shapes x 2 dtypes (f32, bf16) x 2 layouts x 5 implementations.
    assert_eq!(records.len(), 40, "{text}");
    let mut seen = BTreeSet::new();
    for r in &records {
        let shape: Vec<u64> = r["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert!(shape == [2, 4, 256, 64] || shape == [1, 4, 1, 32], "{r}");
        let dtype = r["dtype"].as_str().unwrap();
        let elem = match dtype {
            "f32" => 4,
            "bf16" => 2,
            other => panic!("dtype {other}"),
        };
        let layout = r["layout"].as_str().unwrap();
        assert!(layout == "interleaved" || layout == "half", "{r}");
        let imp = r["impl"].as_str().unwrap();
        let variant = r["variant"].as_str().unwrap();
        let expected_variants: &[&str] = match (imp, layout) {
            ("rotary", "interleaved") => &["fused_inplace", "out_of_place", "candle_rope_i"],
            ("rotary", _) => &["fused_inplace", "out_of_place", "candle_rope"],
            ("memcpy", _) => &["copy"],
            ("candle", "interleaved") => &["rope_i"],
            ("candle", _) => &["rope"],
            _ => panic!("impl {imp}"),
        };
        assert!(expected_variants.contains(&variant), "{r}");
        // q and k read and written, plus the cos/sin table: the peers' formula.
        let (t, d) = (shape[2], shape[3]);
        let bytes = 2 * 2 * shape.iter().product::<u64>() * elem + t * d * elem;
        assert_eq!(r["bytes"].as_u64(), Some(bytes), "{r}");
        let seconds = r["seconds"].as_f64().unwrap();
        let gbps = r["gbps"].as_f64().unwrap();
        assert!(seconds > 0.0 && seconds < 1.0, "{r}");
        let expected = bytes as f64 / seconds / 1e9;
        assert!((gbps - expected).abs() <= 1e-9 * expected, "{r}");
        assert!(r["threads"].as_u64().unwrap() >= 1, "{r}");
        assert!(!r["isa"].as_str().unwrap().is_empty(), "{r}");
        assert!(r["samples"].as_u64().unwrap() >= 2, "{r}");
        seen.insert((shape, dtype, layout, imp, variant));
    }
    assert_eq!(
        seen.len(),
        records.len(),
        "every line is a distinct measurement"
    );
}

#[test]
fn table_lists_every_case_with_ratios() {
    let text = stdout_of(&TINY);
    assert!(
        ["fus/mem", "fus/cnd", "drop-in", "drp/cnd", "drp/oop"]
            .iter()
            .all(|column| text.contains(column)),
        "{text}"
    );
    for shape in ["2x4x256x64", "1x4x1x32"] {
        for dtype in ["f32", "bf16"] {
            for layout in ["interleaved", "half"] {
                let row = text.lines().find(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.get(1..4) == Some(&[shape, dtype, layout][..])
                });
                assert!(
                    row.is_some(),
                    "no row for {shape} {dtype} {layout}:\n{text}"
                );
            }
        }
    }
}

#[test]
fn bad_options_fail_with_a_message() {
    for bad in [
        &["bench", "rope", "--shapes", "1x2x3"][..],
        &["bench", "rope", "--shapes", "1x2x3x5"],
        &["bench", "rope", "--dtypes", "f64"],
        &["bench", "rope", "--layouts", "diagonal"],
        &["bench", "rope", "--seconds=nan"],
    ] {
        let out = roformer(bad);
        assert!(!out.status.success(), "{bad:?} succeeded");
        assert!(!out.stderr.is_empty(), "{bad:?} printed no error");
    }
}
