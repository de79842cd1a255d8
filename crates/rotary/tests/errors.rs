//! Bad arguments give typed errors, never panics: one test per kind of mistake, then a
//! property test that throws arbitrary shapes, lengths, positions and parameters at the public
//! functions and only asks that they return (`Ok` or `Err`) without panicking.

use proptest::prelude::*;
use rotary::analysis::attention_map::scores_against_row;
use rotary::analysis::decay::{relative_bounds, scores_by_distance};
use rotary::nd::{AxisSchedule, NdPositions, NdRope};
use rotary::{
    convert_projection, inv_freqs, pair_permutation, rotate, rotate_inplace, rotate_qk_inplace,
    CosSin, Direction, Layout, Order, Positions, Rope, RopeError, RopeSpec, Shape, Xpos,
    MAX_ROTARY_DIM,
};
use serde_json::json;

const FWD: Direction = Direction::Forward;
const IL: Layout = Layout::Interleaved;

fn rope64() -> Rope {
    Rope::new(64, 32, 10_000.0, IL).unwrap()
}

/// Coefficients for `rows` positions of a 32-dim rotation.
fn table(rows: usize) -> CosSin {
    let inv_freq = inv_freqs(32, 10_000.0).unwrap();
    CosSin::from_positions(IL, &inv_freq, 1.0, rows, |p| p as f64).unwrap()
}

#[test]
fn rotary_dims_must_be_even_and_non_zero() {
    for r in [0, 1, 3, 63] {
        let want = RopeError::InvalidRotaryDim(r);
        assert_eq!(Rope::new(64, r, 10_000.0, IL).unwrap_err(), want);
        assert_eq!(inv_freqs(r, 10_000.0).unwrap_err(), want);
        assert_eq!(pair_permutation(64, r, IL, Layout::Half).unwrap_err(), want);
        let w = vec![0f32; 64];
        assert_eq!(
            convert_projection(&w, 1, 1, 64, r, IL, Layout::Half).unwrap_err(),
            want
        );
        assert_eq!(
            CosSin::from_angles(IL, r, 1, 1.0, |_, _| 0.0).unwrap_err(),
            want
        );
    }
    assert_eq!(
        Rope::from_inv_freq(64, IL, vec![], 1.0).unwrap_err(),
        RopeError::InvalidRotaryDim(0)
    );
}

#[test]
fn rotary_dims_above_head_dim() {
    let want = RopeError::RotaryDimTooLarge {
        rotary_dim: 66,
        head_dim: 64,
    };
    assert_eq!(Rope::new(64, 66, 10_000.0, IL).unwrap_err(), want);
    assert_eq!(
        Rope::from_inv_freq(64, IL, vec![0.5; 33], 1.0).unwrap_err(),
        want
    );
    assert_eq!(
        pair_permutation(64, 66, IL, Layout::Half).unwrap_err(),
        want
    );
    // A table rotating 32 dims applied to 30-dim heads.
    let t = table(2);
    let mut x = vec![0f32; 2 * 30];
    assert_eq!(
        rotate_inplace(&mut x, Shape::head_major(1, 1, 2, 30), t.view(), FWD).unwrap_err(),
        RopeError::RotaryDimTooLarge {
            rotary_dim: 32,
            head_dim: 30
        }
    );
}

#[test]
fn bad_bases() {
    for base in [
        0.0,
        -0.0,
        -1.0,
        -1e4,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        for result in [
            inv_freqs(64, base).map(|_| ()),
            Rope::new(64, 64, base, IL).map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(RopeError::InvalidBase(b)) if b.to_bits() == base.to_bits()),
                "base {base}: {result:?}"
            );
        }
    }
}

