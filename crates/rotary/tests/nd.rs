//! N-D rotary embeddings: the properties seed 003 derives (relativity, invertibility, the
//! flattening argument), the reductions to 1D, both layouts, grids, and golden values from
//! rotary-embedding-torch and transformers' Qwen2-VL (scripts/make_nd_fixtures.py).

use proptest::prelude::*;
use rotary::{
    pair_permutation, rotate, AxisSchedule, CosSin, Direction, Layout, NdPositions, NdRope,
    Positions, Rope, RopeError, Shape,
};
use serde_json::Value;

const LAYOUTS: [Layout; 2] = [Layout::Interleaved, Layout::Half];

/// Rotates `rows` vectors of `head_dim` (one per position row) with `table`.
fn rotate_rows(table: &CosSin, head_dim: usize, x: &[f32], direction: Direction) -> Vec<f32> {
    let rows = x.len() / head_dim;
    let mut out = vec![0.0; x.len()];
    rotate(
        x,
        &mut out,
        Shape::head_major(1, 1, rows, head_dim),
        table.view(),
        direction,
    )
    .unwrap();
    out
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

fn fixture(name: &str) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nd/cases.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all[name].clone()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    floats(v).into_iter().map(|x| x as usize).collect()
}

/// A vector in [-1, 1]^n from a seed (a small LCG: no extra dependency).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

// ---- golden values -------------------------------------------------------------------------

/// rotary-embedding-torch's axial frequencies (lang and pixel) = our axial angles on the same
/// grid. The reference multiplies float32 positions by float32 frequencies: relative error
/// about 2 * 2^-24 of angles up to ~30 rad, so 1e-6 relative plus 1e-6 absolute.
#[test]
fn axial_matches_rotary_embedding_torch() {
    for (name, schedule) in [
        ("axial_lang", AxisSchedule::Lang { base: 100.0 }),
        ("axial_pixel", AxisSchedule::Pixel { max_freq: 10.0 }),
    ] {
        let case = fixture(name);
        let dims = usizes(&case["dims_per_axis"]);
        let grid = usizes(&case["grid"]);
        let expected = floats(&case["angles"]);
        let rope = NdRope::axial(64, Layout::Interleaved, &dims, schedule).unwrap();
        let positions = if name == "axial_pixel" {
            NdPositions::pixel_grid(&grid).unwrap()
        } else {
            NdPositions::grid(&grid).unwrap()
        };
        let pairs = rope.pairs();
        assert_eq!(expected.len(), positions.rows() * pairs, "{name}");
        for row in 0..positions.rows() {
            for i in 0..pairs {
                let ours = rope.angle(positions.row(row).unwrap(), i);
                let theirs = expected[row * pairs + i];
                let tol = 1e-6 * theirs.abs() + 1e-6;
                assert!(
                    (ours - theirs).abs() <= tol,
                    "{name} row {row} pair {i}: {ours} vs {theirs}"
                );
            }
        }
    }
}

/// Compares a table (half layout) with transformers' `cos` and `sin` (`cat(f, f)` of each).
/// Tolerance 2e-6: the reference computes float32 angles (relative error ~2^-24 of angles up to
/// ~8 rad) and float32 cos/sin; ours rounds f64 values once.
fn assert_half_table(table: &CosSin, cos: &[f64], sin: &[f64], what: &str) {
    let r = table.rotary_dim();
    for row in 0..table.rows() {
        let (c, s) = table.row(row).unwrap();
        for j in 0..r {
            let (ec, es) = (cos[row * r + j], sin[row * r + j]);
            // Our signed sine is -sin on the first half of the pairs' coordinates.
            let ours_sin = if j < r / 2 { -s[j] } else { s[j] };
            assert!(
                (f64::from(c[j]) - ec).abs() <= 2e-6,
                "{what} cos row {row} j {j}"
            );
            assert!(
                (f64::from(ours_sin) - es).abs() <= 2e-6,
                "{what} sin row {row} j {j}"
            );
        }
    }
}

