//! Algebraic properties of the rotation, through the public API (so through whichever kernel
//! the CPU dispatches to).
//!
//! Error model used by the tolerances (`u = 2^-24`): one rotated coordinate is
//! `x_p C + x_q S` with `C`, `S` rounded once from f64 and two products and one sum rounded in
//! f32, so it is within `3u (|x_p| + |x_q|)` of the exact rotation; for a pair this is an error
//! vector of norm at most `6u |(x_p, x_q)|`, and for a head at most `6u |x|`. Each bound below
//! adds these per-rotation errors; a position handled in f32 instead of f64 (angle error
//! ~`m 2^-24`) breaks them by orders of magnitude at the positions drawn.

mod common;

use common::{
    dot, head_vec, index, norm, pair, pos_spec, transpose, Geometry, PosSpec, Rng, U_F32,
};
use half::{bf16, f16};
use proptest::prelude::*;
use rotary::{rotate_qk_inplace, Direction, Element, Layout, Order, Positions, Rope, Shape};

fn rope_for(g: &Geometry, base: f64) -> Rope {
    Rope::new(g.shape.head_dim, g.rotary_dim, base, g.layout).unwrap()
}

fn base() -> impl Strategy<Value = f64> {
    prop_oneof![Just(10_000.0), 2.0f64..1e6]
}

fn case() -> impl Strategy<Value = (Geometry, PosSpec, f64, u64)> {
    common::geometry().prop_flat_map(|g| {
        (
            Just(g),
            pos_spec(g.shape.batch, g.shape.seq),
            base(),
            any::<u64>(),
        )
    })
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Interleaved), Just(Layout::Half)]
}

fn convert<T: Element>(x: &[f32]) -> Vec<T> {
    x.iter().map(|&v| T::from_f32(v)).collect()
}

/// The bits of each element widened to f32: widening is exact and one-to-one on the
/// non-NaN values these tests store, so equal results mean bit-identical storage.
fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.to_f32().to_bits()).collect()
}

/// Rotates one head vector `x` (head_dim values) at position `m` (`Explicit`), forward or not.
fn rotate_one(rope: &Rope, x: &[f32], m: u32, direction: Direction) -> Vec<f64> {
    let mut y = x.to_vec();
    let shape = Shape::head_major(1, 1, 1, x.len());
    rope.apply_inplace(&mut y, shape, Positions::Explicit(&[m]), direction)
        .unwrap();
    y.iter().map(|&v| f64::from(v)).collect()
}