#[test]
fn slice_length_mismatch() {
    let rope = rope64();
    let shape = Shape::head_major(2, 3, 4, 64);
    let n = 2 * 3 * 4 * 64;
    let (good, mut good_mut) = (vec![0f32; n], vec![0f32; n]);
    let (short, mut short_mut) = (vec![0f32; n - 1], vec![0f32; n - 1]);
    let mismatch = |what, got| RopeError::LengthMismatch {
        what,
        shape: [2, 3, 4, 64],
        expected: n,
        got,
    };
    let p = Positions::START;
    assert_eq!(
        rope.apply_inplace(&mut short_mut, shape, p, FWD),
        Err(mismatch("x", n - 1))
    );
    assert_eq!(
        rope.apply(&short, &mut good_mut, shape, p, FWD),
        Err(mismatch("src", n - 1))
    );
    assert_eq!(
        rope.apply(&good, &mut short_mut, shape, p, FWD),
        Err(mismatch("dst", n - 1))
    );
    let mut q = vec![0f32; n];
    assert_eq!(
        rope.apply_qk_inplace(&mut q, shape, &mut short_mut, shape, p, FWD),
        Err(mismatch("k", n - 1))
    );
    assert_eq!(
        rope.apply_qk_inplace(&mut short_mut, shape, &mut q, shape, p, FWD),
        Err(mismatch("q", n - 1))
    );
    let t = table(4);
    assert_eq!(
        rotate_inplace(&mut short_mut, shape, t.view(), FWD),
        Err(mismatch("x", n - 1))
    );
    assert_eq!(
        rotate(&good, &mut short_mut, shape, t.view(), FWD),
        Err(mismatch("dst", n - 1))
    );
    assert_eq!(
        rotate_qk_inplace(&mut q, shape, &mut short_mut, shape, t.view(), FWD),
        Err(mismatch("k", n - 1))
    );
}

#[test]
fn head_dim_mismatch() {
    let rope = rope64();
    let shape = Shape::head_major(1, 2, 3, 48);
    let mut x = vec![0f32; 2 * 3 * 48];
    let want = |what| RopeError::HeadDimMismatch {
        what,
        expected: 64,
        got: 48,
    };
    assert_eq!(
        rope.apply_inplace(&mut x, shape, Positions::START, FWD),
        Err(want("x"))
    );
    let src = x.clone();
    assert_eq!(
        rope.apply(&src, &mut x, shape, Positions::START, FWD),
        Err(want("src"))
    );
    let mut k = x.clone();
    assert_eq!(
        rope.apply_qk_inplace(&mut x, shape, &mut k, shape, Positions::START, FWD),
        Err(want("q"))
    );
}

#[test]
fn qk_mismatches() {
    let rope = rope64();
    let q_shape = Shape::head_major(2, 4, 3, 64);
    let cases = [
        (
            "batch",
            Shape {
                batch: 1,
                ..q_shape
            },
            2,
            1,
        ),
        ("seq", Shape { seq: 5, ..q_shape }, 3, 5),
        (
            "head dim",
            Shape {
                head_dim: 32,
                ..q_shape
            },
            64,
            32,
        ),
        (
            "order",
            Shape {
                order: Order::TokenMajor,
                ..q_shape
            },
            Order::HeadMajor as usize,
            Order::TokenMajor as usize,
        ),
    ];
    let t = table(3);
    for (what, k_shape, qv, kv) in cases {
        let mut q = vec![0f32; 2 * 4 * 3 * 64];
        let mut k = vec![0f32; k_shape.dims().iter().product()];
        let want = RopeError::QkMismatch { what, q: qv, k: kv };
        assert_eq!(
            rope.apply_qk_inplace(&mut q, q_shape, &mut k, k_shape, Positions::START, FWD),
            Err(want.clone())
        );
        assert_eq!(
            rotate_qk_inplace(&mut q, q_shape, &mut k, k_shape, t.view(), FWD),
            Err(want)
        );
    }
}

#[test]
fn explicit_positions_of_the_wrong_length() {
    let rope = rope64();
    let shape = Shape::token_major(2, 3, 1, 64);
    let mut x = vec![0f32; 2 * 3 * 64];
    for len in [0, 2, 4, 5, 7] {
        let want = RopeError::PositionsLength {
            seq: 3,
            batch_seq: 6,
            got: len,
        };
        let ints = vec![1u32; len];
        let reals = vec![1.0f64; len];
        assert_eq!(
            rope.apply_inplace(&mut x, shape, Positions::Explicit(&ints), FWD),
            Err(want.clone())
        );
        assert_eq!(
            rope.apply_inplace(&mut x, shape, Positions::Fractional(&reals), FWD),
            Err(want.clone())
        );
        assert_eq!(
            rope.coefficients(Positions::Explicit(&ints), 2, 3)
                .unwrap_err(),
            want
        );
    }
}

