//! [`layer_norm`]: gradients for x, weight and bias; agreement with candle-nn's `LayerNorm`
//! and with the slow composition; gradient flow through a small loss.

use candle_core::{DType, Device, Module, Tensor, Var};

use super::{check_gradients, gradients, max_abs_diff, random, to_vec, FD_TOL, SHAPES};
use crate::autograd::{layer_norm, layer_norm_slow, rms_norm, softmax_last_dim};

/// x, weight and bias for `dims`, x offset by 0.5 so the row means are not all near 0.
fn inputs(dims: &[usize], seed: u64, dtype: DType) -> [Tensor; 3] {
    let d = dims[dims.len() - 1];
    let x = (random(dims, seed, 2.0) + 0.5).unwrap();
    let w = (random(&[d], seed + 1, 1.0) + 1.0).unwrap();
    let b = random(&[d], seed + 2, 1.0);
    [x, w, b].map(|t| t.to_dtype(dtype).unwrap())
}

fn fast(t: &[Tensor]) -> candle_core::Result<Tensor> {
    layer_norm(&t[0], &t[1], &t[2], 1e-5)
}

fn slow(t: &[Tensor]) -> candle_core::Result<Tensor> {
    layer_norm_slow(&t[0], &t[1], &t[2], 1e-5)
}

/// dx, dw and db against central finite differences (f64), also with the model's eps 1e-12.
#[test]
fn gradients_match_finite_differences() {
    for (i, dims) in [&[1][..], &[3], &[2, 7], &[2, 3, 8], &[3, 17]]
        .iter()
        .enumerate()
    {
        let t = inputs(dims, 10 * i as u64, DType::F64);
        check_gradients(&format!("layer_norm {dims:?}"), &fast, &t, FD_TOL);
        let tiny_eps = |t: &[Tensor]| layer_norm(&t[0], &t[1], &t[2], 1e-12);
        check_gradients(
            &format!("layer_norm eps 1e-12 {dims:?}"),
            &tiny_eps,
            &t,
            FD_TOL,
        );
    }
}

/// The fused kernel against the slow composition (f64: 1e-13) and against candle-nn's
/// `LayerNorm` (f32: 1e-5; candle-nn computes the variance as `E[x^2] - E[x]^2` in f32, which
/// loses a few more bits than the two-pass variance here).
#[test]
fn forward_matches_candle_nn_and_slow() {
    for (i, dims) in SHAPES.iter().enumerate() {
        let t = inputs(dims, 100 + i as u64, DType::F64);
        let y = fast(&t).unwrap();
        assert!(max_abs_diff(&y, &slow(&t).unwrap()) < 1e-13, "{dims:?}");

        let t = t.map(|t| t.to_dtype(DType::F32).unwrap());
        let y = fast(&t).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        assert!(max_abs_diff(&y, &slow(&t).unwrap()) < 2e-6, "{dims:?}");
        let nn = candle_nn::LayerNorm::new(t[1].clone(), t[2].clone(), 1e-5);
        assert!(
            max_abs_diff(&y, &nn.forward(&t[0]).unwrap()) < 1e-5,
            "{dims:?}"
        );
    }
}

/// dx, dw, db of the fused backward against candle's autograd through the slow composition on
/// every sweep shape (f64: 1e-12; f32: 1e-5 relative to the largest gradient, since dw and db
/// sum over up to 320 rows).
#[test]
fn backward_matches_slow_autograd() {
    for (i, dims) in SHAPES.iter().enumerate() {
        for dtype in [DType::F64, DType::F32] {
            let t = inputs(dims, 200 + i as u64, dtype);
            let a = gradients(&fast, &t);
            let b = gradients(&slow, &t);
            for (k, (a, b)) in a.iter().zip(&b).enumerate() {
                assert_eq!(a.dims(), t[k].dims());
                let scale = to_vec(b).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
                let err = max_abs_diff(a, b) / scale;
                assert!(err < tol, "{dims:?} {dtype:?} input {k}: {err:e}");
            }
        }
    }
}

/// Strided x (a transpose) gives the values and gradients of its contiguous copy.
#[test]
fn non_contiguous_input() {
    let x = random(&[3, 11, 4], 5, 2.0);
    let xt = x.transpose(1, 2).unwrap();
    assert!(!xt.is_contiguous());
    let w = random(&[11], 6, 1.0);
    let b = random(&[11], 7, 1.0);
    let y = layer_norm(&xt, &w, &b, 1e-5).unwrap();
    let y_copy = layer_norm(&xt.contiguous().unwrap(), &w, &b, 1e-5).unwrap();
    assert!(max_abs_diff(&y, &y_copy) < 1e-15);
    let f = |t: &[Tensor]| layer_norm(&t[0].transpose(1, 2)?, &t[1], &t[2], 1e-5);
    let g = |t: &[Tensor]| layer_norm_slow(&t[0].transpose(1, 2)?, &t[1], &t[2], 1e-5);
    let args = [x, w, b];
    for (a, b) in gradients(&f, &args).iter().zip(&gradients(&g, &args)) {
        assert!(max_abs_diff(a, b) < 1e-12);
    }
}