proptest! {
    // Few cases: each draws positions up to 10^5, so each new `Rope` builds a table of up to
    // 2^17 rows (or the 64 MiB cap).
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// `<R_m q, R_n k> = <q, R_{n-m} k>` for m, n up to 10^5. Tolerance `20u |q| |k|`: three
    /// rotations each off by at most `6u` times the vector's norm (module docs).
    #[test]
    fn relative_position_property(
        head_dim in 2usize..=96,
        r in any::<prop::sample::Index>(),
        layout in layout(),
        base in base(),
        mn in proptest::collection::vec((0u32..=100_000, 0u32..=100_000), 6),
        seed in any::<u64>(),
    ) {
        let rotary_dim = 2 * (1 + r.index(head_dim / 2));
        let rope = Rope::new(head_dim, rotary_dim, base, layout).unwrap();
        let mut rng = Rng::new(seed);
        for (m, n) in mn {
            let (q, k) = (rng.data(head_dim), rng.data(head_dim));
            let (q64, k64): (Vec<f64>, Vec<f64>) = (
                q.iter().map(|&v| f64::from(v)).collect(),
                k.iter().map(|&v| f64::from(v)).collect(),
            );
            let lhs = dot(
                &rotate_one(&rope, &q, m, Direction::Forward),
                &rotate_one(&rope, &k, n, Direction::Forward),
            );
            // R_{n-m} k: forward by n - m, or inverse by m - n.
            let rel = if n >= m {
                rotate_one(&rope, &k, n - m, Direction::Forward)
            } else {
                rotate_one(&rope, &k, m - n, Direction::Inverse)
            };
            let rhs = dot(&q64, &rel);
            let tol = 20.0 * U_F32 * norm(&q64) * norm(&k64);
            prop_assert!((lhs - rhs).abs() <= tol, "m {m} n {n}: {lhs} vs {rhs}, tol {tol}");
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `|R_m x| = |x|` per head, within `7u |x|` (one rotation: `6u |x|`).
    #[test]
    fn norm_is_preserved((g, pos, base, seed) in case()) {
        let shape = g.shape;
        let rope = rope_for(&g, base);
        let x = Rng::new(seed).data(common::len(&shape));
        let mut y = x.clone();
        rope.apply_inplace(&mut y, shape, pos.positions(), Direction::Forward).unwrap();
        for_each_head(&shape, |b, h, s| {
            let (nx, ny) = (norm(&head_vec(&x, &shape, b, h, s)), norm(&head_vec(&y, &shape, b, h, s)));
            prop_assert!((nx - ny).abs() <= 7.0 * U_F32 * nx, "{nx} vs {ny}");
            Ok(())
        })?;
    }

    /// `R_m^T R_m x = x`: per pair, two rotations off by `6u |pair|` each, so each coordinate is
    /// within `13u |pair|`. Uses the out-of-place path for the inverse.
    #[test]
    fn inverse_undoes_forward((g, pos, base, seed) in case()) {
        let shape = g.shape;
        let rope = rope_for(&g, base);
        let x = Rng::new(seed).data(common::len(&shape));
        let mut y = x.clone();
        rope.apply_inplace(&mut y, shape, pos.positions(), Direction::Forward).unwrap();
        let mut z = vec![0f32; x.len()];
        rope.apply(&y, &mut z, shape, pos.positions(), Direction::Inverse).unwrap();
        check_pairwise(&g, &x, &z, 13.0)?;
    }

    /// `R_m R_n x = R_{m+n} x`: explicit positions `n` then `m` against `m + n` once; per pair
    /// three rotations, each coordinate within `19u |pair|`.
    #[test]
    fn rotations_compose(
        g in common::geometry(),
        base in base(),
        seed in any::<u64>(),
        fractional in any::<bool>(),
    ) {
        let shape = g.shape;
        let rope = rope_for(&g, base);
        let mut rng = Rng::new(seed);
        let x = rng.data(common::len(&shape));
        let ms: Vec<u32> = (0..shape.seq).map(|_| rng.below(1 << 16) as u32).collect();
        let ns: Vec<u32> = (0..shape.seq).map(|_| rng.below(1 << 16) as u32).collect();
        let sums: Vec<u32> = ms.iter().zip(&ns).map(|(m, n)| m + n).collect();
        let (mut twice, mut once) = (x.clone(), x.clone());
        if fractional {
            let f = |v: &[u32]| v.iter().map(|&p| f64::from(p) + 0.25).collect::<Vec<f64>>();
            let (fm, fn_) = (f(&ms), f(&ns));
            let fsum: Vec<f64> = fm.iter().zip(&fn_).map(|(a, b)| a + b).collect();
            rope.apply_inplace(&mut twice, shape, Positions::Fractional(&fn_), Direction::Forward).unwrap();
            rope.apply_inplace(&mut twice, shape, Positions::Fractional(&fm), Direction::Forward).unwrap();
            rope.apply_inplace(&mut once, shape, Positions::Fractional(&fsum), Direction::Forward).unwrap();
        } else {
            rope.apply_inplace(&mut twice, shape, Positions::Explicit(&ns), Direction::Forward).unwrap();
            rope.apply_inplace(&mut twice, shape, Positions::Explicit(&ms), Direction::Forward).unwrap();
            rope.apply_inplace(&mut once, shape, Positions::Explicit(&sums), Direction::Forward).unwrap();
        }
        check_pairwise(&g, &once, &twice, 19.0)?;
    }

    /// Position 0 is the identity: C = 1 and S = 0 exactly, so values come back equal, for a
    /// range at 0, explicit zeros and fractional zeros, both directions.
    #[test]
    fn position_zero_is_identity(g in common::geometry(), base in base(), seed in any::<u64>(), inverse in any::<bool>()) {
        let shape = g.shape;
        let rope = rope_for(&g, base);
        let x = Rng::new(seed).data(common::len(&shape));
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let zeros = vec![0u32; shape.seq];
        let fzeros = vec![0f64; shape.seq];
        let seq1 = Shape { seq: 1.min(shape.seq), ..shape };
        let n1 = common::len(&seq1);
        let cases = [
            (Positions::START, seq1, n1),
            (Positions::Explicit(&zeros), shape, x.len()),
            (Positions::Fractional(&fzeros), shape, x.len()),
        ];
        for (positions, sh, n) in cases {
            let mut y = x[..n].to_vec();
            rope.apply_inplace(&mut y, sh, positions, direction).unwrap();
            prop_assert_eq!(&y[..], &x[..n]);
        }
    }

    /// Coordinates `rotary_dim..head_dim` come back bit-identical, whatever their bits (NaN
    /// payloads, infinities, subnormals), for f32, f16 and bf16, in place and out of place.
    #[test]
    fn pass_through_dims_are_bit_identical((g, pos, base, seed) in case(), inverse in any::<bool>()) {
        let rope = rope_for(&g, base);
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let mut rng = Rng::new(seed);
        let raw: Vec<u64> = (0..common::len(&g.shape)).map(|_| rng.next_u64()).collect();
        let args = (&rope, &g, &pos, direction, &raw[..]);
        pass_through(args, |b| f32::from_bits(b as u32), |v| v.to_bits())?;
        pass_through(args, |b| f16::from_bits(b as u16), |v| u32::from(v.to_bits()))?;
        pass_through(args, |b| bf16::from_bits(b as u16), |v| u32::from(v.to_bits()))?;
    }

    /// Out of place equals in place, bit for bit; the destination's prior contents (random
    /// bits) do not leak through.
    #[test]
    fn out_of_place_equals_in_place((g, pos, base, seed) in case(), inverse in any::<bool>()) {
        let rope = rope_for(&g, base);
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let x = Rng::new(seed).data(common::len(&g.shape));
        out_vs_in::<f32>(&rope, &g, &pos, direction, &x, seed)?;
        out_vs_in::<f16>(&rope, &g, &pos, direction, &x, seed)?;
        out_vs_in::<bf16>(&rope, &g, &pos, direction, &x, seed)?;
    }

    /// Token-major and head-major data give the same results after transposing, bit for bit.
    #[test]
    fn token_major_equals_head_major((g, pos, base, seed) in case(), inverse in any::<bool>()) {
        let rope = rope_for(&g, base);
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let x = Rng::new(seed).data(common::len(&g.shape));
        orders_agree::<f32>(&rope, &g, &pos, direction, &x)?;
        orders_agree::<f16>(&rope, &g, &pos, direction, &x)?;
        orders_agree::<bf16>(&rope, &g, &pos, direction, &x)?;
    }

    /// The fused q/k call, with different head counts (grouped-query attention), equals two
    /// separate calls bit for bit, through `Rope` and through `rotate_qk_inplace` with the
    /// `Rope`'s coefficients.
    #[test]
    fn fused_qk_equals_separate_calls(
        (g, pos, base, seed) in case(),
        k_heads in 1usize..=4,
        inverse in any::<bool>(),
    ) {
        let rope = rope_for(&g, base);
        let direction = if inverse { Direction::Inverse } else { Direction::Forward };
        let q_shape = g.shape;
        let k_shape = Shape { heads: k_heads, ..q_shape };
        let mut rng = Rng::new(seed);
        let q = rng.data(common::len(&q_shape));
        let k = rng.data(common::len(&k_shape));
        fused_vs_separate::<f32>(&rope, q_shape, k_shape, &pos, direction, &q, &k)?;
        fused_vs_separate::<f16>(&rope, q_shape, k_shape, &pos, direction, &q, &k)?;
        fused_vs_separate::<bf16>(&rope, q_shape, k_shape, &pos, direction, &q, &k)?;
    }
}

/// Calls `f(b, h, s)` for every head vector of `shape`.
fn for_each_head(
    shape: &Shape,
    mut f: impl FnMut(usize, usize, usize) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for s in 0..shape.seq {
                f(b, h, s)?;
            }
        }
    }
    Ok(())
}

