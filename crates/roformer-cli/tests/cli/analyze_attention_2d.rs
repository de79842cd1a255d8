//! `roformer analyze attention-2d`: RoPE-only attention maps, axial 2D against flattened 1D.

use serde_json::Value;

use crate::common::{assert_each_fails, roformer, roformer_ok};
use crate::plot_files::{assert_png, assert_svg, out_path};

fn maps(args: &[&str]) -> Value {
    let mut all = vec!["analyze", "attention-2d", "--json"];
    all.extend_from_slice(args);
    let out = roformer(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The map as rows of f64.
fn grid(m: &Value, name: &str) -> Vec<Vec<f64>> {
    m[name]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect()
}

/// Scores come from f32 rotations of unit-normalised vectors: 1e-5 covers their rounding.
const TOL: f64 = 1e-5;

#[test]
fn maps_have_the_grid_shape_and_exact_symmetries() {
    let m = maps(&["--grid", "7x10", "--dim", "32", "--samples", "8"]);
    assert_eq!(m["grid"], serde_json::json!([7, 10]));
    assert_eq!(m["centre"], serde_json::json!([3, 5]));
    let (r0, c0) = (3usize, 5usize);
    for name in ["axial_2d", "flat_1d"] {
        let g = grid(&m, name);
        assert_eq!(g.len(), 7);
        assert!(g.iter().all(|row| row.len() == 10));
        // <R_c q, R_c q> / |q|^2 = 1 at the centre, and no score exceeds it (Cauchy-Schwarz).
        assert!((g[r0][c0] - 1.0).abs() < TOL, "{name}: {}", g[r0][c0]);
        assert!(g.iter().flatten().all(|&v| v <= 1.0 + TOL), "{name}");
        // q^T R_delta q = q^T R_-delta q: point symmetry about the centre, for both forms
        // (for 1D the flattened offset delta = dr * cols + dc changes sign too).
        for dr in -3i64..=3 {
            for dc in -4i64..=4 {
                let at = |r: i64, c: i64| g[(r0 as i64 + r) as usize][(c0 as i64 + c) as usize];
                assert!(
                    (at(dr, dc) - at(-dr, -dc)).abs() < TOL,
                    "{name} ({dr}, {dc})"
                );
            }
        }
    }
    // Axial: rows and columns rotate separate halves, so the map is a sum of a row term and a
    // column term: s(r, c) - s(r, c0) - s(r0, c) + s(r0, c0) = 0.
    let a = grid(&m, "axial_2d");
    for r in 0..7 {
        for c in 0..10 {
            let mixed = a[r][c] - a[r][c0] - a[r0][c] + a[r0][c0];
            assert!(mixed.abs() < TOL, "({r}, {c}): {mixed}");
        }
    }
}

#[test]
fn axial_treats_both_axes_alike_and_flat_does_not() {
    let m = maps(&["--samples", "64"]);
    let (a, f) = (grid(&m, "axial_2d"), grid(&m, "flat_1d"));
    let (r, c) = (8, 8);
    // Both halves use the same schedule: a vertical and a horizontal neighbour score the same
    // in expectation (here they differ by < 1e-3 over 64 vectors; 0.02 is far from the 1D gap).
    assert!((a[r + 1][c] - a[r][c + 1]).abs() < 0.02);
    // 1D on r * 16 + c: the vertical neighbour is 16 tokens away and scores much lower than the
    // horizontal one (about 0.60 against 0.96).
    assert!(
        f[r][c + 1] - f[r + 1][c] > 0.2,
        "{} vs {}",
        f[r][c + 1],
        f[r + 1][c]
    );
}

#[test]
fn writes_png_and_svg_plots() {
    let png = out_path("analyze_attention_2d", "maps.png");
    roformer_ok(&[
        "analyze",
        "attention-2d",
        "--samples",
        "2",
        "--out",
        png.to_str().unwrap(),
    ]);
    assert_png(&png, 1280, 600, 20_000);

    let svg = out_path("analyze_attention_2d", "maps.svg");
    roformer_ok(&[
        "analyze",
        "attention-2d",
        "--grid",
        "4x6",
        "--samples",
        "2",
        "--out",
        svg.to_str().unwrap(),
    ]);
    let text = assert_svg(&svg, &["axial 2D RoPE", "flattened index", "column"]);
    // 2 maps of 4 x 6 cells, each a filled rectangle.
    assert!(text.matches("<rect").count() >= 48);
}

#[test]
fn bad_arguments_fail_with_a_message() {
    assert_each_fails(
        &["analyze", "attention-2d"],
        &[
            &["--dim", "30"],
            &["--grid", "0x4"],
            &["--grid", "16"],
            &["--samples", "0"],
            &["--out", "maps.bmp"],
        ],
    );
}

/// `--dim 2^40` aborted allocating its frequencies; sizes past the limits are refused at once.
#[test]
fn sizes_past_the_limits_are_refused() {
    let cases: &[(&[&str], &str)] = &[
        (&["--dim", "1099511627776"], "rotary dims"),
        (&["--grid", "1024x1024", "--dim", "128"], "patches x --dim"),
        (&["--samples", "1099511627776"], "--samples"),
        (
            &["--grid", "512x512", "--dim", "64", "--samples", "1024"],
            "--samples x patches x --dim",
        ),
    ];
    for (args, option) in cases {
        let mut all = vec!["analyze", "attention-2d"];
        all.extend_from_slice(args);
        let out = roformer(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains(option) && stderr.contains("limit"),
            "{args:?}: {stderr}"
        );
    }
}
