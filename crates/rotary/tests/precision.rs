//! Angle precision of the cos/sin coefficients at long positions.
//!
//! The claim under test: every coefficient is `cos`/`sin` of the f64 angle `m * theta_i`,
//! rounded once to f32. The reference here computes `cos`/`sin` of the *exact* product
//! `m * theta_i` (of the f64 `theta_i` the `Rope` holds) in double-double arithmetic, with its
//! own range reduction and Taylor series (no libm). Bound per coefficient:
//!
//! `|coefficient - reference| <= ulp_f32(reference) + 2^-53 |m theta_i|`
//!
//! Rounding once to f32 costs at most half an ulp, plus half more where the value sits at a
//! binade edge; libm's f64 `sin_cos` adds about 2^-53 and the single rounding of the f64 angle
//! product at most `2^-53 |m theta_i|` (absolute; below 1/32 ulp for values above 2^-5 at
//! m = 2^20). The naive f32 recipe (f32 position times f32 frequency, f32 cos) misses this
//! bound by orders of magnitude at long positions, which `naive_f32_angles_fail_the_bound`
//! shows, so a regression to f32 angles cannot pass.

mod common;

use common::Rng;
use rotary::{Coefficients, CosSin, Direction, Layout, Positions, Rope, Shape};

// ---- double-double reference --------------------------------------------------------------

/// An unevaluated sum `hi + lo` with `|lo| <= ulp(hi) / 2`: about 106 bits.
#[derive(Debug, Clone, Copy)]
struct Dd(f64, f64);

fn two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let bb = s - a;
    Dd(s, (a - (s - bb)) + (b - bb))
}

fn fast_two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    Dd(s, b - (s - a))
}

/// The exact product of two f64 (fused multiply-add recovers the rounding error).
fn two_prod(a: f64, b: f64) -> Dd {
    let p = a * b;
    Dd(p, a.mul_add(b, -p))
}

impl Dd {
    fn add(self, y: Dd) -> Dd {
        let s = two_sum(self.0, y.0);
        let t = two_sum(self.1, y.1);
        let s = fast_two_sum(s.0, s.1 + t.0);
        fast_two_sum(s.0, s.1 + t.1)
    }

    fn neg(self) -> Dd {
        Dd(-self.0, -self.1)
    }

    fn mul(self, y: Dd) -> Dd {
        let p = two_prod(self.0, y.0);
        fast_two_sum(p.0, p.1 + (self.0 * y.1 + self.1 * y.0))
    }

    fn div_f64(self, d: f64) -> Dd {
        let q = self.0 / d;
        let p = two_prod(q, d);
        let rem = ((self.0 - p.0) - p.1 + self.1) / d;
        fast_two_sum(q, rem)
    }
}

/// pi/2 as three f64 (the nearest f64, then the nearest f64 to each remainder: the well-known
/// tails, e.g. fdlibm's), about 160 bits.
const PIO2: [f64; 3] = [
    std::f64::consts::FRAC_PI_2,
    6.123233995736766e-17,
    -1.4973849048591698e-33,
];