/// Each rotated coordinate of `got` within `k u |pair of want|` of `want`; the rest equal.
fn check_pairwise(g: &Geometry, want: &[f32], got: &[f32], k: f64) -> Result<(), TestCaseError> {
    let shape = g.shape;
    let r = g.rotary_dim;
    for_each_head(&shape, |b, h, s| {
        let (w, v) = (
            head_vec(want, &shape, b, h, s),
            head_vec(got, &shape, b, h, s),
        );
        for i in 0..r / 2 {
            let (p, q) = pair(g.layout, i, r);
            let tol = k * U_F32 * (w[p] * w[p] + w[q] * w[q]).sqrt();
            for j in [p, q] {
                prop_assert!(
                    (w[j] - v[j]).abs() <= tol,
                    "b{b} h{h} s{s} j{j}: {} vs {}",
                    w[j],
                    v[j]
                );
            }
        }
        prop_assert_eq!(&w[r..], &v[r..]);
        Ok(())
    })
}

type PassThroughArgs<'a> = (&'a Rope, &'a Geometry, &'a PosSpec, Direction, &'a [u64]);

fn pass_through<T: Element>(
    (rope, g, pos, direction, raw): PassThroughArgs<'_>,
    from_bits: impl Fn(u64) -> T,
    to_bits: impl Fn(T) -> u32,
) -> Result<(), TestCaseError> {
    let shape = g.shape;
    // Rotated dims get finite values, pass-through dims arbitrary bits.
    let x: Vec<T> = raw
        .iter()
        .enumerate()
        .map(|(e, &b)| {
            if e % shape.head_dim < g.rotary_dim {
                T::from_f32((b % 2001) as f32 / 1000.0 - 1.0)
            } else {
                from_bits(b)
            }
        })
        .collect();
    let mut inplace = x.clone();
    rope.apply_inplace(&mut inplace, shape, pos.positions(), direction)
        .unwrap();
    let mut out = vec![T::default(); x.len()];
    rope.apply(&x, &mut out, shape, pos.positions(), direction)
        .unwrap();
    for (e, ((&a, &b), &c)) in x.iter().zip(&inplace).zip(&out).enumerate() {
        if e % shape.head_dim >= g.rotary_dim {
            let (a, b, c) = (to_bits(a), to_bits(b), to_bits(c));
            prop_assert!(
                a == b && a == c,
                "element {}: {:#x} -> {:#x} / {:#x}",
                e,
                a,
                b,
                c
            );
        }
    }
    Ok(())
}

