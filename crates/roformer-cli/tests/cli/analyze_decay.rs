//! `roformer analyze decay`: the long-term decay bound as JSON and plots.

use serde_json::Value;

use crate::common::{roformer, roformer_ok};
use crate::plot_files::{assert_png, assert_svg, out_path};

/// Runs the command with `args` plus `--json` and returns the rows.
fn rows(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["analyze", "decay", "--json"];
    all.extend_from_slice(args);
    let out = roformer(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json.as_array().unwrap().clone()
}

fn field(row: &Value, name: &str) -> f64 {
    row[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} missing in {row}"))
}

#[test]
fn json_bound_matches_the_definition() {
    let rows = rows(&["--dim", "16", "--base", "100", "--max-distance", "40"]);
    assert_eq!(rows.len(), 41);
    // The definition evaluated here, independently of the library: theta_i = base^(-2i/d),
    // S_j = sum_{i<j} exp(i r theta_i), bound = mean over j = 1..d/2 of |S_j|.
    let (d, base) = (16usize, 100f64);
    for (r, row) in rows.iter().enumerate() {
        assert_eq!(row["distance"].as_u64(), Some(r as u64));
        assert!(row.get("measured").is_none());
        let mut total = 0.0;
        for j in 1..=d / 2 {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for i in 0..j {
                let angle = r as f64 * base.powf(-2.0 * i as f64 / d as f64);
                re += angle.cos();
                im += angle.sin();
            }
            total += (re * re + im * im).sqrt();
        }
        let expected = total / (d / 2) as f64;
        assert!((field(row, "bound") - expected).abs() < 1e-9, "r = {r}");
    }
    // r = 0: every S_j = j, so the bound is (d/2 + 1) / 2.
    assert_eq!(field(&rows[0], "bound"), 4.5);
}

#[test]
fn measured_scores_decay_for_equal_vectors_only() {
    let d = 64.0;
    let same = rows(&[
        "--dim",
        "64",
        "--max-distance",
        "200",
        "--measured",
        "--samples",
        "64",
    ]);
    let m: Vec<f64> = same.iter().map(|r| field(r, "measured")).collect();
    // k = q ~ N(0, I): at r = 0 the score is |q|^2, mean d, standard deviation of the mean
    // sqrt(2d / 64) = 1.4: 10% of d is over four standard deviations.
    assert!((m[0] - d).abs() < 0.1 * d, "{}", m[0]);
    // E<q, R_r q> = 2 sum_i cos(r theta_i) falls to a fraction of d far away.
    let far = m[150..].iter().sum::<f64>() / m[150..].len() as f64;
    assert!(far < 0.6 * m[0], "far {far} vs start {}", m[0]);

    let independent = rows(&[
        "--dim",
        "64",
        "--max-distance",
        "200",
        "--measured",
        "--samples",
        "256",
        "--qk",
        "independent",
    ]);
    // Independent Gaussians: <q, R_r k> ~ N(0, d) at every r, so E|.| = sqrt(2d/pi) ~ 6.4
    // whatever r: no decay. Averages over 256 samples stay within 20% of that.
    let flat = (2.0 * d / std::f64::consts::PI).sqrt();
    for r in [0usize, 50, 200] {
        let v = field(&independent[r], "measured");
        assert!((v - flat).abs() < 0.2 * flat, "r = {r}: {v} vs {flat}");
    }
}

#[test]
fn writes_png_and_svg_plots() {
    let png = out_path("analyze_decay", "decay.png");
    roformer_ok(&[
        "analyze",
        "decay",
        "--measured",
        "--samples",
        "4",
        "--out",
        png.to_str().unwrap(),
    ]);
    assert_png(&png, 900, 560, 20_000);

    let svg = out_path("analyze_decay", "decay.svg");
    roformer_ok(&["analyze", "decay", "--out", svg.to_str().unwrap()]);
    assert_svg(
        &svg,
        &["relative distance", "relative upper bound", "<polyline"],
    );
}

#[test]
fn bad_arguments_fail_with_a_message() {
    for args in [
        vec!["analyze", "decay", "--dim", "7"],
        vec!["analyze", "decay", "--base", "-1"],
        vec!["analyze", "decay", "--out", "decay.jpg"],
        vec!["analyze", "decay", "--measured", "--samples", "0"],
    ] {
        let out = roformer(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
    }
}

/// Sizes that panicked on capacity overflow (--dim, --max-distance near 2^64), aborted on
/// allocation (2^40, --measured --dim 2^30) or ran without end (--samples 2^40) are refused
/// at once, naming the option and its limit.
#[test]
fn sizes_past_the_limits_are_refused() {
    let cases: &[(&[&str], &str)] = &[
        (&["--dim", "18446744073709551614"], "rotary dims"),
        (&["--dim", "1099511627776"], "rotary dims"),
        (
            &["--max-distance", "18446744073709551615"],
            "--max-distance",
        ),
        (&["--max-distance", "1099511627776"], "--max-distance"),
        (
            &["--measured", "--dim", "1073741824", "--samples", "1"],
            "rotary dims",
        ),
        (&["--measured", "--samples", "1099511627776"], "--samples"),
        (
            &["--dim", "65536", "--max-distance", "1048576"],
            "--dim / 2 x (--max-distance + 1)",
        ),
        (
            &[
                "--measured",
                "--dim",
                "65536",
                "--max-distance",
                "4096",
                "--samples",
                "1",
            ],
            "(--max-distance + 1) x --dim",
        ),
        (
            &[
                "--measured",
                "--dim",
                "1024",
                "--max-distance",
                "4096",
                "--samples",
                "1024",
            ],
            "--samples x (--max-distance + 1) x --dim",
        ),
    ];
    for (args, option) in cases {
        let mut all = vec!["analyze", "decay"];
        all.extend_from_slice(args);
        let out = roformer(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains("error") && stderr.contains(option) && stderr.contains("limit"),
            "{args:?}: {stderr}"
        );
    }
}
