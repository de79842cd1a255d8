//! The kernels against the paper's definition: `y = a R^d_{Theta,m} x` (eq. 15) with the dense
//! block-diagonal matrix built in f64 by the test, for every head of every token.
//!
//! Tolerance, per rotated coordinate `j` of pair `(p, q)`: `4 u |a| (|x_p| + |x_q|)` with
//! `u = 2^-24`. The kernel computes `x_p C + x_q S` in f32 from coefficients rounded once from
//! f64 (relative error `u` each), then two products and one sum each rounded (`u` each): at most
//! `3u |a| (|x_p| + |x_q|)` plus `O(u^2)`. The remaining `u` covers the reference's own
//! frequencies (`exp(-2i/r ln base)` instead of the crate's `powf`: relative 1e-15, i.e. an
//! angle error below `2^24 * 1e-15 < u / 3` at the largest positions drawn) and the f64 angle
//! rounding (`2^24 * 2^-53 = u / 32`). A wrong angle, sign, pair or position is off by O(|x|).
//! Coordinates past `rotary_dim` must come back bit-identical.

mod common;

use common::{dense_rotation, head_vec, index, matvec, pos_spec, theta, Geometry, PosSpec, Rng};
use proptest::prelude::*;
use rotary::{Direction, Rope};

/// How the test builds the rotation: the paper's schedule from a base, or given frequencies and
/// an amplitude (the path scaled schedules take).
#[derive(Debug, Clone)]
enum Schedule {
    Base(f64),
    Given { inv_freq: Vec<f64>, amplitude: f64 },
}

fn schedule(rotary_dim: usize) -> impl Strategy<Value = Schedule> {
    prop_oneof![
        prop::sample::select(vec![10_000.0, 500_000.0, 100.0, 2.0]).prop_map(Schedule::Base),
        (1.5f64..1e6).prop_map(Schedule::Base),
        (
            proptest::collection::vec(1e-6f64..1.0, rotary_dim / 2),
            -2.0f64..2.0
        )
            .prop_map(|(inv_freq, amplitude)| Schedule::Given {
                inv_freq,
                amplitude
            }),
    ]
}

/// One case: geometry, positions, schedule, direction, data seed.
fn case() -> impl Strategy<Value = (Geometry, PosSpec, Schedule, bool, u64)> {
    common::geometry().prop_flat_map(|g| {
        (
            Just(g),
            pos_spec(g.shape.batch, g.shape.seq),
            schedule(g.rotary_dim),
            any::<bool>(),
            any::<u64>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn kernel_equals_dense_rotation_matrix((g, pos, sched, inverse, seed) in case()) {
        let shape = g.shape;
        let (rope, inv_freq, amplitude) = match &sched {
            Schedule::Base(base) => (
                Rope::new(shape.head_dim, g.rotary_dim, *base, g.layout).unwrap(),
                theta(g.rotary_dim, *base),
                1.0,
            ),
            Schedule::Given { inv_freq, amplitude } => (
                Rope::from_inv_freq(shape.head_dim, g.layout, inv_freq.clone(), *amplitude)
                    .unwrap(),
                inv_freq.clone(),
                *amplitude,
            ),
        };
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let x = Rng::new(seed).data(common::len(&shape));
        let mut y = x.clone();
        rope.apply_inplace(&mut y, shape, pos.positions(), direction).unwrap();

        let r = g.rotary_dim;
        for b in 0..shape.batch {
            for s in 0..shape.seq {
                let m = pos.position(b, s, shape.seq);
                // R_m^T = R_{-m}.
                let sign = if inverse { -1.0 } else { 1.0 };
                let angles: Vec<f64> = inv_freq.iter().map(|t| sign * m * t).collect();
                let rot = dense_rotation(shape.head_dim, g.layout, &angles, amplitude);
                for h in 0..shape.heads {
                    let xv = head_vec(&x, &shape, b, h, s);
                    let want = matvec(&rot, &xv);
                    for i in 0..r / 2 {
                        let (p, q) = common::pair(g.layout, i, r);
                        let tol = 4.0 * common::U_F32 * amplitude.abs() * (xv[p].abs() + xv[q].abs());
                        for j in [p, q] {
                            let got = f64::from(y[index(&shape, b, h, s, j)]);
                            prop_assert!(
                                (got - want[j]).abs() <= tol,
                                "b{b} h{h} s{s} j{j} pos {m}: got {got}, want {}, tol {tol}",
                                want[j]
                            );
                        }
                    }
                    for j in r..shape.head_dim {
                        let k = index(&shape, b, h, s, j);
                        prop_assert_eq!(y[k].to_bits(), x[k].to_bits(), "pass-through dim {}", j);
                    }
                }
            }
        }
    }
}
