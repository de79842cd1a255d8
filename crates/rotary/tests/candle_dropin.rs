//! The drop-in `rotary::candle::{rope_i, rope, rope_thd}` against candle-nn 0.11's functions of
//! the same names: forward on every dtype, layout and cos/sin shape kind, gradients against
//! candle's autograd of candle-nn's slow references, and the errors.
#![cfg(feature = "candle")]

mod common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::rotary_emb as nn;
use common::Rng;
use test_support::{max_abs, max_abs_diff};

type RopeFn = fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>;

/// The three functions: (name, ours, candle-nn's, token-major `xs`).
const FUNCTIONS: [(&str, RopeFn, RopeFn, bool); 3] = [
    ("rope_i", rotary::candle::rope_i, nn::rope_i, false),
    ("rope", rotary::candle::rope, nn::rope, false),
    ("rope_thd", rotary::candle::rope_thd, nn::rope_thd, true),
];

/// Head dims around the SIMD widths (4, 8, 16 f32 lanes, half of them for the half layout's
/// halves) and their tails, from 2 to 128.
const HEAD_DIMS: [usize; 14] = [2, 4, 6, 10, 16, 18, 32, 34, 62, 64, 66, 96, 126, 128];

/// `(batch, heads, seq)`: one sequence and several, a single token (the decode step), odd
/// lengths.
const SIZES: [(usize, usize, usize); 4] = [(1, 1, 1), (1, 3, 7), (3, 2, 1), (2, 5, 33)];

/// How a call's cos/sin are shaped.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CsKind {
    /// `[t, d/2]`.
    Shared,
    /// `[t + 5, d/2]`: more rows than tokens, as a model's precomputed table.
    SharedLonger,
    /// `[b, t, d/2]`: one table per sequence.
    PerSequence,
}

const CS_KINDS: [CsKind; 3] = [CsKind::Shared, CsKind::SharedLonger, CsKind::PerSequence];

/// A call's inputs, in f32.
struct Inputs {
    xs: Tensor,
    cos: Tensor,
    sin: Tensor,
}

impl Inputs {
    /// `xs` uniform in [-2, 2) (`[b, h, t, d]`, or `[b, t, h, d]` when `token_major`); cos/sin
    /// of the angles `(m + offset) * 10000^(-2i/d)`, computed in f64, with an offset per
    /// sequence for per-sequence tables.
    fn new(dims: (usize, usize, usize, usize), token_major: bool, kind: CsKind, seed: u64) -> Self {
        let (b, h, t, d) = dims;
        let mut rng = Rng::new(seed);
        let n = b * h * t * d;
        let data: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
        let xs_dims = if token_major {
            (b, t, h, d)
        } else {
            (b, h, t, d)
        };
        let xs = Tensor::from_vec(data, xs_dims, &Device::Cpu).unwrap();
        let pairs = d / 2;
        let (tables, rows) = match kind {
            CsKind::Shared => (1, t),
            CsKind::SharedLonger => (1, t + 5),
            CsKind::PerSequence => (b, t),
        };
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for table in 0..tables {
            let offset = (17 * table) as f64;
            for m in 0..rows {
                for i in 0..pairs {
                    let theta = 10_000f64.powf(-2.0 * i as f64 / d as f64);
                    let (s, c) = ((m as f64 + offset) * theta).sin_cos();
                    cos.push(c as f32);
                    sin.push(s as f32);
                }
            }
        }
        let cs = |v: Vec<f32>| {
            let t = Tensor::from_vec(v, (tables, rows, pairs), &Device::Cpu).unwrap();
            match kind {
                CsKind::PerSequence => t,
                _ => t.squeeze(0).unwrap(),
            }
        };
        Inputs {
            xs,
            cos: cs(cos),
            sin: cs(sin),
        }
    }

    fn to(&self, dtype: DType) -> Inputs {
        let cast = |t: &Tensor| t.to_dtype(dtype).unwrap();
        Inputs {
            xs: cast(&self.xs),
            cos: cast(&self.cos),
            sin: cast(&self.sin),
        }
    }
}

