//! Trainable mixed-frequency N-D RoPE on candle: forward equal to the kernels' [`NdRope`], and
//! the gradient with respect to omega equal to finite differences.
#![cfg(feature = "candle")]

use candle_core::{DType, Device, Tensor, Var};
use rotary::candle_mixed::{mixed_rope, omega_tensor, positions_tensor};
use rotary::{Direction, Layout, NdPositions, NdRope, Shape};

const LAYOUTS: [Layout; 2] = [Layout::Interleaved, Layout::Half];

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// The kernels' rotation of `x` (head-major, f32) by `rope` at `positions`.
fn kernel_rotation(rope: &NdRope, x: &[f32], shape: Shape, positions: &NdPositions) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    rope.apply(x, &mut out, shape, positions, Direction::Forward)
        .unwrap();
    out
}

/// Shared omega, shared and per-sequence positions, partial rotation, both layouts. Tolerance
/// 2e-5: both compute f32 products of f32 data with coefficients within an f32 ulp of each
/// other (ours: f64 angles rounded once; candle: f64 angles here, cos/sin cast to f32).
#[test]
fn forward_equals_the_kernels() {
    let dev = Device::Cpu;
    let (batch, heads, seq, head_dim) = (2, 3, 12, 20);
    for layout in LAYOUTS {
        let omega: Vec<f64> = values(16, 1).iter().map(|w| w * 0.8).collect();
        let rope = NdRope::new(head_dim, layout, 2, omega).unwrap();
        let x: Vec<f32> = values(batch * heads * seq * head_dim, 2)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let shape = Shape::head_major(batch, heads, seq, head_dim);
        let xt = Tensor::from_slice(&x, (batch, heads, seq, head_dim), &dev).unwrap();
        let omega_t = omega_tensor(&rope, DType::F64, &dev).unwrap();
        for per_sequence in [false, true] {
            let rows = if per_sequence { batch * seq } else { seq };
            let coords = values(rows * 2, 3).iter().map(|v| v * 30.0).collect();
            let positions = NdPositions::new(2, coords).unwrap();
            let expected = kernel_rotation(&rope, &x, shape, &positions);
            let mut pt = positions_tensor(&positions, DType::F64, &dev).unwrap();
            if per_sequence {
                pt = pt.reshape((batch, seq, 2)).unwrap();
            }
            let y = mixed_rope(&xt, &pt, &omega_t, layout).unwrap();
            let y: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
            for (i, (a, b)) in y.iter().zip(&expected).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-5,
                    "{layout:?} {per_sequence} [{i}]: {a} vs {b}"
                );
            }
        }
    }
}

/// Per-head omega `[heads, axes, pairs]`: head `h` rotates as an `NdRope` with omega `h`.
#[test]
fn per_head_omega_rotates_each_head_with_its_own() {
    let dev = Device::Cpu;
    let (heads, seq, head_dim) = (3, 8, 8);
    let grid = NdPositions::grid_2d(2, 4).unwrap();
    let x: Vec<f32> = values(heads * seq * head_dim, 5)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let ropes: Vec<NdRope> = (0..heads)
        .map(|h| NdRope::rope_mixed_2d(head_dim, head_dim, Layout::Interleaved, 10.0, h as f64))
        .collect::<Result<_, _>>()
        .unwrap();
    let omegas: Vec<Tensor> = ropes
        .iter()
        .map(|r| omega_tensor(r, DType::F64, &dev).unwrap())
        .collect();
    let omega = Tensor::stack(&omegas, 0).unwrap();
    let xt = Tensor::from_slice(&x, (1, heads, seq, head_dim), &dev).unwrap();
    let pt = positions_tensor(&grid, DType::F64, &dev).unwrap();
    let y: Vec<f32> = mixed_rope(&xt, &pt, &omega, Layout::Interleaved)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let one_head = Shape::head_major(1, 1, seq, head_dim);
    for (h, rope) in ropes.iter().enumerate() {
        let part = h * seq * head_dim..(h + 1) * seq * head_dim;
        let expected = kernel_rotation(rope, &x[part.clone()], one_head, &grid);
        for (a, b) in y[part].iter().zip(&expected) {
            assert!((a - b).abs() <= 2e-5, "head {h}: {a} vs {b}");
        }
    }
}