/// `(sin x, cos x)` for `x` given as a double-double, accurate to about 2^-100 relative to
/// `|x|` after range reduction (ample for |x| < 2^30).
fn sin_cos_dd(x: Dd) -> (f64, f64) {
    let k = (x.0 / PIO2[0]).round();
    let r = x
        .add(two_prod(k, PIO2[0]).neg())
        .add(two_prod(k, PIO2[1]).neg())
        .add(Dd(-k * PIO2[2], 0.0));
    // Taylor series on |r| <= pi/4 (+ tiny): terms fall below 2^-110 after 15 steps.
    let r2 = r.mul(r);
    let (mut sin, mut cos) = (r, Dd(1.0, 0.0));
    let (mut ts, mut tc) = (r, Dd(1.0, 0.0));
    for n in 1..=15 {
        let n = n as f64;
        ts = ts.mul(r2).div_f64(-(2.0 * n) * (2.0 * n + 1.0));
        tc = tc.mul(r2).div_f64(-(2.0 * n - 1.0) * (2.0 * n));
        sin = sin.add(ts);
        cos = cos.add(tc);
    }
    let (s, c) = (sin.0 + sin.1, cos.0 + cos.1);
    match (k as i64).rem_euclid(4) {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// `(sin, cos)` of the exact product `m * theta`.
fn reference(m: f64, theta: f64) -> (f64, f64) {
    sin_cos_dd(two_prod(m, theta))
}

/// The spacing of f32 values at `|v|` (`2^(e - 23)` for `|v|` in `[2^e, 2^(e+1))`, the
/// subnormal spacing below 2^-126).
fn ulp_f32(v: f64) -> f64 {
    let e = ((v.abs().to_bits() >> 52) & 0x7ff) as i32 - 1023;
    (2f64).powi(e.max(-126) - 23)
}

/// The test's bound for a coefficient of angle `m * theta` (module docs).
fn bound(reference: f64, m: f64, theta: f64) -> f64 {
    ulp_f32(reference) + (m * theta).abs() * f64::EPSILON / 2.0
}

// ---- helpers ----------------------------------------------------------------------------

/// Checks one table row (as `(C, S)` slices) against the reference for position `m`: the
/// duplicated cosines equal, the two signed sines opposite, each within the bound.
fn check_row(layout: Layout, inv_freq: &[f64], m: f64, c: &[f32], s: &[f32]) {
    let r = 2 * inv_freq.len();
    assert_eq!((c.len(), s.len()), (r, r));
    for (i, &theta) in inv_freq.iter().enumerate() {
        let (a, b) = common::pair(layout, i, r);
        assert_eq!(c[a].to_bits(), c[b].to_bits(), "pair {i}: cosines differ");
        assert_eq!(
            (-s[a]).to_bits(),
            s[b].to_bits(),
            "pair {i}: sines not opposite"
        );
        let (rs, rc) = reference(m, theta);
        for (what, got, want) in [("cos", c[b], rc), ("sin", s[b], rs)] {
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= bound(want, m, theta),
                "{layout:?} position {m} pair {i} {what}: {got} vs {want} ({} ulp)",
                err / ulp_f32(want)
            );
        }
    }
}

/// Checks every row of coefficients for the listed positions.
fn check_coefficients(rope: &Rope, coefficients: &Coefficients, positions: &[f64]) {
    let view = coefficients.view();
    let r = rope.rotary_dim();
    assert_eq!(view.rows(), positions.len());
    for (row, &m) in positions.iter().enumerate() {
        let range = row * r..(row + 1) * r;
        check_row(
            rope.layout(),
            rope.inv_freq(),
            m,
            &view.cos()[range.clone()],
            &view.sin()[range],
        );
    }
}

/// Positions below `end`: log-uniform samples plus the edges.
fn sample_positions(rng: &mut Rng, end: u64, n: usize) -> Vec<u32> {
    let bits = (end as f64).log2();
    let mut p: Vec<u32> = (0..n)
        .map(|_| ((2f64).powf(rng.uniform(0.0, bits)) as u64).min(end - 1) as u32)
        .collect();
    p.extend([
        0,
        1,
        (end - 1) as u32,
        (end / 2) as u32,
        (end / 2 - 1) as u32,
    ]);
    p
}

fn ropes() -> Vec<Rope> {
    [Layout::Interleaved, Layout::Half]
        .into_iter()
        .map(|layout| Rope::new(128, 128, 10_000.0, layout).unwrap())
        .collect()
}

// ---- tests ------------------------------------------------------------------------------

/// The reference itself agrees with libm's f64 sin/cos to a few f64 ulps on moderate angles
/// (where libm is trustworthy), so a bug in the double-double code cannot go unnoticed.
#[test]
fn reference_agrees_with_libm() {
    let mut rng = Rng::new(1);
    for _ in 0..20_000 {
        let x = rng.uniform(-2e6, 2e6);
        let (s, c) = sin_cos_dd(Dd(x, 0.0));
        let tol = 4.0 * f64::EPSILON;
        assert!((s - x.sin()).abs() <= tol, "sin {x}: {s} vs {}", x.sin());
        assert!((c - x.cos()).abs() <= tol, "cos {x}: {c} vs {}", x.cos());
    }
}

/// Positions up to 2^20 with d = 128: the cached table (below `max_table_rows`, which is
/// 65,536 rows here) and rows computed per call (above it), read through
/// `Rope::coefficients` for ranges, explicit and fractional positions.
#[test]
fn coefficients_within_one_ulp_up_to_2_pow_20() {
    let mut rng = Rng::new(2);
    for rope in ropes() {
        let cap = rope.max_table_rows();
        assert!(cap < 1 << 20, "the test must reach past the table cap");
        let positions = sample_positions(&mut rng, 1 << 20, 600);
        let (inside, outside): (Vec<u32>, Vec<u32>) =
            positions.iter().partition(|&&p| (p as usize) < cap);
        assert!(inside.len() > 50 && outside.len() > 50);
        for list in [&inside, &outside] {
            let c = rope
                .coefficients(Positions::Explicit(list), 1, list.len())
                .unwrap();
            let as_f64: Vec<f64> = list.iter().map(|&p| f64::from(p)).collect();
            check_coefficients(&rope, &c, &as_f64);
        }
        // Windows of a range, inside and past the table (and straddling its end).
        for offset in [0, 1000, cap - 3, cap + 17, (1 << 20) - 8] {
            let c = rope
                .coefficients(Positions::Range { offset }, 1, 8)
                .unwrap();
            if offset + 8 > cap {
                assert!(!matches!(c, Coefficients::Cached { .. }));
            }
            let list: Vec<f64> = (offset..offset + 8).map(|p| p as f64).collect();
            check_coefficients(&rope, &c, &list);
        }
        // The cached table itself, row by row, grown to its cap.
        let table = rope.reserve(cap).unwrap();
        assert_eq!(table.rows(), cap);
        for &p in inside.iter().take(100) {
            let (c, s) = table.row(p as usize).unwrap();
            check_row(rope.layout(), rope.inv_freq(), f64::from(p), c, s);
        }
    }
}

/// The contrast: the usual f32 recipe, `cos(f32(m) * f32(theta_i))` in f32, fails the same
/// bound at long positions, for most coefficients, by far.
#[test]
fn naive_f32_angles_fail_the_bound() {
    let mut rng = Rng::new(3);
    let inv_freq = rotary::inv_freqs(128, 10_000.0).unwrap();
    let positions: Vec<u32> = (0..200)
        .map(|_| rng.uniform(65_536.0, 1_048_576.0) as u32)
        .collect();
    let (mut failed, mut total, mut worst) = (0usize, 0usize, 0f64);
    for &m in &positions {
        for &theta in &inv_freq {
            let naive = (m as f32 * theta as f32).cos();
            let (_, want) = reference(f64::from(m), theta);
            let err = (f64::from(naive) - want).abs();
            total += 1;
            if err > bound(want, f64::from(m), theta) {
                failed += 1;
            }
            worst = worst.max(err / ulp_f32(want));
        }
    }
    assert!(
        failed * 2 > total,
        "naive f32 angles failed only {failed} of {total}"
    );
    assert!(worst > 1e4, "worst naive error only {worst} ulp");
}

/// Explicit positions up to 2^24 (and ranges ending there), served past the table: the same
/// bound, read through the kernel by rotating basis vectors (`y = R e_a` holds `C` and `S` of
/// pair `i` exactly, since `1 * C + 0 * S = C`).
#[test]
fn kernel_coefficients_within_one_ulp_up_to_2_pow_24() {
    let mut rng = Rng::new(4);
    for rope in ropes() {
        let mut positions = sample_positions(&mut rng, 1 << 24, 120);
        positions.push(u32::MAX);
        let r = rope.rotary_dim();
        let d = rope.head_dim();
        for (i, &theta) in rope.inv_freq().iter().enumerate() {
            let (a, b) = common::pair(rope.layout(), i, r);
            // One head per position, each the basis vector e_a.
            let n = positions.len();
            let mut x = vec![0f32; n * d];
            for t in 0..n {
                x[t * d + a] = 1.0;
            }
            let shape = Shape::head_major(1, 1, n, d);
            rope.apply_inplace(
                &mut x,
                shape,
                Positions::Explicit(&positions),
                Direction::Forward,
            )
            .unwrap();
            for (t, &m) in positions.iter().enumerate() {
                let m = f64::from(m);
                let (rs, rc) = reference(m, theta);
                for (got, want) in [(x[t * d + a], rc), (x[t * d + b], rs)] {
                    let err = (f64::from(got) - want).abs();
                    assert!(
                        err <= bound(want, m, theta),
                        "position {m} pair {i}: {got} vs {want}"
                    );
                }
            }
        }
        for offset in [(1 << 24) - 5, 1 << 24, 3_000_000_000] {
            let c = rope
                .coefficients(Positions::Range { offset }, 1, 5)
                .unwrap();
            assert!(matches!(c, Coefficients::Computed(_)));
            let list: Vec<f64> = (offset..offset + 5).map(|p| p as f64).collect();
            check_coefficients(&rope, &c, &list);
        }
    }
}

/// Fractional positions (interpolated, negative too) are computed per call with the same
/// precision.
#[test]
fn fractional_positions_within_one_ulp() {
    let mut rng = Rng::new(5);
    for rope in ropes() {
        let positions: Vec<f64> = (0..400)
            .map(|_| {
                let sign = if rng.below(4) == 0 { -1.0 } else { 1.0 };
                sign * (2f64).powf(rng.uniform(-10.0, 24.0))
            })
            .collect();
        let c = rope
            .coefficients(Positions::Fractional(&positions), 1, positions.len())
            .unwrap();
        assert!(matches!(c, Coefficients::Computed(_)));
        check_coefficients(&rope, &c, &positions);
    }
}

/// Any 1D schedule's rows, built directly (`CosSin::from_positions`, as the scalings and N-D
/// code do), meet the same bound: random frequencies and positions up to 2^22.
#[test]
fn cos_sin_from_positions_within_one_ulp() {
    let mut rng = Rng::new(6);
    for layout in [Layout::Interleaved, Layout::Half] {
        let inv_freq: Vec<f64> = (0..24)
            .map(|_| (2f64).powf(rng.uniform(-20.0, 1.0)))
            .collect();
        let positions: Vec<f64> = (0..300).map(|_| rng.below(1 << 22) as f64).collect();
        let table = CosSin::from_positions(layout, &inv_freq, 1.0, positions.len(), |row| {
            positions[row]
        })
        .unwrap();
        for (row, &m) in positions.iter().enumerate() {
            let (c, s) = table.row(row).unwrap();
            check_row(layout, &inv_freq, m, c, s);
        }
    }
}