#[test]
fn mrope_matches_qwen2_vl() {
    let case = fixture("mrope");
    let head_dim = case["head_dim"].as_u64().unwrap() as usize;
    let section = usizes(&case["mrope_section"]);
    let coords: Vec<f64> = case["positions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(floats)
        .collect();
    let positions = NdPositions::new(3, coords).unwrap();
    let rope = NdRope::mrope(head_dim, Layout::Half, 10_000.0, &section).unwrap();
    let table = rope.table(&positions).unwrap();
    assert_half_table(
        &table,
        &floats(&case["cos"]),
        &floats(&case["sin"]),
        "mrope",
    );
}

#[test]
fn axial_2d_matches_qwen2_vl_vision() {
    let case = fixture("vision_2d");
    let head_dim = case["head_dim"].as_u64().unwrap() as usize;
    let grid = usizes(&case["grid"]);
    let rope = NdRope::axial_2d(head_dim, head_dim, 10_000.0, Layout::Half).unwrap();
    let table = rope
        .table(&NdPositions::grid_2d(grid[0], grid[1]).unwrap())
        .unwrap();
    assert_half_table(
        &table,
        &floats(&case["cos"]),
        &floats(&case["sin"]),
        "vision",
    );
}

// ---- seed 003's properties -----------------------------------------------------------------

fn rope_2d(kind: u8, layout: Layout, omega_seed: u64) -> NdRope {
    match kind {
        0 => NdRope::axial_2d(16, 16, 10_000.0, layout).unwrap(),
        1 => NdRope::rope_mixed_2d(16, 16, layout, 10.0, 0.7).unwrap(),
        _ => {
            let omega = data(16, omega_seed).iter().map(|&w| f64::from(w)).collect();
            NdRope::new(16, layout, 2, omega).unwrap()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Relativity: `R_{x1,y1}^T R_{x2,y2} v = R_{x2-x1,y2-y1} v` for axial, RoPE-Mixed and random
    /// frequencies, both layouts. Three f32 rotations of a vector of norm <= 4 with
    /// coefficients rounded once each: errors of a few 2^-24 * 4 per coordinate; 1e-5 allows it.
    #[test]
    fn relativity_2d(
        kind in 0u8..3,
        layout_index in 0usize..2,
        p in prop::array::uniform4(-40.0f64..40.0),
        seed in 0u64..1000,
    ) {
        let rope = rope_2d(kind, LAYOUTS[layout_index], seed);
        let v = data(16, seed + 1);
        let at = |x: f64, y: f64| rope.table(&NdPositions::from_rows(&[[x, y]]).unwrap()).unwrap();
        let forward = rotate_rows(&at(p[2], p[3]), 16, &v, Direction::Forward);
        let lhs = rotate_rows(&at(p[0], p[1]), 16, &forward, Direction::Inverse);
        let rhs = rotate_rows(&at(p[2] - p[0], p[3] - p[1]), 16, &v, Direction::Forward);
        for (a, b) in lhs.iter().zip(&rhs) {
            prop_assert!((a - b).abs() <= 1e-5, "{lhs:?} vs {rhs:?}");
        }
    }

    /// Invertibility: for generic frequencies (rank 2) the position is recovered from the
    /// rotation alone: each pair's angle is `atan2(s, c)` (no wrapping: |angle| < pi by the
    /// choice of ranges) and `(x, y)` solves the least-squares system `omega p = angle`.
    /// Angle errors ~1e-7 over |omega| >= 0.05: 1e-3 is ample; distinct positions 0.01 apart
    /// are therefore told apart.
    #[test]
    fn position_is_recovered(
        layout_index in 0usize..2,
        x in -6.0f64..6.0,
        y in -6.0f64..6.0,
        seed in 0u64..1000,
    ) {
        // |omega| in [0.05, 0.25] so |angle| <= 2 * 0.25 * 6 < pi.
        let omega: Vec<f64> = data(16, seed)
            .iter()
            .map(|&w| (0.05 + 0.2 * f64::from(w).abs()) * f64::from(w).signum())
            .collect();
        let rope = NdRope::new(16, LAYOUTS[layout_index], 2, omega.clone()).unwrap();
        let table = rope.table(&NdPositions::from_rows(&[[x, y]]).unwrap()).unwrap();
        let (c, s) = table.row(0).unwrap();
        let (mut a, mut b) = ([[0.0f64; 2]; 2], [0.0f64; 2]);
        for i in 0..8 {
            let (ca, sb) = match LAYOUTS[layout_index] {
                Layout::Interleaved => (c[2 * i], s[2 * i + 1]),
                Layout::Half => (c[i], s[i + 8]),
            };
            let angle = f64::from(sb).atan2(f64::from(ca));
            let w = [omega[2 * i], omega[2 * i + 1]];
            for r in 0..2 {
                for col in 0..2 {
                    a[r][col] += w[r] * w[col];
                }
                b[r] += w[r] * angle;
            }
        }
        let det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
        prop_assume!(det.abs() > 1e-3);
        let rx = (b[0] * a[1][1] - b[1] * a[0][1]) / det;
        let ry = (a[0][0] * b[1] - a[1][0] * b[0]) / det;
        prop_assert!((rx - x).abs() < 1e-3 && (ry - y).abs() < 1e-3, "({rx}, {ry}) vs ({x}, {y})");
    }
}

/// Axial 2D also recovers positions pair by pair: pair 0 of each half has frequency 1, so its
/// angle is the coordinate itself (for |coordinate| < pi).
#[test]
fn axial_2d_first_pairs_read_off_the_position() {
    for layout in LAYOUTS {
        let rope = NdRope::axial_2d(8, 8, 10_000.0, layout).unwrap();
        let table = rope
            .table(&NdPositions::from_rows(&[[1.25, -2.5]]).unwrap())
            .unwrap();
        let (c, s) = table.row(0).unwrap();
        let angle = |i: usize| {
            let (a, b) = match layout {
                Layout::Interleaved => (2 * i, 2 * i + 1),
                Layout::Half => (i, i + 4),
            };
            f64::from(s[b]).atan2(f64::from(c[a]))
        };
        assert!((angle(0) - 1.25).abs() < 1e-6);
        assert!((angle(2) + 2.5).abs() < 1e-6);
    }
}

/// Seed 003's argument: flattening an `h x h` grid to `x h + y` puts (x+1, y) at distance h and
/// (x, y+1) at distance 1, so a 1D RoPE scores them differently from (x, y); axial 2D scores them
/// equally. q = k with every pair of norm 1 (`(1, 0)`) makes the score isotropic:
/// `<R_p q, R_p' q> = sum_i cos(angle_i(p' - p))`.
#[test]
fn flattening_breaks_isotropy_axial_2d_keeps_it() {
    let (h, head_dim) = (8usize, 32usize);
    for layout in LAYOUTS {
        let mut q = vec![0.0f32; head_dim];
        for i in 0..head_dim / 2 {
            q[layout.pair(i, head_dim).0] = 1.0;
        }
        let (x, y) = (3usize, 4usize);
        let cells = [(x, y), (x + 1, y), (x, y + 1)];

        let rope_1d = Rope::new(head_dim, head_dim, 10_000.0, layout).unwrap();
        let flat: Vec<f64> = cells.iter().map(|&(a, b)| (a * h + b) as f64).collect();
        let table_1d =
            CosSin::from_positions(layout, rope_1d.inv_freq(), 1.0, 3, |r| flat[r]).unwrap();

        let rope_2d = NdRope::axial_2d(head_dim, head_dim, 10_000.0, layout).unwrap();
        let rows: Vec<[f64; 2]> = cells.iter().map(|&(a, b)| [a as f64, b as f64]).collect();
        let table_2d = rope_2d
            .table(&NdPositions::from_rows(&rows).unwrap())
            .unwrap();

        let scores = |table: &CosSin| {
            let rotated = rotate_rows(table, head_dim, &q.repeat(3), Direction::Forward);
            let at = |r: usize| &rotated[r * head_dim..(r + 1) * head_dim];
            (dot(at(0), at(1)), dot(at(0), at(2)))
        };
        let (down_1d, right_1d) = scores(&table_1d);
        let (down_2d, right_2d) = scores(&table_2d);
        // 1D: sum_i cos(8 theta_i) = 10.5 vs sum_i cos(theta_i) = 15.3 for r = 32.
        assert!((down_1d - right_1d).abs() > 1.0, "{down_1d} vs {right_1d}");
        // 2D: the same multiset of cosines; f32 rounding only.
        assert!((down_2d - right_2d).abs() < 1e-5, "{down_2d} vs {right_2d}");
    }
}

// ---- reductions to 1D and layouts ----------------------------------------------------------

/// Axial with one axis is 1D RoPE: the same table, bit for bit, and the same rotation.
#[test]
fn axial_with_one_axis_is_1d() {
    for layout in LAYOUTS {
        let rope_1d = Rope::new(24, 16, 10_000.0, layout).unwrap();
        let nd = NdRope::axial(24, layout, &[16], AxisSchedule::Lang { base: 10_000.0 }).unwrap();
        let positions: Vec<f64> = (0..50).map(|p| p as f64 * 3.0).collect();
        let table_nd = nd
            .table(&NdPositions::new(1, positions.clone()).unwrap())
            .unwrap();
        let table_1d =
            CosSin::from_positions(layout, rope_1d.inv_freq(), 1.0, 50, |r| positions[r]).unwrap();
        assert_eq!(table_nd, table_1d);

        let ints: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
        let shape = Shape::head_major(1, 2, 50, 24);
        let x = data(2 * 50 * 24, 3);
        let (mut a, mut b) = (x.clone(), x.clone());
        rope_1d
            .apply_inplace(
                &mut a,
                shape,
                Positions::Explicit(&ints),
                Direction::Forward,
            )
            .unwrap();
        let nd_positions = NdPositions::new(1, positions).unwrap();
        nd.apply_inplace(&mut b, shape, &nd_positions, Direction::Forward)
            .unwrap();
        assert_eq!(a, b);
    }
}

/// M-RoPE with the same position on every axis (text tokens) is 1D RoPE, bit for bit.
#[test]
fn mrope_with_equal_axes_is_1d() {
    for layout in LAYOUTS {
        let mrope = NdRope::mrope(32, layout, 1e6, &[4, 6, 6]).unwrap();
        let rope_1d = Rope::new(32, 32, 1e6, layout).unwrap();
        let positions: Vec<f64> = (0..40).map(|p| (p * 7) as f64).collect();
        let table = mrope
            .table(&NdPositions::shared(3, &positions).unwrap())
            .unwrap();
        let expected =
            CosSin::from_positions(layout, rope_1d.inv_freq(), 1.0, 40, |r| positions[r]).unwrap();
        assert_eq!(table, expected);
    }
}

/// Each M-RoPE section follows its own axis: moving only the height coordinate changes only the
/// middle section's pairs.
#[test]
fn mrope_sections_follow_their_axis() {
    let rope = NdRope::mrope(32, Layout::Half, 10_000.0, &[4, 6, 6]).unwrap();
    let p = NdPositions::from_rows(&[[5.0, 5.0, 5.0], [5.0, 9.0, 5.0]]).unwrap();
    for i in 0..16 {
        let moved = rope.angle(p.row(0).unwrap(), i) != rope.angle(p.row(1).unwrap(), i);
        assert_eq!(moved, (4..10).contains(&i), "pair {i}");
    }
}

/// The two layouts are the same rotation up to the coordinate permutation, for N-D too:
/// `rotate_half(P x) = P rotate_interleaved(x)`.
#[test]
fn layouts_agree_up_to_permutation() {
    let head_dim = 24;
    let grid = NdPositions::grid_3d(2, 3, 4).unwrap();
    let rows = grid.rows();
    let make = |layout| {
        NdRope::axial(
            head_dim,
            layout,
            &[4, 8, 8],
            AxisSchedule::Lang { base: 100.0 },
        )
    };
    let inter = make(Layout::Interleaved).unwrap();
    let half = make(Layout::Half).unwrap();
    let perm = pair_permutation(head_dim, 20, Layout::Interleaved, Layout::Half).unwrap();
    let x = data(rows * head_dim, 9);
    let permute = |v: &[f32]| -> Vec<f32> {
        v.chunks(head_dim)
            .flat_map(|row| perm.iter().map(move |&j| row[j]))
            .collect()
    };
    let shape = Shape::head_major(1, 1, rows, head_dim);
    let mut a = vec![0.0; x.len()];
    inter
        .apply(&x, &mut a, shape, &grid, Direction::Forward)
        .unwrap();
    let mut b = vec![0.0; x.len()];
    half.apply(&permute(&x), &mut b, shape, &grid, Direction::Forward)
        .unwrap();
    assert_eq!(permute(&a), b);
}

// ---- grids and errors ----------------------------------------------------------------------

#[test]
fn grids_are_row_major() {
    let g = NdPositions::grid_2d(2, 3).unwrap();
    assert_eq!(g.axes(), 2);
    assert_eq!(
        g.as_slice(),
        &[0., 0., 0., 1., 0., 2., 1., 0., 1., 1., 1., 2.]
    );
    let v = NdPositions::grid_3d(2, 2, 2).unwrap();
    assert_eq!(v.rows(), 8);
    assert_eq!(v.row(5).unwrap(), &[1., 0., 1.]);
    let p = NdPositions::pixel_grid(&[3, 1]).unwrap();
    assert_eq!(p.as_slice(), &[-1., -1., 0., -1., 1., -1.]);
    // A 64 x 64 patch grid in one call: patch r * 64 + c at (r, c).
    let big = NdPositions::grid_2d(64, 64).unwrap();
    assert_eq!(big.rows(), 4096);
    assert_eq!(big.row(64 * 17 + 5).unwrap(), &[17., 5.]);
}

#[test]
fn bad_input_is_a_typed_error() {
    assert!(matches!(
        NdPositions::new(2, vec![1.0; 3]),
        Err(RopeError::NdPositions(_))
    ));
    assert!(matches!(
        NdPositions::new(2, vec![1.0, f64::NAN]),
        Err(RopeError::NonFinitePosition { index: 1, .. })
    ));
    assert!(matches!(
        NdPositions::grid(&[]),
        Err(RopeError::NdPositions(_))
    ));
    assert!(matches!(
        NdRope::axial(16, Layout::Half, &[6, 3], AxisSchedule::Lang { base: 10.0 }),
        Err(RopeError::InvalidRotaryDim(3))
    ));
    assert!(matches!(
        NdRope::axial_2d(16, 6, 10.0, Layout::Half),
        Err(RopeError::InvalidRotaryDim(6))
    ));
    assert!(matches!(
        NdRope::mrope(16, Layout::Half, 1e4, &[4, 6, 6]),
        Err(RopeError::RotaryDimTooLarge { .. })
    ));
    assert!(matches!(
        NdRope::mrope(32, Layout::Half, 1e4, &[4, 0, 6]),
        Err(RopeError::NdFrequencies(_))
    ));
    assert!(matches!(
        NdRope::new(16, Layout::Half, 2, vec![1.0; 5]),
        Err(RopeError::NdFrequencies(_))
    ));
    let rope = NdRope::axial_2d(8, 8, 10.0, Layout::Half).unwrap();
    let three_axes = NdPositions::grid_3d(1, 1, 2).unwrap();
    assert!(matches!(
        rope.table(&three_axes),
        Err(RopeError::NdPositions(_))
    ));
    let mut x = vec![0.0f32; 2 * 8];
    let wrong_rows = NdPositions::grid_2d(1, 3).unwrap();
    assert!(matches!(
        rope.apply_inplace(
            &mut x,
            Shape::head_major(1, 1, 2, 8),
            &wrong_rows,
            Direction::Forward
        ),
        Err(RopeError::TableMismatch(_))
    ));
}