/// d loss / d omega from candle's autograd equals central finite differences, for
/// `loss = sum(w * mixed_rope(x, p, omega))` in f64. Central differences with step 1e-5 have
/// truncation error ~h^2 |f'''| ~ 1e-8 here and rounding error ~1e-16 / 1e-5; 1e-6 relative to
/// the gradient's largest entry covers both.
#[test]
fn gradient_wrt_omega_matches_finite_differences() {
    let dev = Device::Cpu;
    let (batch, heads, seq, head_dim, axes, pairs) = (1, 2, 6, 10, 3, 4);
    for layout in LAYOUTS {
        let x = Tensor::from_vec(
            values(batch * heads * seq * head_dim, 7),
            (batch, heads, seq, head_dim),
            &dev,
        )
        .unwrap();
        let w = Tensor::from_vec(
            values(batch * heads * seq * head_dim, 8),
            (batch, heads, seq, head_dim),
            &dev,
        )
        .unwrap();
        let p_values: Vec<f64> = values(seq * axes, 9).iter().map(|v| v * 5.0).collect();
        let p = Tensor::from_vec(p_values, (seq, axes), &dev).unwrap();
        let omega0 = values(heads * axes * pairs, 10);
        let loss = |omega: &Tensor| -> Tensor {
            (mixed_rope(&x, &p, omega, layout).unwrap() * &w)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        let var = Var::from_vec(omega0.clone(), (heads, axes, pairs), &dev).unwrap();
        let grads = loss(var.as_tensor()).backward().unwrap();
        let grad: Vec<f64> = grads
            .get(var.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let h = 1e-5;
        let at = |omega: Vec<f64>| -> f64 {
            let t = Tensor::from_vec(omega, (heads, axes, pairs), &dev).unwrap();
            loss(&t).to_scalar().unwrap()
        };
        let scale = grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        assert!(scale > 0.1, "a degenerate test: gradient {grad:?}");
        for j in 0..omega0.len() {
            let (mut plus, mut minus) = (omega0.clone(), omega0.clone());
            plus[j] += h;
            minus[j] -= h;
            let numeric = (at(plus) - at(minus)) / (2.0 * h);
            assert!(
                (numeric - grad[j]).abs() <= 1e-6 * scale,
                "{layout:?} omega[{j}]: autograd {} vs finite differences {numeric}",
                grad[j]
            );
        }
    }
}

#[test]
fn mismatched_shapes_are_errors() {
    let dev = Device::Cpu;
    let x = Tensor::zeros((1, 2, 4, 8), DType::F32, &dev).unwrap();
    let omega = Tensor::zeros((2, 4), DType::F32, &dev).unwrap();
    let wrong_axes = Tensor::zeros((4, 3), DType::F32, &dev).unwrap();
    let wrong_seq = Tensor::zeros((5, 2), DType::F32, &dev).unwrap();
    let good = Tensor::zeros((4, 2), DType::F32, &dev).unwrap();
    assert!(mixed_rope(&x, &wrong_axes, &omega, Layout::Half).is_err());
    assert!(mixed_rope(&x, &wrong_seq, &omega, Layout::Half).is_err());
    let too_many_pairs = Tensor::zeros((2, 5), DType::F32, &dev).unwrap();
    assert!(mixed_rope(&x, &good, &too_many_pairs, Layout::Half).is_err());
    let wrong_heads = Tensor::zeros((3, 2, 4), DType::F32, &dev).unwrap();
    assert!(mixed_rope(&x, &good, &wrong_heads, Layout::Half).is_err());
    assert!(mixed_rope(&x, &good, &omega, Layout::Half).is_ok());
}
