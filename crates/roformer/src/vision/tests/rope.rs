//! The rotation of a pass: DINOv3's formula, the table path against the candle-op path, the
//! prefix tokens left alone, the seed's relativity.

use std::f64::consts::PI;

use candle_core::{DType, Device, Tensor, D};
use rotary::{rotate_tensor, Direction, Order};

use super::{max_diff, random, tiny};
use crate::vision::config::PositionKind;
use crate::vision::positions::{flat_positions, grid_positions, Coordinates, PatchGrid, Placement};
use crate::vision::rope::{rotate_heads, PassRotation, Rotation};

/// The pass rotation of `cfg` over `grid`, in f32.
fn pass(cfg: &crate::vision::VisionConfig, grid: PatchGrid) -> PassRotation {
    let rotation = Rotation::of_config(cfg).unwrap();
    rotation
        .for_pass(cfg, grid, DType::F32, &Device::Cpu)
        .unwrap()
}

/// transformers' DINOv3 rotation, written as its Python is: `inv_freq = 1 / theta **
/// arange(0, 1, 4/d)`, patch centres `(arange(0.5, n) / n) * 2 - 1` (y, x), angles `2 pi c
/// inv_freq` flattened y then x and tiled twice, `q cos + rotate_half(q) sin` on the patch
/// tokens only. `x` is head-major `[b, heads, t, d]`.
fn dinov3(x: &Tensor, grid: PatchGrid, prefix: usize, theta: f64) -> Tensor {
    let (_, _, t, d) = x.dims4().unwrap();
    let inv: Vec<f64> = (0..d / 4)
        .map(|j| 1.0 / theta.powf(j as f64 * 4.0 / d as f64))
        .collect();
    let centre = |i: usize, n: usize| (i as f64 + 0.5) / n as f64 * 2.0 - 1.0;
    let mut cos = vec![1f32; t * d];
    let mut sin = vec![0f32; t * d];
    for r in 0..grid.rows {
        for c in 0..grid.cols {
            let row = prefix + r * grid.cols + c;
            let (y, xc) = (centre(r, grid.rows), centre(c, grid.cols));
            let half: Vec<f64> = inv
                .iter()
                .map(|f| 2.0 * PI * y * f)
                .chain(inv.iter().map(|f| 2.0 * PI * xc * f))
                .collect();
            for j in 0..d {
                let a = half[j % (d / 2)];
                cos[row * d + j] = a.cos() as f32;
                sin[row * d + j] = a.sin() as f32;
            }
        }
    }
    let cos = Tensor::from_vec(cos, (t, d), x.device()).unwrap();
    let sin = Tensor::from_vec(sin, (t, d), x.device()).unwrap();
    let (x1, x2) = (
        x.narrow(D::Minus1, 0, d / 2).unwrap(),
        x.narrow(D::Minus1, d / 2, d / 2).unwrap(),
    );
    let rotated_half = Tensor::cat(&[&x2.neg().unwrap(), &x1], D::Minus1).unwrap();
    (x.broadcast_mul(&cos).unwrap() + rotated_half.broadcast_mul(&sin).unwrap()).unwrap()
}

