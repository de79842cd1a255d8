//! xPos: golden values from rotary-embedding-torch (`use_xpos=True`, fixture from
//! scripts/make_scaling_fixtures.py) and the relative property through the kernels.

use proptest::prelude::*;
use rotary::{CosSin, Direction, Layout, Positions, RopeError, Shape, Xpos};
use serde_json::Value;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// rotary-embedding-torch computes angles and scales in float32 and multiplies in float32;
/// ours rounds f64 coefficients once. Values are O(1) (|x| < 4, scales within [0.7, 1.4]), so
/// the difference is a few float32 ulps of the angle (up to 11 rad) times |x|: 2e-5 absolute.
#[test]
fn matches_rotary_embedding_torch() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/scaling/xpos.json"
    );
    let case: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let int = |k: &str| case[k].as_u64().unwrap() as usize;
    let (head_dim, heads, seq) = (int("head_dim"), int("heads"), int("seq"));
    assert_eq!(case["layout"], "interleaved");
    let xpos = Xpos::new(
        head_dim,
        int("rotary_dim"),
        case["base"].as_f64().unwrap(),
        Layout::Interleaved,
        case["scale_base"].as_f64().unwrap(),
    )
    .unwrap();
    assert_eq!(case["center"].as_f64().unwrap(), Xpos::default_center(seq));
    let shape = Shape::head_major(1, heads, seq, head_dim);
    let (mut q, mut k) = (floats(&case["q"]), floats(&case["k"]));
    xpos.apply_qk_inplace(
        &mut q,
        shape,
        &mut k,
        shape,
        Positions::START,
        Xpos::default_center(seq),
    )
    .unwrap();
    for (what, ours, theirs) in [
        ("q", &q, floats(&case["q_out"])),
        ("k", &k, floats(&case["k_out"])),
    ] {
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!((a - b).abs() <= 2e-5, "{what}[{i}]: {a} vs {b}");
        }
    }
}

fn score(q_table: &CosSin, k_table: &CosSin, q: &[f32], k: &[f32], d: usize) -> f64 {
    let rot = |t: &CosSin, x: &[f32]| {
        let mut out = vec![0.0f32; d];
        rotary::rotate(
            x,
            &mut out,
            Shape::head_major(1, 1, 1, d),
            t.view(),
            Direction::Forward,
        )
        .unwrap();
        out
    };
    let (a, b) = (rot(q_table, q), rot(k_table, k));
    a.iter()
        .zip(&b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `<q_m, k_n>` depends only on `n - m` (and not on the centre): shifting both positions
    /// by `s` changes nothing beyond rounding. Scaled coordinates stay below
    /// `sqrt(2) zeta_0^(-140/64) < 22`; each of the 16 products then carries an f32 error below
    /// `3 * 2^-24 * 22^2 < 1e-4`, so 5e-3 bounds a score's error. A wrong centre or sign moves
    /// scores by O(1).
    #[test]
    fn scores_depend_on_distance_only(
        q in prop::collection::vec(-1.0f32..1.0, 16),
        k in prop::collection::vec(-1.0f32..1.0, 16),
        m in 0u32..60,
        n in 0u32..60,
        shift in 0u32..60,
        center in -20.0f64..80.0,
        half in any::<bool>(),
    ) {
        let layout = if half { Layout::Half } else { Layout::Interleaved };
        let xpos = Xpos::new(16, 16, 10_000.0, layout, 64.0).unwrap();
        let tables = |p: u32, c: f64| xpos.tables(Positions::Explicit(&[p]), 1, 1, c).unwrap();
        let at = |m: u32, n: u32, c: f64| score(&tables(m, c).0, &tables(n, c).1, &q, &k, 16);
        let base = at(m, n, 30.0);
        let shifted = at(m + shift, n + shift, center);
        prop_assert!((base - shifted).abs() <= 5e-3, "{base} vs {shifted}");
    }
}

/// `zeta_i = (2i / d + 0.4) / 1.4`, all in (0, 1): a pair's factor `zeta_i^((m - n) / B)`
/// decays as the query moves past the key.
#[test]
fn zeta_is_the_papers() {
    let xpos = Xpos::new(8, 8, 10_000.0, Layout::Half, 512.0).unwrap();
    let zeta = xpos.zeta();
    // (2i/d + 0.4) / 1.4 for d = 8: 0.4/1.4, 0.65/1.4, 0.9/1.4, 1.15/1.4.
    let expected = [0.4 / 1.4, 0.65 / 1.4, 0.9 / 1.4, 1.15 / 1.4];
    for (a, b) in zeta.iter().zip(expected) {
        assert!((a - b).abs() < 1e-15);
    }
    assert!(zeta.iter().all(|&z| z > 0.0 && z < 1.0));
}

#[test]
fn bad_input_is_a_typed_error() {
    assert!(matches!(
        Xpos::new(8, 8, 10_000.0, Layout::Half, 0.0),
        Err(RopeError::InvalidBase(_))
    ));
    assert!(matches!(
        Xpos::new(8, 10, 10_000.0, Layout::Half, 512.0),
        Err(RopeError::RotaryDimTooLarge { .. })
    ));
    let xpos = Xpos::new(8, 8, 10_000.0, Layout::Half, 1e-3).unwrap();
    // k's magnitude zeta^(-10^5) overflows to infinity: reported, not written into a table.
    assert!(matches!(
        xpos.tables(Positions::Explicit(&[100]), 1, 1, 0.0),
        Err(RopeError::NonFinite { .. })
    ));
}
