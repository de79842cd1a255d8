//! [`softmax_last_dim`]: gradients, agreement with candle-nn and with the slow composition.

use candle_core::{DType, Device, Tensor, D};

use super::{check_gradients, gradients, max_abs_diff, random, FD_TOL, SHAPES};
use crate::autograd::{softmax_last_dim, softmax_last_dim_backward, softmax_last_dim_slow};

#[test]
fn gradient_matches_finite_differences() {
    for (i, dims) in [&[1][..], &[3], &[2, 7], &[2, 3, 8], &[3, 17]]
        .iter()
        .enumerate()
    {
        let x = random(dims, 10 + i as u64, 3.0);
        let f = |t: &[Tensor]| softmax_last_dim(&t[0]);
        check_gradients(&format!("softmax {dims:?}"), &f, &[x], FD_TOL);
    }
}

/// f32 and f64, on every sweep shape: the fused kernel against candle-nn's softmax (1e-6 in
/// f32: both compute `exp(x - max) / sum` in f32 but sum in different orders) and against the
/// slow composition (1e-14 in f64).
#[test]
fn forward_matches_candle_nn_and_slow() {
    for (i, dims) in SHAPES.iter().enumerate() {
        let x = random(dims, 100 + i as u64, 4.0);
        let fast = softmax_last_dim(&x).unwrap();
        assert!(max_abs_diff(&fast, &softmax_last_dim_slow(&x).unwrap()) < 1e-14);
        assert!(max_abs_diff(&fast, &candle_nn::ops::softmax_last_dim(&x).unwrap()) < 1e-14);

        let x = x.to_dtype(DType::F32).unwrap();
        let fast = softmax_last_dim(&x).unwrap();
        assert_eq!(fast.dtype(), DType::F32);
        assert!(max_abs_diff(&fast, &softmax_last_dim_slow(&x).unwrap()) < 1e-6);
        let nn = candle_nn::ops::softmax_last_dim(&x).unwrap();
        assert!(max_abs_diff(&fast, &nn) < 1e-6, "{dims:?}");
    }
}

/// The fused backward against candle's autograd through the slow composition, on every sweep
/// shape (f64: 1e-13; f32: 1e-6 for gradients of size O(1)).
#[test]
fn backward_matches_slow_autograd() {
    for (i, dims) in SHAPES.iter().enumerate() {
        for dtype in [DType::F64, DType::F32] {
            let x = random(dims, 200 + i as u64, 4.0).to_dtype(dtype).unwrap();
            let fast = gradients(
                &|t: &[Tensor]| softmax_last_dim(&t[0]),
                std::slice::from_ref(&x),
            );
            let slow = gradients(&|t: &[Tensor]| softmax_last_dim_slow(&t[0]), &[x]);
            let tol = if dtype == DType::F64 { 1e-13 } else { 1e-6 };
            let err = max_abs_diff(&fast[0], &slow[0]);
            assert!(err < tol, "{dims:?} {dtype:?}: {err:e}");
        }
    }
}

/// The explicit backward equals `y * (g - sum(g * y))` built from primitives.
#[test]
fn explicit_backward_formula() {
    let y = softmax_last_dim(&random(&[3, 4, 17], 7, 2.0)).unwrap();
    let g = random(&[3, 4, 17], 8, 1.0);
    let dot = (&g * &y).unwrap().sum_keepdim(D::Minus1).unwrap();
    let expected = (&y * g.broadcast_sub(&dot).unwrap()).unwrap();
    let got = softmax_last_dim_backward(&y, &g).unwrap();
    assert!(max_abs_diff(&got, &expected) < 1e-15);
    assert!(softmax_last_dim_backward(&y, &g.narrow(2, 0, 16).unwrap()).is_err());
}

/// A strided input (a transpose and a narrow) gives the values and gradients of its
/// contiguous copy.
#[test]
fn non_contiguous_input() {
    let base = random(&[3, 9, 5], 9, 3.0);
    let x = base.transpose(1, 2).unwrap().narrow(2, 1, 7).unwrap();
    assert!(!x.is_contiguous());
    let copy = x.contiguous().unwrap();
    let a = softmax_last_dim(&x).unwrap();
    assert!(max_abs_diff(&a, &softmax_last_dim(&copy).unwrap()) < 1e-15);
    let f = |t: &[Tensor]| softmax_last_dim(&t[0].transpose(1, 2)?.narrow(2, 1, 7)?);
    let fast = gradients(&f, std::slice::from_ref(&base));
    let f = |t: &[Tensor]| softmax_last_dim_slow(&t[0].transpose(1, 2)?.narrow(2, 1, 7)?);
    let slow = gradients(&f, &[base]);
    assert!(max_abs_diff(&fast[0], &slow[0]) < 1e-14);
}