fn out_vs_in<T: Element>(
    rope: &Rope,
    g: &Geometry,
    pos: &PosSpec,
    direction: Direction,
    x: &[f32],
    seed: u64,
) -> Result<(), TestCaseError> {
    let x: Vec<T> = convert(x);
    let mut inplace = x.clone();
    rope.apply_inplace(&mut inplace, g.shape, pos.positions(), direction)
        .unwrap();
    let mut rng = Rng::new(!seed);
    let mut out: Vec<T> = (0..x.len())
        .map(|_| T::from_f32(f32::from_bits(rng.next_u64() as u32)))
        .collect();
    rope.apply(&x, &mut out, g.shape, pos.positions(), direction)
        .unwrap();
    prop_assert_eq!(bits(&inplace), bits(&out));
    Ok(())
}

fn orders_agree<T: Element>(
    rope: &Rope,
    g: &Geometry,
    pos: &PosSpec,
    direction: Direction,
    x: &[f32],
) -> Result<(), TestCaseError> {
    let x: Vec<T> = convert(x);
    let mut a = x.clone();
    rope.apply_inplace(&mut a, g.shape, pos.positions(), direction)
        .unwrap();
    let (mut b, other) = transpose(&x, &g.shape);
    rope.apply_inplace(&mut b, other, pos.positions(), direction)
        .unwrap();
    let (b_back, back) = transpose(&b, &other);
    prop_assert_eq!(back.order, g.shape.order);
    prop_assert_eq!(bits(&a), bits(&b_back));
    Ok(())
}

