//! [`add_norm`]: `LayerNorm(Dropout(y) + residual)` as one op against the two ops it replaces
//! ([`add_norm_slow`]: the dropout-add, then [`crate::autograd::layer_norm`]), values and the
//! gradients of `y`, `residual`, `weight` and `bias`, without dropout and with the same masks;
//! the same bits on any thread count; bad inputs refused.
//!
//! Tolerance (f32): 1e-5 relative to the largest magnitude of the reference tensor. The two
//! paths compute the same formulas in another order (row sums in 16 lanes here, 8 in the layer
//! norm kernel; `z` recomputed from the saved moments), so they differ by rounding alone: a few
//! ulp (1.2e-7 each) of O(1) values, and for `dweight` and `dbias`, sums over up to 130 rows,
//! a rounding error growing as the square root of the rows (measured: below 1e-6). A wrong term
//! (a missing mask factor, a dropped mean) moves a value by O(1) relative. The two-op path in
//! f64 (exact to ~1e-15; its layer norm is checked against finite differences in
//! `layer_norm.rs`) is held to the same bound.

use candle_core::{DType, Tensor};
use test_support::max_abs;

use super::{gradients, max_abs_diff, random, to_vec};
use crate::autograd::add_norm::{add_norm, add_norm_slow};
use crate::autograd::KeepMask;
use crate::mode::Dropout;

/// Relative tolerance of the f32 comparisons (see the module docs).
const TOL: f64 = 1e-5;

/// Awkward shapes: one row, widths not a multiple of 16, several forward tasks (`[96, 384]`)
/// and several backward blocks of 64 rows, the last one partial (`[2, 65, 48]`).
const SHAPES: &[&[usize]] = &[
    &[1, 7],
    &[1, 384],
    &[3, 17],
    &[2, 5, 33],
    &[4, 384],
    &[2, 65, 48],
    &[96, 384],
];

/// Dropout probabilities: none, the model's, half, all.
const PROBABILITIES: [f64; 4] = [0.0, 0.1, 0.5, 1.0];

/// `[y, residual, weight, bias]` (f64) for `dims`; the residual offset by 0.5 so the row
/// means are not all near 0, the weight around 1.
fn inputs(dims: &[usize], seed: u64) -> [Tensor; 4] {
    let h = dims[dims.len() - 1];
    [
        random(dims, seed, 1.0),
        (random(dims, seed + 1, 2.0) + 0.5).unwrap(),
        (random(&[h], seed + 2, 0.5) + 1.0).unwrap(),
        random(&[h], seed + 3, 1.0),
    ]
}

/// The mask of a dropout of probability `p` over `n` elements (`None` for `p = 0`).
fn mask(n: usize, p: f64, seed: u64) -> Option<KeepMask> {
    Dropout::seeded(seed).keep_mask(n, p)
}

/// The fused op on `[y, residual, weight, bias]` with `mask`.
fn fused(mask: &Option<KeepMask>) -> impl Fn(&[Tensor]) -> candle_core::Result<Tensor> + '_ {
    |t| add_norm(&t[0], &t[1], mask.clone(), (&t[2], &t[3]), 1e-12)
}

/// The two-op path on `[y, residual, weight, bias]` with `mask`.
fn two_ops(mask: &Option<KeepMask>) -> impl Fn(&[Tensor]) -> candle_core::Result<Tensor> + '_ {
    |t| add_norm_slow(&t[0], &t[1], mask.clone(), (&t[2], &t[3]), 1e-12)
}

/// `max |a - b| / max |b|` (0 when both are 0).
fn relative(a: &Tensor, b: &Tensor) -> f64 {
    let diff = max_abs_diff(a, b);
    if diff == 0.0 {
        0.0
    } else {
        diff / max_abs(b)
    }
}

fn f32s(t: &[Tensor]) -> Vec<Tensor> {
    t.iter().map(|t| t.to_dtype(DType::F32).unwrap()).collect()
}