/// Every case: function, head dim, size and cos/sin kind.
fn for_each_case(
    mut f: impl FnMut(&str, RopeFn, RopeFn, bool, (usize, usize, usize, usize), CsKind),
) {
    for (name, ours, theirs, token_major) in FUNCTIONS {
        for d in HEAD_DIMS {
            for (b, h, t) in SIZES {
                for kind in CS_KINDS {
                    f(name, ours, theirs, token_major, (b, h, t, d), kind);
                }
            }
        }
    }
}

/// A tensor's values, widened exactly to f64.
fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// candle-nn's cos/sin for a call: per-sequence tables with more rows than tokens are not
/// handed to it (its CPU op reads sequence `i` from row `i * t`), and it wants contiguous ones.
fn rows_for_candle(cs: &Tensor, t: usize) -> Tensor {
    let axis = cs.rank() - 2;
    cs.narrow(axis, 0, t).unwrap().contiguous().unwrap()
}

/// f32: the same two products and one difference or sum per coordinate as candle-nn's op, so
/// the results are equal bit for bit.
#[test]
fn f32_equals_candle_nn_bit_for_bit() {
    let mut seed = 0;
    for_each_case(|name, ours, theirs, token_major, dims, kind| {
        seed += 1;
        let inputs = Inputs::new(dims, token_major, kind, seed);
        let t = if token_major {
            inputs.xs.dims()[1]
        } else {
            inputs.xs.dims()[2]
        };
        let y = ours(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
        let (cos, sin) = (
            rows_for_candle(&inputs.cos, t),
            rows_for_candle(&inputs.sin, t),
        );
        let expected = theirs(&inputs.xs, &cos, &sin).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        let bits =
            |t: &Tensor| -> Vec<u32> { values(t).iter().map(|&v| (v as f32).to_bits()).collect() };
        assert_eq!(bits(&y), bits(&expected), "{name} {dims:?} {kind:?}");
    });
}

/// Shapes large enough (2^18 elements and more) for the kernels' threads and candle-nn's
/// parallel loop.
#[test]
fn f32_equals_candle_nn_on_threaded_shapes() {
    for (name, ours, theirs, token_major) in FUNCTIONS {
        for kind in [CsKind::Shared, CsKind::PerSequence] {
            let inputs = Inputs::new((2, 8, 257, 64), token_major, kind, 7);
            let y = ours(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
            let expected = theirs(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
            assert_eq!(max_abs_diff(&y, &expected), 0.0, "{name} {kind:?}");
        }
    }
}

/// f16 and bf16: ours is candle-nn's f32 arithmetic on the widened inputs rounded once (equal
/// bit for bit to candle-nn run in f32 and cast), while candle-nn's 16-bit op rounds both
/// products and the sum to the 16-bit type. With unit roundoff `u` (2^-11 for f16, 2^-8 for
/// bf16), its error is at most `u (|x_a c| + |x_b s|) + u |y|` plus second-order terms, ours
/// `u |y|`, and `|y| <= |x_a| + |x_b|`: they differ by at most `3 u (|x_a| + |x_b|)`, bounded
/// here by `3 u * 2 max|x|` (plus `2^-24`, an f16 subnormal step, for results that underflow).
#[test]
fn half_types_equal_rounded_f32_and_candle_nn_within_rounding() {
    let mut seed = 1000;
    for (dtype, u) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        for_each_case(|name, ours, theirs, token_major, dims, kind| {
            seed += 1;
            let inputs = Inputs::new(dims, token_major, kind, seed).to(dtype);
            let t = if token_major {
                inputs.xs.dims()[1]
            } else {
                inputs.xs.dims()[2]
            };
            let y = ours(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
            assert_eq!(y.dtype(), dtype);
            let (cos, sin) = (
                rows_for_candle(&inputs.cos, t),
                rows_for_candle(&inputs.sin, t),
            );

            let wide = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
            let rounded = theirs(&wide(&inputs.xs), &wide(&cos), &wide(&sin))
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            assert_eq!(
                values(&y),
                values(&rounded),
                "{name} {dtype:?} {dims:?} {kind:?}"
            );

            let native = theirs(&inputs.xs, &cos, &sin).unwrap();
            let tol = 3.0 * u * 2.0 * max_abs(&inputs.xs) + 2f64.powi(-24);
            let diff = max_abs_diff(&y, &native);
            assert!(
                diff <= tol,
                "{name} {dtype:?} {dims:?} {kind:?}: {diff} > {tol}"
            );
        });
    }
}

/// f64 runs candle-nn's op (our kernels are f32/f16/bf16) or, with gradients, the same formula
/// from candle ops: equal to candle-nn bit for bit either way.
#[test]
fn f64_equals_candle_nn_with_and_without_autograd() {
    for (name, ours, theirs, token_major) in FUNCTIONS {
        for kind in CS_KINDS {
            let inputs = Inputs::new((2, 3, 9, 18), token_major, kind, 11).to(DType::F64);
            let t = 9;
            let (cos, sin) = (
                rows_for_candle(&inputs.cos, t),
                rows_for_candle(&inputs.sin, t),
            );
            let expected = theirs(&inputs.xs, &cos, &sin).unwrap();
            let plain = ours(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
            let x = Var::from_tensor(&inputs.xs).unwrap();
            let tracked = ours(x.as_tensor(), &inputs.cos, &inputs.sin).unwrap();
            assert_eq!(plain.dtype(), DType::F64);
            for y in [plain, tracked] {
                let (a, b): (Vec<f64>, Vec<f64>) = (
                    y.flatten_all().unwrap().to_vec1().unwrap(),
                    expected.flatten_all().unwrap().to_vec1().unwrap(),
                );
                assert_eq!(a, b, "{name} {kind:?}");
            }
        }
    }
}

/// candle's autograd of candle-nn's slow reference (`rope_i_slow`, `rope_slow`; `rope_thd` as
/// `rope_slow` between transposes; per-sequence tables one sequence at a time, since the slow
/// references take 2D cos/sin only).
fn slow_reference(name: &str, xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    if cos.rank() == 3 {
        let b = xs.dims()[0];
        let parts: Vec<Tensor> = (0..b)
            .map(|i| {
                let one = |t: &Tensor| t.narrow(0, i, 1).unwrap();
                let (c, s) = (one(cos).squeeze(0).unwrap(), one(sin).squeeze(0).unwrap());
                slow_reference(name, &one(xs), &c, &s)
            })
            .collect();
        return Tensor::cat(&parts, 0).unwrap();
    }
    match name {
        "rope_i" => nn::rope_i_slow(xs, cos, sin).unwrap(),
        "rope" => nn::rope_slow(xs, cos, sin).unwrap(),
        "rope_thd" => {
            let head_major = xs.transpose(1, 2).unwrap();
            let y = nn::rope_slow(&head_major, cos, sin).unwrap();
            y.transpose(1, 2).unwrap()
        }
        other => panic!("no slow reference for {other}"),
    }
}

/// The gradients of `L = sum(w * f(x, cos, sin))` for random `w`, with respect to `x`, `cos`
/// and `sin` (all three `Var`s).
fn gradients(
    f: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
    inputs: &Inputs,
    w: &Tensor,
) -> [Tensor; 3] {
    let vars = [&inputs.xs, &inputs.cos, &inputs.sin].map(|t| Var::from_tensor(t).unwrap());
    let y = f(
        vars[0].as_tensor(),
        vars[1].as_tensor(),
        vars[2].as_tensor(),
    );
    let grads = (y * w).unwrap().sum_all().unwrap().backward().unwrap();
    vars.map(|v| grads.get(v.as_tensor()).expect("tracked").clone())
}

/// The gradient with respect to `xs` is `R^T w`, computed with the same products and sums as
/// the autograd of the slow reference (`w_a c + w_b s`, `w_b c - w_a s`): by the kernels in f32,
/// by candle's autograd of our own reference formula in f64 (the path of other devices): equal
/// to it. The gradients with respect to `cos` and `sin` are sums over heads (and the batch for
/// shared tables, and the table's two copies of each pair in the slow reference) of `n`
/// products in a different order: each side within `n u sum|x_j w_j|` of the exact sum, so they
/// agree within `2 n^2 u max|x| max|w|` (`u` the unit roundoff of the dtype).
#[test]
fn gradients_equal_autograd_of_the_slow_reference() {
    let mut seed = 2000;
    for (dtype, u) in [(DType::F32, 2f64.powi(-24)), (DType::F64, 2f64.powi(-53))] {
        for (name, ours, _, token_major) in FUNCTIONS {
            for d in [2, 6, 16, 34, 64] {
                for (b, h, t) in [(1, 1, 1), (2, 3, 5), (3, 2, 1)] {
                    for kind in CS_KINDS {
                        seed += 1;
                        let dims = (b, h, t, d);
                        let inputs = Inputs::new(dims, token_major, kind, seed).to(dtype);
                        let w = Inputs::new(dims, token_major, kind, seed + 10_000)
                            .to(dtype)
                            .xs;
                        let g_ours = gradients(|x, c, s| ours(x, c, s).unwrap(), &inputs, &w);
                        let slow = |x: &Tensor, c: &Tensor, s: &Tensor| {
                            let (c, s) = (rows_for_candle(c, t), rows_for_candle(s, t));
                            slow_reference(name, x, &c, &s)
                        };
                        let g_ref = gradients(slow, &inputs, &w);
                        let what = format!("{name} {dtype:?} {dims:?} {kind:?}");
                        assert_eq!(g_ours[0].dtype(), dtype);
                        assert_eq!(values(&g_ours[0]), values(&g_ref[0]), "dx {what}");
                        let n = 2 * h * if kind == CsKind::PerSequence { 1 } else { b };
                        let tol = 2.0 * (n * n) as f64 * u * max_abs(&inputs.xs) * max_abs(&w);
                        for (k, which) in [(1, "dcos"), (2, "dsin")] {
                            assert_eq!(g_ours[k].dims(), inputs.cos.dims(), "{which} {what}");
                            let diff = max_abs_diff(&g_ours[k], &g_ref[k]);
                            assert!(diff <= tol, "{which} {what}: {diff} > {tol}");
                        }
                    }
                }
            }
        }
    }
}

/// In f16 and bf16 the gradient with respect to `xs` is the f32 autograd of the slow
/// reference on the widened values, rounded once (the kernels widen, compute in f32, round).
#[test]
fn half_type_gradients_are_the_rounded_f32_gradient() {
    for dtype in [DType::F16, DType::BF16] {
        for (name, ours, _, token_major) in FUNCTIONS {
            for kind in CS_KINDS {
                let (b, h, t, d) = (2, 3, 5, 34);
                let inputs = Inputs::new((b, h, t, d), token_major, kind, 77).to(dtype);
                let w = Inputs::new((b, h, t, d), token_major, kind, 78)
                    .xs
                    .to_dtype(dtype)
                    .unwrap();
                let x = Var::from_tensor(&inputs.xs).unwrap();
                let y = ours(x.as_tensor(), &inputs.cos, &inputs.sin).unwrap();
                let grads = (y * &w).unwrap().sum_all().unwrap().backward().unwrap();
                let dx = grads.get(x.as_tensor()).unwrap();
                assert_eq!(dx.dtype(), dtype);

                let wide = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
                let xw = Var::from_tensor(&wide(&inputs.xs)).unwrap();
                let (c, s) = (
                    rows_for_candle(&inputs.cos, t),
                    rows_for_candle(&inputs.sin, t),
                );
                let y = slow_reference(name, xw.as_tensor(), &wide(&c), &wide(&s));
                let grads = (y * wide(&w))
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                let expected = grads.get(xw.as_tensor()).unwrap().to_dtype(dtype).unwrap();
                assert_eq!(values(dx), values(&expected), "{name} {dtype:?} {kind:?}");
            }
        }
    }
}

/// Non-contiguous `xs`, `cos` and `sin` are rotated as their values (candle-nn refuses them).
#[test]
fn non_contiguous_inputs_are_made_contiguous() {
    for (name, ours, theirs, token_major) in FUNCTIONS {
        let inputs = Inputs::new((2, 3, 6, 8), !token_major, CsKind::Shared, 5);
        // `xs` in the other order, transposed: this function's dims, strided.
        let xs = inputs.xs.transpose(1, 2).unwrap();
        assert!(!xs.is_contiguous());
        // cos/sin stored transposed, viewed as [t, d/2].
        let strided = |t: &Tensor| t.t().unwrap().contiguous().unwrap().t().unwrap();
        let (cos, sin) = (strided(&inputs.cos), strided(&inputs.sin));
        assert!(!cos.is_contiguous());
        assert!(theirs(&xs, &inputs.cos, &inputs.sin).is_err());
        let y = ours(&xs, &cos, &sin).unwrap();
        let expected = theirs(&xs.contiguous().unwrap(), &inputs.cos, &inputs.sin).unwrap();
        assert_eq!(max_abs_diff(&y, &expected), 0.0, "{name}");
    }
}

/// Tensors with no elements (no tokens, no heads, no sequences) give empty results.
#[test]
fn empty_inputs_give_empty_results() {
    for (name, ours, _, token_major) in FUNCTIONS {
        for (b, h, t) in [(1, 2, 0), (1, 0, 3), (0, 2, 3)] {
            let inputs = Inputs::new((b, h, t, 8), token_major, CsKind::Shared, 3);
            let y = ours(&inputs.xs, &inputs.cos, &inputs.sin).unwrap();
            assert_eq!(y.dims(), inputs.xs.dims(), "{name} {:?}", (b, h, t));
        }
    }
}

/// Every malformed call is an error naming the function and what is wrong, never a panic.
#[test]
fn bad_arguments_are_errors_with_clear_messages() {
    let dev = &Device::Cpu;
    let zeros = |dims: &[usize], dtype: DType| Tensor::zeros(dims, dtype, dev).unwrap();
    let f32z = |dims: &[usize]| zeros(dims, DType::F32);
    // t = 4 in both orders ([b, h, t, d] and [b, t, h, d]).
    let x = f32z(&[2, 4, 4, 8]);
    let cs = f32z(&[4, 4]);
    let cases: Vec<(&str, Tensor, Tensor, Tensor, &str)> = vec![
        (
            "xs 3D",
            f32z(&[3, 4, 8]),
            cs.clone(),
            cs.clone(),
            "xs must be 4D",
        ),
        (
            "odd d",
            f32z(&[2, 4, 4, 7]),
            f32z(&[4, 3]),
            f32z(&[4, 3]),
            "is odd",
        ),
        (
            "cos 1D",
            x.clone(),
            f32z(&[16]),
            f32z(&[16]),
            "cos must be 2D",
        ),
        (
            "sin 4D",
            x.clone(),
            cs.clone(),
            f32z(&[1, 2, 4, 4]),
            "sin must be 2D",
        ),
        (
            "2D cos, 3D sin",
            x.clone(),
            cs.clone(),
            f32z(&[2, 4, 4]),
            "same shape",
        ),
        (
            "too few rows",
            x.clone(),
            f32z(&[3, 4]),
            f32z(&[3, 4]),
            "t' >= 4",
        ),
        (
            "width d",
            x.clone(),
            f32z(&[4, 8]),
            f32z(&[4, 8]),
            "do not fit",
        ),
        (
            "batch",
            x.clone(),
            f32z(&[3, 4, 4]),
            f32z(&[3, 4, 4]),
            "[2, t', 4]",
        ),
        (
            "dtype",
            x.clone(),
            zeros(&[4, 4], DType::F16),
            zeros(&[4, 4], DType::F16),
            "one dtype",
        ),
        (
            "ints",
            zeros(&[2, 4, 4, 8], DType::U32),
            zeros(&[4, 4], DType::U32),
            zeros(&[4, 4], DType::U32),
            "not supported",
        ),
    ];
    for (fname, ours, _, _) in FUNCTIONS {
        for (what, xs, cos, sin, needle) in &cases {
            let err = match ours(xs, cos, sin) {
                Ok(_) => panic!("{fname} {what}: accepted"),
                Err(e) => e.to_string(),
            };
            let path = format!("rotary::candle::{fname}:");
            assert!(err.contains(&path), "{fname} {what}: {err}");
            assert!(err.contains(needle), "{fname} {what}: {err}");
        }
    }
}