fn fused_vs_separate<T: Element>(
    rope: &Rope,
    q_shape: Shape,
    k_shape: Shape,
    pos: &PosSpec,
    direction: Direction,
    q: &[f32],
    k: &[f32],
) -> Result<(), TestCaseError> {
    let (q, k): (Vec<T>, Vec<T>) = (convert(q), convert(k));
    let (mut q1, mut k1) = (q.clone(), k.clone());
    rope.apply_inplace(&mut q1, q_shape, pos.positions(), direction)
        .unwrap();
    rope.apply_inplace(&mut k1, k_shape, pos.positions(), direction)
        .unwrap();
    let (mut q2, mut k2) = (q.clone(), k.clone());
    rope.apply_qk_inplace(
        &mut q2,
        q_shape,
        &mut k2,
        k_shape,
        pos.positions(),
        direction,
    )
    .unwrap();
    prop_assert_eq!(bits(&q1), bits(&q2));
    prop_assert_eq!(bits(&k1), bits(&k2));
    let coefficients = rope
        .coefficients(pos.positions(), q_shape.batch, q_shape.seq)
        .unwrap();
    let (mut q3, mut k3) = (q, k);
    rotate_qk_inplace(
        &mut q3,
        q_shape,
        &mut k3,
        k_shape,
        coefficients.view(),
        direction,
    )
    .unwrap();
    prop_assert_eq!(bits(&q1), bits(&q3));
    prop_assert_eq!(bits(&k1), bits(&k3));
    Ok(())
}

/// Tensors large enough for the threaded path (above `rotary::apply::PARALLEL_MIN_ELEMENTS`),
/// fused q/k with GQA head counts, both orders and layouts, per-sequence positions: equal bit
/// for bit to rotating each head vector alone (a single-vector call runs on the calling
/// thread).
#[test]
fn threaded_calls_equal_vector_by_vector_calls() {
    let mut rng = Rng::new(7);
    for (layout, order) in [
        (Layout::Interleaved, Order::HeadMajor),
        (Layout::Half, Order::TokenMajor),
        (Layout::Half, Order::HeadMajor),
        (Layout::Interleaved, Order::TokenMajor),
    ] {
        let (batch, seq, head_dim, rotary_dim) = (2, 333, 80, 64);
        let make = |heads| Shape {
            batch,
            heads,
            seq,
            head_dim,
            order,
        };
        let (q_shape, k_shape) = (make(8), make(2));
        assert!(common::len(&q_shape) >= rotary::apply::PARALLEL_MIN_ELEMENTS);
        let rope = Rope::new(head_dim, rotary_dim, 10_000.0, layout).unwrap();
        let positions: Vec<u32> = (0..batch * seq).map(|_| rng.below(70_000) as u32).collect();
        let mut q = rng.data(common::len(&q_shape));
        let mut k = rng.data(common::len(&k_shape));
        let (q0, k0) = (q.clone(), k.clone());
        rope.apply_qk_inplace(
            &mut q,
            q_shape,
            &mut k,
            k_shape,
            Positions::Explicit(&positions),
            Direction::Forward,
        )
        .unwrap();
        for (x0, x, shape) in [(&q0, &q, q_shape), (&k0, &k, k_shape)] {
            for_each_head(&shape, |b, h, s| {
                let v: Vec<f32> = (0..head_dim)
                    .map(|j| x0[index(&shape, b, h, s, j)])
                    .collect();
                let mut w = v.clone();
                let one = Shape::head_major(1, 1, 1, head_dim);
                let p = [positions[b * seq + s]];
                rope.apply_inplace(&mut w, one, Positions::Explicit(&p), Direction::Forward)
                    .unwrap();
                for (j, &wj) in w.iter().enumerate() {
                    assert_eq!(x[index(&shape, b, h, s, j)].to_bits(), wj.to_bits());
                }
                Ok(())
            })
            .unwrap();
        }
    }
}