#[test]
fn non_finite_positions() {
    let rope = rope64();
    let shape = Shape::head_major(1, 1, 3, 64);
    let mut x = vec![0f32; 3 * 64];
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let p = [0.0, bad, 2.0];
        let result = rope.apply_inplace(&mut x, shape, Positions::Fractional(&p), FWD);
        assert!(
            matches!(result, Err(RopeError::NonFinitePosition { index: 1, value }) if value.to_bits() == bad.to_bits()),
            "{result:?}"
        );
    }
    // A finite position whose angle overflows f64.
    let fast = Rope::from_inv_freq(64, IL, vec![10.0; 4], 1.0).unwrap();
    let result = fast.apply_inplace(
        &mut x,
        shape,
        Positions::Fractional(&[0.0, 1.0, 1e308]),
        FWD,
    );
    assert!(
        matches!(result, Err(RopeError::NonFinite { what: "angle", .. })),
        "{result:?}"
    );
}

#[test]
fn tables_with_the_wrong_row_count() {
    let shape = Shape::head_major(2, 1, 3, 32);
    let mut x = vec![0f32; 2 * 3 * 32];
    for rows in [0, 2, 4, 5, 7] {
        let t = table(rows);
        let result = rotate_inplace(&mut x, shape, t.view(), FWD);
        assert!(
            matches!(result, Err(RopeError::TableMismatch(_))),
            "{rows}: {result:?}"
        );
        let src = x.clone();
        let result = rotate(&src, &mut x, shape, t.view(), FWD);
        assert!(
            matches!(result, Err(RopeError::TableMismatch(_))),
            "{rows}: {result:?}"
        );
    }
    // Both accepted counts work: seq rows, batch * seq rows.
    for rows in [3, 6] {
        rotate_inplace(&mut x, shape, table(rows).view(), FWD).unwrap();
    }
    assert!(matches!(
        table(3).gather([0, 3].into_iter()),
        Err(RopeError::TableMismatch(_))
    ));
}

#[test]
fn shapes_that_overflow_or_outsize_their_slice() {
    let rope = rope64();
    let t = table(1);
    let huge = [
        Shape::head_major(usize::MAX, 2, 1, 64),
        Shape::token_major(1 << 20, 1 << 20, 1 << 20, 64),
        Shape::head_major(3, usize::MAX / 2, 1, 64),
    ];
    for shape in huge {
        let want = RopeError::ShapeOverflow(shape.dims());
        let mut empty: Vec<f32> = Vec::new();
        let mut other: Vec<f32> = Vec::new();
        assert_eq!(shape.elements(), Err(want.clone()));
        assert_eq!(
            rope.apply_inplace(&mut empty, shape, Positions::START, FWD),
            Err(want.clone())
        );
        assert_eq!(
            rope.apply(&[], &mut empty, shape, Positions::START, FWD),
            Err(want.clone())
        );
        assert_eq!(
            rope.apply_qk_inplace(&mut empty, shape, &mut other, shape, Positions::START, FWD),
            Err(want.clone())
        );
        assert_eq!(
            rotate_inplace(&mut empty, shape, t.view(), FWD),
            Err(want.clone())
        );
    }
    // Products that fit in usize but describe far more data than given: the length error comes
    // first, before any table is built for 2^40 positions.
    for (shape, positions) in [
        (Shape::head_major(1, 1, 1 << 40, 64), Positions::START),
        (
            Shape::head_major(1, 1, 1 << 40, 64),
            Positions::Range { offset: 1 << 50 },
        ),
        (
            Shape::token_major(1 << 30, 1 << 20, 1, 64),
            Positions::START,
        ),
    ] {
        let mut empty: Vec<f32> = Vec::new();
        let result = rope.apply_inplace(&mut empty, shape, positions, FWD);
        assert!(
            matches!(result, Err(RopeError::LengthMismatch { got: 0, .. })),
            "{result:?}"
        );
        let mut q: Vec<f32> = Vec::new();
        let result = rope.apply_qk_inplace(&mut q, shape, &mut empty, shape, positions, FWD);
        assert!(
            matches!(result, Err(RopeError::LengthMismatch { got: 0, .. })),
            "{result:?}"
        );
    }
}