#[test]
fn vision_axial_rope_over_normalised_centres_is_dinov3s() {
    for (theta, grid) in [(100.0, (3, 5)), (1000.0, (4, 1)), (100.0, (1, 1))] {
        let extra = format!(r#""rope_theta": {theta}"#);
        let cfg = tiny(PositionKind::RopeAxial, &extra);
        let grid = PatchGrid {
            rows: grid.0,
            cols: grid.1,
        };
        let t = cfg.prefix_tokens() + grid.patches();
        let x = random(&[2, 2, t, 8], 5); // [b, heads, t, d]
        let PassRotation::Fixed {
            table,
            positions,
            omega,
        } = pass(&cfg, grid)
        else {
            panic!("axial RoPE has fixed frequencies");
        };
        let want = dinov3(&x, grid, cfg.prefix_tokens(), theta);
        let fast = rotate_tensor(&x, table, Order::HeadMajor, Direction::Forward).unwrap();
        let slow = rotate_heads(&x, &positions, &omega).unwrap();
        // Angles in f64 here, in f64 there too; cos/sin rounded once to f32: 1e-6.
        assert!(max_diff(&fast, &want) < 2e-6, "{grid:?}");
        assert!(max_diff(&slow, &want) < 2e-6, "{grid:?}");
        // The prefix tokens (CLS, registers) are not rotated.
        let prefix = |y: &Tensor| y.narrow(2, 0, cfg.prefix_tokens()).unwrap();
        assert_eq!(max_diff(&prefix(&fast), &prefix(&x)), 0.0);
    }
}

/// The per-token table the fused attention reads and the candle-op reference agree, for every
/// rotary kind and both coordinates (RoPE-Mixed's per-head frequencies: see the model tests).
#[test]
fn vision_rotation_table_matches_its_candle_reference() {
    for kind in [PositionKind::RopeAxial, PositionKind::RopeFlat] {
        for coords in ["normalised", "indices"] {
            let cfg = tiny(kind, &format!(r#""rope_coordinates": "{coords}""#));
            let grid = PatchGrid { rows: 3, cols: 4 };
            let t = cfg.prefix_tokens() + grid.patches();
            let PassRotation::Fixed {
                table,
                positions,
                omega,
            } = pass(&cfg, grid)
            else {
                panic!("{kind}: fixed frequencies");
            };
            let x = random(&[2, t, 2, 8], 11); // token-major [b, t, heads, d]
            let fast = rotate_tensor(&x, table, Order::TokenMajor, Direction::Forward).unwrap();
            let heads = x.transpose(1, 2).unwrap().contiguous().unwrap();
            let slow = rotate_heads(&heads, &positions, &omega).unwrap();
            let slow = slow.transpose(1, 2).unwrap();
            // f32 angles up to 12 rad (indices) on the candle side: 1e-5.
            assert!(max_diff(&fast, &slow) < 1e-5, "{kind} {coords}");
        }
    }
    for kind in [PositionKind::Absolute, PositionKind::None] {
        let cfg = tiny(kind, "");
        assert!(matches!(
            pass(&cfg, PatchGrid { rows: 2, cols: 2 }),
            PassRotation::None
        ));
    }
}

/// Seed 003's relativity, `<R_p q, R_p' k>` a function of `p' - p` alone, under the axial
/// rotation over integer indices: pairs of patches at the same offset score the same.
#[test]
fn vision_axial_scores_depend_on_the_offset_only() {
    let cfg = tiny(PositionKind::RopeAxial, r#""rope_coordinates": "indices""#);
    let grid = PatchGrid { rows: 4, cols: 5 };
    let prefix = cfg.prefix_tokens();
    let t = prefix + grid.patches();
    let PassRotation::Fixed { table, .. } = pass(&cfg, grid) else {
        panic!("fixed");
    };
    // The same q and k at every token.
    let q = random(&[1, 1, 1, 8], 1)
        .broadcast_as((1, 1, t, 8))
        .unwrap()
        .contiguous()
        .unwrap();
    let k = random(&[1, 1, 1, 8], 2)
        .broadcast_as((1, 1, t, 8))
        .unwrap()
        .contiguous()
        .unwrap();
    let rq = rotate_tensor(&q, table.clone(), Order::HeadMajor, Direction::Forward).unwrap();
    let rk = rotate_tensor(&k, table, Order::HeadMajor, Direction::Forward).unwrap();
    let scores: Vec<Vec<f32>> = rq
        .matmul(&rk.t().unwrap())
        .unwrap()
        .squeeze(0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    let at = |r: usize, c: usize| prefix + r * grid.cols + c;
    // Offset (+1 row, +2 columns) from two places; (+1, 0) against (0, +1) differ.
    let a = scores[at(0, 0)][at(1, 2)];
    let b = scores[at(2, 1)][at(3, 3)];
    assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    let down = scores[at(1, 1)][at(2, 1)];
    let right = scores[at(1, 1)][at(1, 2)];
    assert!(
        (down - right).abs() > 1e-3,
        "rows and columns turn different pairs"
    );
}

#[test]
fn vision_positions_put_the_prefix_at_the_origin_and_patches_row_major() {
    let grid = PatchGrid { rows: 2, cols: 3 };
    let at = |coordinates| Placement {
        coordinates,
        config_grid: grid,
    };
    let p = grid_positions(grid, 2, at(Coordinates::Indices)).unwrap();
    assert_eq!(p.rows(), 8);
    assert_eq!(p.row(0), Some(&[0.0, 0.0][..]));
    assert_eq!(p.row(1), Some(&[0.0, 0.0][..]));
    assert_eq!(p.row(2 + 4), Some(&[1.0, 1.0][..]));
    let n = grid_positions(grid, 1, at(Coordinates::Normalised)).unwrap();
    // Row 0 of 2: centre -1/2; column 2 of 3: centre 2/3; in turns (2 pi).
    let want = [2.0 * PI * -0.5, 2.0 * PI * (2.0 / 3.0)];
    let got = n.row(1 + 2).unwrap();
    assert!((got[0] - want[0]).abs() < 1e-12 && (got[1] - want[1]).abs() < 1e-12);
}

#[test]
fn interpolated_positions_are_the_indices_on_the_config_grid_and_stretch_onto_its_span() {
    let config_grid = PatchGrid { rows: 7, cols: 7 };
    let placement = |coordinates| Placement {
        coordinates,
        config_grid,
    };
    let on_config = grid_positions(config_grid, 1, placement(Coordinates::Interpolated)).unwrap();
    let indices = grid_positions(config_grid, 1, placement(Coordinates::Indices)).unwrap();
    assert_eq!(on_config.rows(), indices.rows());
    for t in 0..indices.rows() {
        let (a, b) = (on_config.row(t).unwrap(), indices.row(t).unwrap());
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12),
            "row {t}"
        );
    }
    // A 14 x 14 grid: twice as fine, on the same span [-1/4, 6 + 1/4].
    let fine = PatchGrid { rows: 14, cols: 14 };
    let p = grid_positions(fine, 0, placement(Coordinates::Interpolated)).unwrap();
    assert_eq!(p.row(0), Some(&[-0.25, -0.25][..]));
    assert_eq!(p.row(14 * 13 + 13), Some(&[6.25, 6.25][..]));
    assert_eq!(p.row(1), Some(&[-0.25, 0.25][..]));
    // The flat index stretches by patch counts: 196 patches onto the span of 49.
    let flat = flat_positions(fine, 0, placement(Coordinates::Interpolated)).unwrap();
    let want = 195.5 * 49.0 / 196.0 - 0.5;
    assert!((flat.row(195).unwrap()[0] - want).abs() < 1e-12);
}
