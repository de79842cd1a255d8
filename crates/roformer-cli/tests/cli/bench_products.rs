//! `roformer bench products`: the ceilings and product records it prints, the step's sum, and
//! its option errors (no timing asserts).

use crate::common::{roformer, roformer_ok};

fn records(args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["bench", "products", "--json", "--seconds", "0"];
    all.extend_from_slice(args);
    let out = roformer_ok(&all);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A product record's `(m, n, k)`.
fn mnk(record: &serde_json::Value) -> (Option<u64>, Option<u64>, Option<u64>) {
    let size = |key: &str| record[key].as_u64();
    (size("m"), size("n"), size("k"))
}

/// Whether this CPU has the bf16 dot product the bf16 column needs.
fn has_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bf16");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[test]
fn json_has_the_ceilings_each_product_and_the_step_sum() {
    let all = records(&["--shapes", "64x48x40:nt,16x24x8", "--instructions", "1200"]);
    let ceilings: Vec<_> = all.iter().filter(|r| r.get("ceiling").is_some()).collect();
    let products: Vec<_> = all.iter().filter(|r| r.get("product").is_some()).collect();
    assert_eq!(all.len(), ceilings.len() + products.len() + 1, "{all:?}");
    let bf16_ceiling = ceilings
        .iter()
        .any(|c| c["ceiling"].as_str().unwrap().contains("vdpbf16ps"));
    assert_eq!(bf16_ceiling, has_bf16());
    for c in &ceilings {
        assert!(c["gflops"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert_eq!(products.len(), 2);
    let first = products[0];
    assert_eq!(mnk(first), (Some(64), Some(48), Some(40)));
    assert_eq!(
        (first["a"].as_str(), first["b"].as_str()),
        (Some("n"), Some("t"))
    );
    assert_eq!(products[1]["b"], "n");
    let mut f32_sum = 0.0;
    for p in &products {
        let f32 = &p["f32"];
        let seconds = f32["seconds"].as_f64().unwrap();
        let gflops = f32["gflops"].as_f64().unwrap();
        let (m, n, k) = mnk(p);
        let flop = 2.0 * (m.unwrap() * n.unwrap() * k.unwrap()) as f64;
        assert!(
            (gflops - flop / seconds / 1e9).abs() <= 1e-9 * gflops,
            "{p}"
        );
        assert_eq!(p["bf16"].is_null(), !has_bf16(), "{p}");
        assert_eq!(p["bf16_kept"].is_null(), !has_bf16(), "{p}");
        if has_bf16() {
            let ratio = p["bf16_over_f32"].as_f64().unwrap();
            let expected = seconds / p["bf16"]["seconds"].as_f64().unwrap();
            assert!((ratio - expected).abs() <= 1e-9 * expected, "{p}");
        }
        f32_sum += seconds * p["count"].as_f64().unwrap();
    }
    let step = all.last().unwrap();
    assert_eq!(step["step"].as_u64(), Some(2));
    let f32_seconds = step["f32_seconds"].as_f64().unwrap();
    assert!((f32_seconds - f32_sum).abs() <= 1e-12 * f32_sum, "{step}");
}

#[test]
fn the_default_list_is_a_step_of_the_config() {
    let all = records(&[
        "--config",
        "tiny",
        "--batch",
        "2",
        "--seq",
        "32",
        "--instructions",
        "1200",
    ]);
    let products: Vec<_> = all.iter().filter(|r| r.get("product").is_some()).collect();
    // Three passes of the four dense layers of a sub-layer pair and of the decoder, then
    // attention's three shapes.
    assert_eq!(products.len(), 18);
    assert_eq!(products[0]["product"], "q/k/v forward");
    // tiny: hidden 32, 2 layers; the stacked projection has 96 outputs.
    assert_eq!(mnk(products[0]), (Some(64), Some(96), Some(32)));
    assert_eq!(products[0]["count"].as_u64(), Some(2));
    // tiny: 4 heads of 8; q k^T thrice per sequence, head and layer, on one thread.
    let scores = products[15];
    assert_eq!(mnk(scores), (Some(32), Some(32), Some(8)));
    assert_eq!(scores["count"].as_u64(), Some(3 * 2 * 4 * 2));
    assert_eq!(scores["threads"].as_u64(), Some(1));
    // The decoder on 15 % of 64 tokens, rounded up: 10 rows by the 97 words.
    assert_eq!(
        (products[12]["m"].as_u64(), products[12]["n"].as_u64()),
        (Some(10), Some(97))
    );
}

#[test]
fn the_table_has_a_row_per_product_and_the_sum() {
    let out = roformer_ok(&[
        "bench",
        "products",
        "--seconds",
        "0",
        "--instructions",
        "1200",
        "--shapes",
        "8x8x8:tn",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Instruction ceilings, one core"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("8x8x8:tn"))
        .expect(&text);
    assert!(row.contains("8x8x8 t n"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("all, times their counts: f32"),
        "{text}"
    );
}

#[test]
fn bad_options_are_errors() {
    for args in [
        &["--shapes", "8x8"][..],
        &["--shapes", "0x8x8"],
        &["--shapes", "8x8x8:nq"],
        &["--seq", "0"],
        &["--batch", "0"],
        &["--seconds", "-1"],
        &["--instructions", "3"],
        &["--config", "huge"],
        // A step of 2^30 tokens: terabytes of operands, refused before allocating.
        &["--batch", "65536", "--seq", "16384", "--instructions", "12"],
    ] {
        let mut all = vec!["bench", "products"];
        all.extend_from_slice(args);
        let out = roformer(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}