#[test]
fn non_finite_frequencies_and_amplitudes() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let result = Rope::from_inv_freq(64, IL, vec![1.0, 0.5, bad], 1.0);
        assert!(
            matches!(
                result,
                Err(RopeError::NonFinite {
                    what: "inverse frequency",
                    index: 2,
                    ..
                })
            ),
            "{result:?}"
        );
        let result = Rope::from_inv_freq(64, IL, vec![1.0, 0.5], bad);
        assert!(
            matches!(
                result,
                Err(RopeError::NonFinite {
                    what: "amplitude",
                    ..
                })
            ),
            "{result:?}"
        );
        let result = CosSin::from_angles(IL, 4, 2, bad, |_, _| 0.0);
        assert!(
            matches!(result, Err(RopeError::NonFinite { .. })),
            "{result:?}"
        );
        let result = CosSin::from_angles(
            IL,
            4,
            2,
            1.0,
            move |row, i| if row == 1 && i == 1 { bad } else { 0.0 },
        );
        assert!(
            matches!(
                result,
                Err(RopeError::NonFinite {
                    what: "angle",
                    index: 1,
                    ..
                })
            ),
            "{result:?}"
        );
    }
}

#[test]
fn projection_of_the_wrong_size() {
    let w = vec![0f32; 2 * 8 * 5];
    for (heads, head_dim, row_len) in [(2, 8, 4), (3, 8, 5), (2, 6, 5), (usize::MAX, 8, 5)] {
        let result = convert_projection(&w, row_len, heads, head_dim, 4, IL, Layout::Half);
        assert!(
            matches!(result, Err(RopeError::Projection(_))),
            "{result:?}"
        );
    }
    // An empty projection of zero heads is fine whatever the head dim; it builds no
    // permutation of `head_dim` entries.
    let empty: [f32; 0] = [];
    let result = convert_projection(&empty, 5, 0, 1 << 40, 4, IL, Layout::Half);
    assert_eq!(result, Ok(Vec::new()));
    // A permutation too large to allocate is an error, not an abort.
    let result = pair_permutation(usize::MAX, 4, IL, Layout::Half);
    assert!(
        matches!(result, Err(RopeError::Allocation { .. })),
        "{result:?}"
    );
}

/// `rotary dims` above [`MAX_ROTARY_DIM`], whichever function sizes a buffer by them.
fn is_too_large(result: Result<impl std::fmt::Debug, RopeError>) -> bool {
    matches!(result, Err(RopeError::TooLarge { .. }))
}

/// Rotary dims from a config or an option (2^40, usize::MAX - 1) once panicked on capacity
/// overflow or aborted on allocation; they are refused before anything is allocated.
#[test]
fn rotary_dims_above_the_cap_are_too_large() {
    // Multiples of 4, as the 2D forms need.
    for r in [MAX_ROTARY_DIM + 4, 1 << 40, usize::MAX - 3] {
        let want = RopeError::TooLarge {
            what: "rotary dims",
            size: r as u128,
            limit: MAX_ROTARY_DIM,
        };
        assert_eq!(inv_freqs(r, 10_000.0).unwrap_err(), want);
        assert_eq!(Rope::new(r, r, 10_000.0, IL).unwrap_err(), want);
        assert_eq!(
            CosSin::from_angles(IL, r, 1, 1.0, |_, _| 0.0).unwrap_err(),
            want
        );
        assert_eq!(pair_permutation(r, r, IL, Layout::Half).unwrap_err(), want);
        assert!(is_too_large(Xpos::new(r, r, 10_000.0, IL, 512.0)));
        assert!(is_too_large(NdRope::axial_2d(r, r, 100.0, IL)));
        assert!(is_too_large(NdRope::rope_mixed_2d(r, r, IL, 10.0, 0.3)));
        assert!(is_too_large(NdRope::mrope(r, IL, 1e4, &[r / 2])));
    }
    // The cap itself is accepted.
    assert_eq!(inv_freqs(MAX_ROTARY_DIM, 10_000.0).unwrap().len(), 1 << 15);
    // Sections whose sum overflows usize, and frequency matrices of too many entries.
    assert!(is_too_large(NdRope::axial(
        64,
        IL,
        &[usize::MAX - 1, 4],
        AxisSchedule::Lang { base: 100.0 }
    )));
    assert!(is_too_large(NdRope::mrope(64, IL, 1e4, &[usize::MAX, 2])));
    let wide = vec![2usize; 2048];
    assert!(is_too_large(NdRope::axial(
        4096,
        IL,
        &wide,
        AxisSchedule::Lang { base: 100.0 }
    )));
    // A table whose row count times its width overflows.
    assert!(is_too_large(CosSin::from_angles(
        IL,
        64,
        usize::MAX / 8,
        1.0,
        |_, _| 0.0
    )));
}

