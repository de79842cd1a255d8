//! [`rms_norm`]: gradients, agreement with the slow composition, half precision.

use candle_core::{DType, Device, Tensor};

use super::{check_gradients, gradients, max_abs_diff, random, to_vec, FD_TOL, SHAPES};
use crate::autograd::{rms_norm, rms_norm_slow};

#[test]
fn gradient_matches_finite_differences() {
    for (i, dims) in [&[1][..], &[3], &[2, 7], &[2, 3, 8], &[3, 17]]
        .iter()
        .enumerate()
    {
        let x = random(dims, 10 + i as u64, 2.0);
        for eps in [1e-6, 1e-12] {
            let f = |t: &[Tensor]| rms_norm(&t[0], eps);
            check_gradients(
                &format!("rms_norm {dims:?} eps {eps}"),
                &f,
                std::slice::from_ref(&x),
                FD_TOL,
            );
        }
    }
}

/// The fused forward and backward against the slow composition and its autograd gradient
/// (f64: 1e-13; f32: 2e-6 for values and gradients of size O(1)-O(10)).
#[test]
fn forward_and_backward_match_slow() {
    for (i, dims) in SHAPES.iter().enumerate() {
        for dtype in [DType::F64, DType::F32] {
            let x = random(dims, 100 + i as u64, 3.0).to_dtype(dtype).unwrap();
            let tol = if dtype == DType::F64 { 1e-13 } else { 2e-6 };
            let y = rms_norm(&x, 1e-6).unwrap();
            assert_eq!(y.dtype(), dtype);
            assert!(max_abs_diff(&y, &rms_norm_slow(&x, 1e-6).unwrap()) < tol);
            let a = gradients(
                &|t: &[Tensor]| rms_norm(&t[0], 1e-6),
                std::slice::from_ref(&x),
            );
            let b = gradients(&|t: &[Tensor]| rms_norm_slow(&t[0], 1e-6), &[x]);
            let scale = to_vec(&b[0]).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
            let err = max_abs_diff(&a[0], &b[0]) / scale;
            assert!(err < tol, "{dims:?} {dtype:?}: {err:e}");
        }
    }
}

/// Strided x gives the values of its contiguous copy.
#[test]
fn non_contiguous_input() {
    let x = random(&[4, 9, 6], 3, 2.0).transpose(0, 2).unwrap();
    assert!(!x.is_contiguous());
    let a = rms_norm(&x, 1e-6).unwrap();
    let b = rms_norm(&x.contiguous().unwrap(), 1e-6).unwrap();
    assert!(max_abs_diff(&a, &b) < 1e-15);
}

/// f16/bf16 computed in f32 and rounded once: within one ulp of the f32 result (|y| <=
/// sqrt(D) but below 8 here: f16 ulp 2^-8, bf16 ulp 2^-5); gradients close to the f32 ones.
#[test]
fn half_precision() {
    for (dtype, ulp) in [(DType::F16, 2f64.powi(-8)), (DType::BF16, 2f64.powi(-5))] {
        for (i, dims) in [&[2, 3, 17][..], &[96, 384]].iter().enumerate() {
            let x = random(dims, 300 + i as u64, 3.0).to_dtype(dtype).unwrap();
            let x32 = x.to_dtype(DType::F32).unwrap();
            let y = rms_norm(&x, 1e-6).unwrap();
            assert_eq!(y.dtype(), dtype);
            assert!(to_vec(&y).iter().all(|v| v.abs() < 8.0));
            assert!(max_abs_diff(&y, &rms_norm(&x32, 1e-6).unwrap()) <= ulp);
            let a = gradients(&|t: &[Tensor]| rms_norm(&t[0], 1e-6), &[x]);
            let b = gradients(&|t: &[Tensor]| rms_norm(&t[0], 1e-6), &[x32]);
            assert_eq!(a[0].dtype(), dtype);
            let scale = to_vec(&b[0]).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
            assert!(
                max_abs_diff(&a[0], &b[0]) / scale <= 0.05,
                "{dtype:?} {dims:?}"
            );
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let scalar = Tensor::new(1f32, &Device::Cpu).unwrap();
    assert!(rms_norm(&scalar, 1e-6).is_err());
    let ints = Tensor::zeros((2, 3), DType::I64, &Device::Cpu).unwrap();
    assert!(rms_norm(&ints, 1e-6).is_err());
}

/// The primitive backward (the path off the CPU) equals the fused one (f64: 1e-13; f32: 2e-6
/// relative to the largest gradient).
#[test]
fn primitive_backward_matches_fused() {
    use crate::autograd::rms_norm::{rms_norm_backward, rms_norm_backward_primitives};
    for (i, dims) in SHAPES.iter().enumerate() {
        for (dtype, tol) in [(DType::F64, 1e-13), (DType::F32, 2e-6)] {
            let x = random(dims, 400 + i as u64, 3.0).to_dtype(dtype).unwrap();
            let g = random(dims, 500 + i as u64, 1.0).to_dtype(dtype).unwrap();
            let fused = rms_norm_backward(&x, &g, 1e-6).unwrap();
            let slow = rms_norm_backward_primitives(&x, &g, 1e-6).unwrap();
            let scale = to_vec(&slow).iter().fold(1.0, |m: f64, v| m.max(v.abs()));
            assert!(
                max_abs_diff(&fused, &slow) / scale <= tol,
                "{dims:?} {dtype:?}"
            );
        }
    }
}