/// f16 and bf16 are computed in f32 and rounded once: within one unit in the last place of
/// the f32 result rounded (softmax values lie in [0, 1], where an f16 ulp is at most 2^-11
/// and a bf16 ulp at most 2^-8); the gradient likewise against the f32 gradient.
#[test]
fn half_precision() {
    for (dtype, ulp) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        for (i, dims) in [&[2, 3, 17][..], &[4, 384], &[96, 384]].iter().enumerate() {
            let x = random(dims, 300 + i as u64, 4.0).to_dtype(dtype).unwrap();
            let x32 = x.to_dtype(DType::F32).unwrap();
            let y = softmax_last_dim(&x).unwrap();
            assert_eq!(y.dtype(), dtype);
            let reference = softmax_last_dim(&x32).unwrap();
            assert!(max_abs_diff(&y, &reference) <= ulp);
            assert!(max_abs_diff(&y, &softmax_last_dim_slow(&x).unwrap()) <= ulp);

            let g = gradients(&|t: &[Tensor]| softmax_last_dim(&t[0]), &[x]);
            let g32 = gradients(&|t: &[Tensor]| softmax_last_dim(&t[0]), &[x32]);
            assert_eq!(g[0].dtype(), dtype);
            // |dx| < 2 here; the loss weights and y, g are rounded to the half type as well.
            assert!(
                max_abs_diff(&g[0], &g32[0]) <= 8.0 * ulp,
                "{dtype:?} {dims:?}"
            );
        }
    }
}

/// Large logits do not overflow (the row maximum is subtracted); a last dim of 1 gives ones
/// and a zero gradient.
#[test]
fn stable_and_degenerate_rows() {
    let x = (random(&[4, 8], 11, 1.0) * 1e4).unwrap();
    let y = softmax_last_dim(&x.to_dtype(DType::F32).unwrap()).unwrap();
    assert!(super::to_vec(&y).iter().all(|v| v.is_finite()));
    let sums = super::to_vec(&y.sum(D::Minus1).unwrap());
    assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-6));

    let x = random(&[5, 1], 12, 3.0);
    assert!(super::to_vec(&softmax_last_dim(&x).unwrap()) == vec![1.0; 5]);
    let g = gradients(&|t: &[Tensor]| softmax_last_dim(&t[0]), &[x]);
    assert!(super::to_vec(&g[0]).iter().all(|v| *v == 0.0));
}

#[test]
fn bad_inputs_are_errors() {
    let scalar = Tensor::new(1f32, &Device::Cpu).unwrap();
    assert!(softmax_last_dim(&scalar).is_err());
    let ints = Tensor::zeros((2, 3), DType::U32, &Device::Cpu).unwrap();
    assert!(softmax_last_dim(&ints).is_err());
    let empty = Tensor::zeros((2, 0), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(softmax_last_dim(&empty).unwrap().dims(), &[2, 0]);
}

/// The primitive backward (the path off the CPU) equals the fused one (f64: 1e-14; f32: 1e-6;
/// f16 within an ulp of |dx| < 2, 2^-10).
#[test]
fn primitive_backward_matches_fused() {
    use crate::autograd::softmax::softmax_backward_primitives;
    for (i, dims) in SHAPES.iter().enumerate() {
        for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 1e-6), (DType::F16, 1e-3)] {
            let y = softmax_last_dim(&random(dims, 400 + i as u64, 3.0)).unwrap();
            let (y, g) = (
                y.to_dtype(dtype).unwrap(),
                random(dims, 500 + i as u64, 1.0),
            );
            let g = g.to_dtype(dtype).unwrap();
            let fused = softmax_last_dim_backward(&y, &g).unwrap();
            let slow = softmax_backward_primitives(&y, &g).unwrap();
            assert_eq!(slow.dtype(), dtype);
            assert!(max_abs_diff(&fused, &slow) <= tol, "{dims:?} {dtype:?}");
        }
    }
}