/// A config's `head_dim` of u64::MAX panicked on overflow in `rope freqs`; a rotary dim above
/// the cap is refused naming the field it came from.
#[test]
fn hf_configs_with_absurd_head_dims_name_the_field() {
    for (config, field) in [
        (json!({"head_dim": u64::MAX}), "head_dim"),
        (json!({"head_dim": 1u64 << 40}), "head_dim"),
        (
            json!({"hidden_size": u64::MAX - 1, "num_attention_heads": 1}),
            "hidden_size",
        ),
    ] {
        let err = RopeSpec::from_hf_config(&config).unwrap_err();
        assert_eq!(err.field(), field, "{config}: {err}");
        assert!(err.to_string().contains("limit"), "{err}");
    }
    // A spec built by hand is checked too.
    let mut spec = RopeSpec::from_hf_config(&json!({"head_dim": 64})).unwrap();
    spec.dim = usize::MAX;
    assert!(is_too_large(spec.freqs(None)));
}

/// YaRN's `beta_fast` and `beta_slow` (and DeepSeek's mscales) were accepted when negative,
/// giving a ramp with no meaning; 0 and null still mean the default, as in transformers.
#[test]
fn negative_yarn_parameters_are_refused() {
    let yarn = |key: &str, value: f64| {
        let mut params = json!({"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 4096});
        params[key] = json!(value);
        json!({"head_dim": 64, "rope_scaling": params})
    };
    for key in ["beta_fast", "beta_slow", "mscale", "mscale_all_dim"] {
        let err = RopeSpec::from_hf_config(&yarn(key, -1.0)).unwrap_err();
        assert_eq!(err.field(), format!("rope_scaling.{key}"), "{err}");
        assert!(err.to_string().contains(">= 0"), "{err}");
        let zero = RopeSpec::from_hf_config(&yarn(key, 0.0)).unwrap();
        let mut null = yarn(key, 0.0);
        null["rope_scaling"][key] = json!(null);
        assert_eq!(zero, RopeSpec::from_hf_config(&null).unwrap());
    }
}

/// `relative_bounds` and `scores_by_distance` with a distance of usize::MAX panicked on
/// capacity overflow (`0..=usize::MAX` collected); results too large to hold are errors.
#[test]
fn analysis_sizes_that_cannot_be_held_are_errors() {
    let f = inv_freqs(8, 10_000.0).unwrap();
    assert!(is_too_large(relative_bounds(&f, usize::MAX)));
    // 2^60 f64 is more bytes than an allocation may hold: refused, not attempted.
    let result = relative_bounds(&f, 1 << 60);
    assert!(
        matches!(result, Err(RopeError::Allocation { .. })),
        "{result:?}"
    );
    let rope = Rope::new(8, 8, 10_000.0, IL).unwrap();
    let v = [1.0f32; 8];
    assert!(is_too_large(scores_by_distance(
        &rope,
        &v,
        &v,
        0,
        usize::MAX
    )));
    let result = scores_by_distance(&rope, &v, &v, 0, 1 << 60);
    assert!(
        matches!(
            result,
            Err(RopeError::TooLarge { .. } | RopeError::Allocation { .. })
        ),
        "{result:?}"
    );
    // Many rows are scored in blocks, the same as one block at a time.
    let table = CosSin::from_positions(IL, &f, 1.0, 3000, |r| r as f64).unwrap();
    let all = scores_against_row(&table, 8, &v, &v, 5).unwrap();
    assert_eq!(all.len(), 3000);
    for row in [0, 1023, 1024, 2999] {
        let pair = CosSin::from_positions(IL, &f, 1.0, 2, |r| [5.0, row as f64][r]).unwrap();
        let score = scores_against_row(&pair, 8, &v, &v, 0).unwrap()[1];
        assert!(
            (score - all[row]).abs() < 1e-12,
            "row {row}: {score} vs {}",
            all[row]
        );
    }
}

/// N-D positions whose coordinate count overflows or cannot be held are errors, not aborts.
#[test]
fn nd_positions_too_large_to_hold_are_errors() {
    assert!(is_too_large(NdPositions::shared(usize::MAX / 2, &[0.0; 4])));
    let result = NdPositions::grid_2d(1 << 31, 1 << 31);
    assert!(
        matches!(result, Err(RopeError::Allocation { .. })),
        "{result:?}"
    );
}

/// xPos built its q and k tables for every position a shape claimed before comparing the
/// shape with the data; the length error now comes first.
#[test]
fn xpos_checks_lengths_before_building_tables() {
    let xpos = Xpos::new(8, 8, 10_000.0, IL, 512.0).unwrap();
    let shape = Shape::head_major(1, 1, 1 << 40, 8);
    let (mut q, mut k) = (vec![0f32; 8], vec![0f32; 8]);
    let result = xpos.apply_qk_inplace(&mut q, shape, &mut k, shape, Positions::START, 0.0);
    assert!(
        matches!(result, Err(RopeError::LengthMismatch { got: 8, .. })),
        "{result:?}"
    );
}

/// The edges that once panicked: a rotation too wide for the table's minimum size, a range
/// running past `usize::MAX`, an empty call far out.
#[test]
fn edge_cases_return_normally() {
    // rotary dims 2^16: the table cap (64 MiB) holds fewer rows than the table's minimum size.
    let wide = Rope::new(1 << 16, 1 << 16, 10_000.0, IL).unwrap();
    assert!(wide.max_table_rows() < 256);
    let mut x = vec![0.5f32; 1 << 16];
    wide.apply_inplace(
        &mut x,
        Shape::head_major(1, 1, 1, 1 << 16),
        Positions::Range { offset: 3 },
        FWD,
    )
    .unwrap();
    let rope = rope64();
    let mut x = vec![0.5f32; 2 * 64];
    let shape = Shape::head_major(1, 1, 2, 64);
    for offset in [usize::MAX, usize::MAX - 1] {
        let result = rope.apply_inplace(&mut x, shape, Positions::Range { offset }, FWD);
        assert!(result.is_ok(), "{result:?}");
    }
    let mut empty: Vec<f32> = Vec::new();
    rope.apply_inplace(
        &mut empty,
        Shape::head_major(1, 1, 0, 64),
        Positions::Range { offset: usize::MAX },
        FWD,
    )
    .unwrap();
}

// ---- no panics on arbitrary input ---------------------------------------------------------

/// Dimensions from tiny to absurd.
fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..6,
        1 => Just(64usize),
        1 => Just(1usize << 33),
        1 => Just(usize::MAX / 3),
        1 => Just(usize::MAX),
    ]
}

