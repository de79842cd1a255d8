//! Every [`Activation`] carries gradients through candle's autograd, equal to finite
//! differences away from its kinks and a one-sided derivative's value or between them at them.

use candle_core::{DType, Device, Tensor, Var};

use super::{check_gradients, to_vec};
use crate::activation::Activation;

/// Every variant; [`ordinal`]'s exhaustive match fails to compile when one is added.
const ALL: [Activation; 16] = [
    Activation::Gelu,
    Activation::Gelu10,
    Activation::GeluTanh,
    Activation::GeluFast,
    Activation::QuickGelu,
    Activation::Relu,
    Activation::Relu2,
    Activation::Relu6,
    Activation::LeakyRelu,
    Activation::Silu,
    Activation::Mish,
    Activation::HardSwish,
    Activation::Sigmoid,
    Activation::Tanh,
    Activation::Linear,
    Activation::Laplace,
];

/// The position of `a` in [`ALL`].
fn ordinal(a: Activation) -> usize {
    match a {
        Activation::Gelu => 0,
        Activation::Gelu10 => 1,
        Activation::GeluTanh => 2,
        Activation::GeluFast => 3,
        Activation::QuickGelu => 4,
        Activation::Relu => 5,
        Activation::Relu2 => 6,
        Activation::Relu6 => 7,
        Activation::LeakyRelu => 8,
        Activation::Silu => 9,
        Activation::Mish => 10,
        Activation::HardSwish => 11,
        Activation::Sigmoid => 12,
        Activation::Tanh => 13,
        Activation::Linear => 14,
        Activation::Laplace => 15,
    }
}

/// Points away from every kink (0, +-3, 6, softplus's switch at 20, gelu_10's clip near 10),
/// covering the saturated tails.
const POINTS: &[f64] = &[
    -30.0, -19.5, -8.13, -5.7, -3.21, -2.9, -1.37, -0.51, -0.05, 0.03, 0.42, 0.7, 1.1, 2.73, 3.3,
    5.9, 6.4, 9.7, 11.2, 19.5, 20.5, 31.0,
];

/// Tolerance of the activation checks: candle's backward of `gelu_erf` uses the 6-digit
/// constant 0.398942 for `1/sqrt(2 pi)` (0.3989422804...), an error of up to
/// `2.8e-7 * max |x exp(-x^2/2)| = 1.7e-7`; everything else is exact to ~1e-10 as in [`FD_TOL`].
///
/// [`FD_TOL`]: super::FD_TOL
const ACTIVATION_TOL: f64 = 1e-6;

#[test]
fn every_variant_is_named_and_listed() {
    let mut seen = [false; ALL.len()];
    for name in Activation::known_names() {
        seen[ordinal(Activation::parse("hidden_act", name).unwrap())] = true;
    }
    assert!(seen.iter().all(|s| *s));
    for (i, a) in ALL.iter().enumerate() {
        assert_eq!(ordinal(*a), i);
    }
}

#[test]
fn every_gradient_matches_finite_differences() {
    let x = Tensor::new(POINTS, &Device::Cpu).unwrap();
    for a in ALL {
        let f = move |t: &[Tensor]| a.forward(&t[0]);
        check_gradients(
            &format!("{a:?}"),
            &f,
            std::slice::from_ref(&x),
            ACTIVATION_TOL,
        );
    }
}

/// The derivative by autograd of the element-wise `f` at each of `points` (`d sum f(x) / dx`).
fn derivative(a: Activation, points: &[f64], dtype: DType) -> Vec<f64> {
    let x = Tensor::new(points, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let x = Var::from_tensor(&x).unwrap();
    let y = a.forward(x.as_tensor()).unwrap();
    assert_eq!(y.dtype(), dtype);
    let grads = y.sum_all().unwrap().backward().unwrap();
    let g = grads
        .get(x.as_tensor())
        .unwrap_or_else(|| panic!("{a:?}: no gradient"));
    assert_eq!(g.dtype(), dtype);
    to_vec(g)
}

/// At a kink the gradient is finite and lies between the one-sided derivatives (candle gives
/// `maximum`/`minimum` ties half the gradient each side, and `relu` the right derivative).
#[test]
fn kinks_have_a_subgradient() {
    let cases: &[(Activation, &[f64])] = &[
        (Activation::Relu, &[0.0]),
        (Activation::Relu2, &[0.0]),
        (Activation::Relu6, &[0.0, 6.0]),
        (Activation::LeakyRelu, &[0.0]),
        (Activation::HardSwish, &[-3.0, 3.0]),
        (Activation::Mish, &[20.0]),
    ];
    let h = 1e-7;
    for (a, points) in cases {
        let grad = derivative(*a, points, DType::F64);
        for (&p, g) in points.iter().zip(grad) {
            let at = |x: f64| {
                let t = Tensor::new(&[x], &Device::Cpu).unwrap();
                to_vec(&a.forward(&t).unwrap())[0]
            };
            let left = (at(p) - at(p - h)) / h;
            let right = (at(p + h) - at(p)) / h;
            let (lo, hi) = (left.min(right) - 1e-6, left.max(right) + 1e-6);
            assert!(
                g.is_finite() && lo <= g && g <= hi,
                "{a:?} at {p}: {g} not in [{lo}, {hi}]"
            );
        }
    }
}

/// f16, bf16 and f32 inputs get gradients of their own dtype, close to the f64 ones.
#[test]
fn half_precision_gradients() {
    let points: Vec<f64> = (-12..=12).map(|i| f64::from(i) * 0.37 + 0.01).collect();
    for a in ALL {
        let exact = derivative(a, &points, DType::F64);
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 1e-1)] {
            let got = derivative(a, &points, dtype);
            for ((g, e), p) in got.iter().zip(&exact).zip(&points) {
                assert!(
                    (g - e).abs() <= tol * e.abs().max(1.0),
                    "{a:?} {dtype:?} at {p}: {g} vs {e}"
                );
            }
        }
    }
}
