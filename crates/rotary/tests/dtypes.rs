//! f16 and bf16 storage against f32.
//!
//! 1. The contract: half-precision data are widened exactly, rotated in f32 exactly as f32 data
//!    are, and rounded once (to nearest even) on store. So the f16 result equals the f32 result
//!    on the widened input, rounded to f16, bit for bit.
//! 2. Accuracy against f32 data: rounding f32 inputs to the format (unit roundoff `u_T`:
//!    2^-11 for f16, 2^-8 for bf16) perturbs each coordinate by at most `u_T |x_j|`, which a
//!    rotation carries to at most `u_T (|x_p| + |x_q|)` on each coordinate of pair `(p, q)`; the
//!    output rounding adds `u_T |y_j| <= u_T (|x_p| + |x_q|)`; the f32 arithmetic of both paths
//!    adds `3 u_f32 (|x_p| + |x_q|)` each. Tolerance: `(2 u_T + 6 u_f32) (|x_p| + |x_q|)`, plus
//!    three half-spacings of the format's subnormals (two input roundings and one output
//!    rounding can be absolute there; 2^-25 each for f16, far below anything for bf16).

mod common;

use common::{index, pos_spec, Geometry, PosSpec, Rng, U_F32};
use half::{bf16, f16};
use proptest::prelude::*;
use rotary::{Direction, Element, Rope};

/// Unit roundoff and half the smallest subnormal of a storage format.
struct Format {
    unit_roundoff: f64,
    half_min_subnormal: f64,
}

const F16: Format = Format {
    unit_roundoff: 1.0 / 2048.0,
    half_min_subnormal: 1.0 / (1u64 << 25) as f64,
};

const BF16: Format = Format {
    unit_roundoff: 1.0 / 256.0,
    half_min_subnormal: 0.0,
};

fn case() -> impl Strategy<Value = (Geometry, PosSpec, bool, bool, u64)> {
    common::geometry().prop_flat_map(|g| {
        (
            Just(g),
            pos_spec(g.shape.batch, g.shape.seq),
            any::<bool>(),
            any::<bool>(),
            any::<u64>(),
        )
    })
}

/// Rotates `x` with `rope` in place or out of place.
fn run<T: Element>(
    rope: &Rope,
    g: &Geometry,
    pos: &PosSpec,
    direction: Direction,
    out_of_place: bool,
    x: &[T],
) -> Vec<T> {
    if out_of_place {
        let mut y = vec![T::default(); x.len()];
        rope.apply(x, &mut y, g.shape, pos.positions(), direction)
            .unwrap();
        y
    } else {
        let mut y = x.to_vec();
        rope.apply_inplace(&mut y, g.shape, pos.positions(), direction)
            .unwrap();
        y
    }
}

/// Both checks of the module docs for one format.
fn check_format<T: Element>(
    format: &Format,
    (g, pos, inverse, out_of_place, seed): &(Geometry, PosSpec, bool, bool, u64),
) -> Result<(), TestCaseError> {
    let shape = g.shape;
    let rope = Rope::new(shape.head_dim, g.rotary_dim, 10_000.0, g.layout).unwrap();
    let direction = if *inverse {
        Direction::Inverse
    } else {
        Direction::Forward
    };
    let x32 = Rng::new(*seed).data(common::len(&shape));
    let y32 = run(&rope, g, pos, direction, *out_of_place, &x32);

    let xt: Vec<T> = x32.iter().map(|&v| T::from_f32(v)).collect();
    let yt = run(&rope, g, pos, direction, *out_of_place, &xt);

    // 1. f32 arithmetic on the widened input, rounded once.
    let widened: Vec<f32> = xt.iter().map(|v| v.to_f32()).collect();
    let y_widened = run(&rope, g, pos, direction, *out_of_place, &widened);
    for (e, (got, want)) in yt.iter().zip(&y_widened).enumerate() {
        let want = T::from_f32(*want);
        prop_assert_eq!(
            got.to_f32().to_bits(),
            want.to_f32().to_bits(),
            "element {}",
            e
        );
    }

    // 2. Against the f32 path on the unrounded data.
    let r = g.rotary_dim;
    let k = 2.0 * format.unit_roundoff + 6.0 * U_F32;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for s in 0..shape.seq {
                let at = |j| index(&shape, b, h, s, j);
                for i in 0..r / 2 {
                    let (p, q) = common::pair(g.layout, i, r);
                    let scale = f64::from(x32[at(p)].abs()) + f64::from(x32[at(q)].abs());
                    let tol = k * scale + 3.0 * format.half_min_subnormal;
                    for j in [p, q] {
                        let (got, want) = (f64::from(yt[at(j)].to_f32()), f64::from(y32[at(j)]));
                        prop_assert!(
                            (got - want).abs() <= tol,
                            "b{b} h{h} s{s} j{j}: {got} vs f32 {want}, tol {tol}"
                        );
                    }
                }
                for j in r..shape.head_dim {
                    prop_assert_eq!(yt[at(j)].to_f32().to_bits(), xt[at(j)].to_f32().to_bits());
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn f16_against_f32(c in case()) {
        check_format::<f16>(&F16, &c)?;
    }

    #[test]
    fn bf16_against_f32(c in case()) {
        check_format::<bf16>(&BF16, &c)?;
    }
}