fn real() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -10.0f64..1e6,
        1 => prop::sample::select(vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, -1e308, f64::MIN_POSITIVE]),
    ]
}

#[derive(Debug, Clone)]
enum Pos {
    Range(usize),
    Explicit(Vec<u32>),
    Fractional(Vec<f64>),
}

impl Pos {
    fn get(&self) -> Positions<'_> {
        match self {
            Pos::Range(offset) => Positions::Range { offset: *offset },
            Pos::Explicit(p) => Positions::Explicit(p),
            Pos::Fractional(p) => Positions::Fractional(p),
        }
    }
}

fn positions() -> impl Strategy<Value = Pos> {
    prop_oneof![
        prop_oneof![
            0usize..100,
            Just(usize::MAX),
            Just(usize::MAX - 3),
            Just(1usize << 40)
        ]
        .prop_map(Pos::Range),
        proptest::collection::vec(any::<u32>(), 0..12).prop_map(Pos::Explicit),
        proptest::collection::vec(real(), 0..12).prop_map(Pos::Fractional),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    (dim(), dim(), dim(), dim(), any::<bool>()).prop_map(|(batch, heads, seq, head_dim, tm)| {
        Shape {
            batch,
            heads,
            seq,
            head_dim,
            order: if tm {
                Order::TokenMajor
            } else {
                Order::HeadMajor
            },
        }
    })
}

/// A slice length: usually the right one when that is small, else small arbitrary lengths.
fn length_for(shape: Shape) -> impl Strategy<Value = usize> {
    let exact = shape.elements().ok().filter(|&n| n <= 4096);
    match exact {
        Some(n) => prop_oneof![3 => Just(n), 1 => 0usize..64].boxed(),
        None => (0usize..64).boxed(),
    }
}

fn call() -> impl Strategy<Value = (Shape, usize, Shape, usize, Pos, usize, usize, f64, bool)> {
    (shape(), shape()).prop_flat_map(|(qs, ks)| {
        (
            Just(qs),
            length_for(qs),
            Just(ks),
            length_for(ks),
            positions(),
            // Head dims: small, or too large for any allocation (a feasible but huge one, say
            // 2^33, would really be allocated by `pair_permutation`, which returns that many).
            prop_oneof![
                0usize..8,
                Just(64usize),
                Just(usize::MAX / 2),
                Just(usize::MAX)
            ],
            prop_oneof![0usize..8, Just(64usize)],
            real(),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn public_functions_never_panic(
        (q_shape, q_len, k_shape, k_len, pos, head_dim, rotary_dim, base, half) in call()
    ) {
        let layout = if half { Layout::Half } else { Layout::Interleaved };
        let direction = if base > 0.0 { Direction::Forward } else { Direction::Inverse };
        let mut q = vec![0.25f32; q_len];
        let mut k = vec![half::bf16::from_f32(0.5); k_len];
        let mut k32 = vec![0.5f32; k_len];
        let _ = pos.get().rows(q_shape.batch, q_shape.seq);
        let _ = pos.get().per_sequence(q_shape.batch, q_shape.seq);
        if let Ok(rope) = Rope::new(head_dim, rotary_dim, base, layout) {
            let _ = rope.apply_inplace(&mut q, q_shape, pos.get(), direction);
            let _ = rope.apply_inplace(&mut k, k_shape, pos.get(), direction);
            let src = q.clone();
            let _ = rope.apply(&src, &mut q, q_shape, pos.get(), direction);
            let _ = rope.apply(&src, &mut k32, q_shape, pos.get(), direction);
            let _ = rope.apply_qk_inplace(&mut q, q_shape, &mut k32, k_shape, pos.get(), direction);
            // Coefficients for a call's worth of tokens (callers ask for what they rotate).
            if q_shape.batch.saturating_mul(q_shape.seq) <= 4096 {
                let _ = rope.coefficients(pos.get(), q_shape.batch, q_shape.seq);
            }
            if let Ok(c) = rope.coefficients(pos.get(), 1, q_shape.seq.min(8)) {
                let _ = rotate_inplace(&mut q, q_shape, c.view(), direction);
                let _ = rotate(&src, &mut q, q_shape, c.view(), direction);
                let _ = rotate_qk_inplace(&mut q, q_shape, &mut k32, k_shape, c.view(), direction);
            }
        }
        if let Ok(inv_freq) = inv_freqs(rotary_dim, base) {
            let _ = Rope::from_inv_freq(head_dim, layout, inv_freq, base);
        }
        let _ = pair_permutation(head_dim, rotary_dim, layout, Layout::Half);
        let _ = convert_projection(&q, q_shape.seq, q_shape.heads, head_dim, rotary_dim, layout, Layout::Half);
        let _ = CosSin::from_angles(layout, rotary_dim, q_len, base, |row, i| (row * i) as f64 * base);
    }
}
