//! The gradient of the rotary op (`rotary::rotate_tensor`, whose CPU op has a hand-written
//! backward) through candle's autograd, against central finite differences.
//!
//! The op runs in f32 (it takes f32, f16 and bf16), so the check is made exact by
//! construction rather than by a tiny step: the rotation is linear, so a central difference
//! with any step is the exact derivative, and with inputs on a 2^-10 grid in [-2, 2] and a step
//! of 0.25 the perturbed inputs are exact in f32. What remains is the f32 rounding of the
//! rotation itself (~1e-7 relative per output), hence a tolerance of 1e-5.

use candle_core::{DType, Device, Tensor, Var};
use rotary::{rotate_tensor, Direction, Layout as PairLayout, Order, Positions, Rope};

use super::{to_vec, values};

const STEP: f64 = 0.25;

/// `n` values on a 2^-10 grid in [-2, 2].
fn grid_values(n: usize, seed: u64) -> Vec<f32> {
    values(n, seed, 2.0)
        .into_iter()
        .map(|v| ((v * 1024.0).round() / 1024.0) as f32)
        .collect()
}

#[test]
fn rotate_tensor_gradient_matches_finite_differences() {
    let (batch, heads, seq, head_dim) = (2, 2, 3, 6);
    let positions: Vec<u32> = vec![0, 5, 2, 7, 1, 9]; // one per token of each sequence
    let cases = [
        (
            PairLayout::Interleaved,
            6,
            Order::HeadMajor,
            Direction::Forward,
        ),
        (PairLayout::Half, 6, Order::TokenMajor, Direction::Forward),
        (
            PairLayout::Interleaved,
            4,
            Order::TokenMajor,
            Direction::Inverse,
        ),
        (PairLayout::Half, 4, Order::HeadMajor, Direction::Inverse),
    ];
    for (case, (layout, rotary_dim, order, direction)) in cases.into_iter().enumerate() {
        let rope = Rope::new(head_dim, rotary_dim, 10_000.0, layout).unwrap();
        let coefficients = rope
            .coefficients(Positions::Explicit(&positions), batch, seq)
            .unwrap();
        let dims = match order {
            Order::HeadMajor => [batch, heads, seq, head_dim],
            Order::TokenMajor => [batch, seq, heads, head_dim],
        };
        let n: usize = dims.iter().product();
        let c = Tensor::from_vec(values(n, 50 + case as u64, 1.0), &dims, &Device::Cpu).unwrap();
        let loss = |x: &Tensor| -> Tensor {
            let y = rotate_tensor(x, coefficients.clone(), order, direction).unwrap();
            let y = y.to_dtype(DType::F64).unwrap();
            (y * &c).unwrap().sum_all().unwrap()
        };
        let base = grid_values(n, case as u64);
        let x = Var::from_vec(base.clone(), &dims, &Device::Cpu).unwrap();
        let grads = loss(x.as_tensor()).backward().unwrap();
        let analytic = to_vec(grads.get(x.as_tensor()).expect("rotary: no gradient"));
        let at = |j: usize, delta: f32| {
            let mut v = base.clone();
            v[j] += delta;
            let x = Tensor::from_vec(v, &dims, &Device::Cpu).unwrap();
            loss(&x).to_scalar::<f64>().unwrap()
        };
        for (j, a) in analytic.iter().enumerate() {
            let numeric = (at(j, STEP as f32) - at(j, -STEP as f32)) / (2.0 * STEP);
            assert!(
                (a - numeric).abs() <= 1e-5,
                "case {case} x[{j}]: autograd {a} vs finite differences {numeric}"
            );
        }
        // Coordinates past the rotary dims pass through: their gradient is the loss weight.
        if rotary_dim < head_dim {
            let weights = to_vec(&c);
            for j in (0..n).filter(|j| j % head_dim >= rotary_dim) {
                assert!((analytic[j] - weights[j]).abs() <= 1e-6);
            }
        }
    }
}