#[test]
fn values_and_gradients_match_the_two_op_path() {
    let names = ["y", "residual", "weight", "bias"];
    for (i, dims) in SHAPES.iter().enumerate() {
        for (k, &p) in PROBABILITIES.iter().enumerate() {
            let t64 = inputs(dims, 10 * i as u64);
            let t = f32s(&t64);
            let n = t[0].elem_count();
            let mask = mask(n, p, 100 + k as u64);
            assert_eq!(mask.is_none(), p == 0.0);
            let case = format!("{dims:?} p {p}");
            let out = fused(&mask)(&t).unwrap();
            assert_eq!(out.dims(), *dims);
            for (what, reference) in [
                ("f32", two_ops(&mask)(&t).unwrap()),
                ("f64", two_ops(&mask)(&t64).unwrap()),
            ] {
                let err = relative(&out, &reference);
                assert!(err < TOL, "{case}: values vs the {what} two ops: {err:e}");
            }
            let got = gradients(&fused(&mask), &t);
            let want32 = gradients(&two_ops(&mask), &t);
            let want64 = gradients(&two_ops(&mask), &t64);
            for (j, name) in names.iter().enumerate() {
                assert_eq!(got[j].dims(), t[j].dims(), "{case}: d{name}");
                for (what, want) in [("f32", &want32[j]), ("f64", &want64[j])] {
                    let err = relative(&got[j], want);
                    assert!(err < TOL, "{case}: d{name} vs the {what} two ops: {err:e}");
                }
            }
        }
    }
}

/// With every element dropped the output is `LayerNorm(residual)` and `dy` is exactly 0.
#[test]
fn dropping_everything_normalises_the_residual() {
    let t = f32s(&inputs(&[3, 40], 5));
    let mask = mask(120, 1.0, 9);
    let out = fused(&mask)(&t).unwrap();
    let norm = crate::autograd::layer_norm(&t[1], &t[2], &t[3], 1e-12).unwrap();
    assert!(relative(&out, &norm) < TOL);
    let dy = &gradients(&fused(&mask), &t)[0];
    assert!(to_vec(dy).iter().all(|&v| v == 0.0));
}

/// A transposed (strided) `y` gives the values and gradients of its contiguous copy.
#[test]
fn strided_input_is_its_contiguous_copy() {
    let t = f32s(&inputs(&[6, 20], 3));
    let mut stored = t.clone();
    stored[0] = t[0].t().unwrap().contiguous().unwrap();
    let mask = mask(120, 0.1, 4);
    let strided = |s: &[Tensor]| {
        let y = s[0].t()?;
        assert!(!y.is_contiguous());
        add_norm(&y, &s[1], mask.clone(), (&s[2], &s[3]), 1e-12)
    };
    let contiguous = fused(&mask)(&t).unwrap();
    assert_eq!(max_abs_diff(&strided(&stored).unwrap(), &contiguous), 0.0);
    let a = gradients(&strided, &stored);
    let b = gradients(&fused(&mask), &t);
    assert_eq!(max_abs_diff(&a[0].t().unwrap(), &b[0]), 0.0);
    for (a, b) in a.iter().zip(&b).skip(1) {
        assert_eq!(max_abs_diff(a, b), 0.0);
    }
}

/// Values and gradients are the same bits on 1 to 4 threads, with several forward tasks and
/// backward blocks (the weight and bias gradients are partial sums of fixed blocks of rows,
/// added in order).
#[test]
fn results_are_the_same_on_any_thread_count() {
    let t = f32s(&inputs(&[300, 200], 8));
    let mask = mask(t[0].elem_count(), 0.1, 6);
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let mut all = vec![to_vec(&fused(&mask)(&t).unwrap())];
                all.extend(gradients(&fused(&mask), &t).iter().map(to_vec));
                all
            })
    };
    let one = run(1);
    for threads in 2..=4 {
        assert!(run(threads) == one, "{threads} threads differ from one");
    }
}

#[test]
fn bad_inputs_are_errors() {
    let t = f32s(&inputs(&[2, 8], 1));
    let other = f32s(&inputs(&[2, 9], 1));
    let none = None;
    // y and residual of different shapes.
    let r = &other[1];
    assert!(add_norm(&t[0], r, None, (&t[2], &t[3]), 1e-12).is_err());
    // A mask of the wrong length.
    assert!(fused(&mask(15, 0.5, 1))(&t).is_err());
    // Weight or bias not of the row width.
    assert!(add_norm(&t[0], &t[1], None, (&other[2], &t[3]), 1e-12).is_err());
    assert!(add_norm(&t[0], &t[1], None, (&t[2], &other[3]), 1e-12).is_err());
    // f64 tensors are not the fused op's (its twin takes them).
    let t64 = inputs(&[2, 8], 1);
    assert!(fused(&none)(&t64).is_err());
    assert!(two_ops(&none)(&t64).is_ok());
}