/// f16 and bf16 (x, weight and bias of the type) are computed in f32 and rounded once: within
/// one ulp of the f32 result at its magnitude (|y| < 8 here: an f16 ulp below 8 is at most
/// 2^-8, a bf16 one 2^-5); gradients within a few ulps of the f32 ones.
#[test]
fn half_precision() {
    for (dtype, ulp) in [(DType::F16, 2f64.powi(-8)), (DType::BF16, 2f64.powi(-5))] {
        for (i, dims) in [&[2, 3, 17][..], &[4, 384], &[96, 384]].iter().enumerate() {
            let t = inputs(dims, 300 + i as u64, dtype);
            let t32 = t.clone().map(|t| t.to_dtype(DType::F32).unwrap());
            let y = fast(&t).unwrap();
            assert_eq!(y.dtype(), dtype);
            assert!(
                max_abs_diff(&y, &fast(&t32).unwrap()) <= ulp,
                "{dtype:?} {dims:?}"
            );
            let a = gradients(&fast, &t);
            let b = gradients(&fast, &t32);
            for (a, b) in a.iter().zip(&b) {
                assert_eq!(a.dtype(), dtype);
                let scale = to_vec(b).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
                // Relative to the largest gradient: dw and db are sums over up to 96 rows.
                assert!(max_abs_diff(a, b) / scale <= 0.05, "{dtype:?} {dims:?}");
            }
        }
    }
}

/// A loss through layer_norm, softmax and rms_norm gives every parameter a nonzero gradient.
#[test]
fn loss_reaches_every_parameter() {
    for dtype in [DType::F32, DType::F64] {
        let [x, w, b] = inputs(&[2, 5, 8], 7, dtype);
        let (x, w, b) = (
            Var::from_tensor(&x).unwrap(),
            Var::from_tensor(&w).unwrap(),
            Var::from_tensor(&b).unwrap(),
        );
        let h = layer_norm(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
        let h = rms_norm(&softmax_last_dim(&h).unwrap(), 1e-6).unwrap();
        let c = random(&[2, 5, 8], 8, 1.0).to_dtype(dtype).unwrap();
        let grads = (h * c).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, v) in [("x", &x), ("weight", &w), ("bias", &b)] {
            let g = grads
                .get(v.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            assert_eq!(g.dims(), v.dims());
            assert!(to_vec(g).iter().any(|v| *v != 0.0), "{name}: all zero");
            assert!(
                to_vec(g).iter().all(|v| v.is_finite()),
                "{name}: not finite"
            );
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let [x, w, b] = inputs(&[2, 4], 1, DType::F32);
    let short = w.narrow(0, 0, 3).unwrap();
    assert!(layer_norm(&x, &short, &b, 1e-5).is_err());
    assert!(layer_norm(&x, &w, &short, 1e-5).is_err());
    assert!(layer_norm(&x, &w.to_dtype(DType::F64).unwrap(), &b, 1e-5).is_err());
    let w2 = w.reshape((1, 4)).unwrap();
    assert!(layer_norm(&x, &w2, &b, 1e-5).is_err());
    let scalar = Tensor::new(1f32, &Device::Cpu).unwrap();
    assert!(layer_norm(&scalar, &w, &b, 1e-5).is_err());
}

/// The primitive backward (the path off the CPU) equals the fused one for dx, dw and db (f64:
/// 1e-12; f32: 1e-5 relative to the largest gradient).
#[test]
fn primitive_backward_matches_fused() {
    use crate::autograd::layer_norm::{layer_norm_backward, layer_norm_backward_primitives};
    for (i, dims) in SHAPES.iter().enumerate() {
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
            let [x, w, _] = inputs(dims, 400 + i as u64, dtype);
            let g = random(dims, 500 + i as u64, 1.0).to_dtype(dtype).unwrap();
            let (a, b, c) = layer_norm_backward(&x, &w, &g, 1e-5).unwrap();
            let (d, e, f) = layer_norm_backward_primitives(&x, &w, &g, 1e-5).unwrap();
            for (fused, slow) in [(a, d), (b, e), (c, f)] {
                assert_eq!(fused.dims(), slow.dims());
                let scale = to_vec(&slow).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
                assert!(
                    max_abs_diff(&fused, &slow) / scale <= tol,
                    "{dims:?} {dtype:?}"
                );
            }
        }
    }
}

/// dx, dw and db are the same bits on 1 to 4 threads (rows in tasks of a fixed size, the
/// partial sums of dw and db added in task order).
#[test]
fn backward_is_the_same_on_any_thread_count() {
    use crate::autograd::layer_norm::layer_norm_backward;
    let [x, w, _] = inputs(&[512, 256], 9, DType::F32);
    let g = random(&[512, 256], 10, 1.0).to_dtype(DType::F32).unwrap();
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let (dx, dw, db) = layer_norm_backward(&x, &w, &g, 1e-12).unwrap();
                [dx, dw, db].map(|t| to_vec(&t))
            })
    };
    let one = run(1);
    for threads in 2..=4 {
        assert!(run(threads) == one, "{threads} threads differ from one");
    }
}
