//! Tests of the differentiable ops: gradients against central finite differences, fast paths
//! against candle-nn and against the slow compositions of primitives, half precision, and
//! gradient flow through a loss.
//!
//! Finite differences: `dL/dx_j ~ (L(x + h e_j) - L(x - h e_j)) / 2h` in f64 with `h = 1e-5`
//! and `L = sum(f(x) * c)` for fixed random `c` (so that softmax's constant row sums do not
//! hide anything). The truncation error is `h^2 |L'''| / 6 ~ 1e-10` and the rounding error
//! `eps_f64 |L| / h ~ 1e-10` for the O(1)-O(10) values used, so [`FD_TOL`] = 1e-7 (relative to
//! `max(1, |gradient|)`) leaves a wide margin while catching any wrong term.

mod activation;
mod add_norm;
mod fused_ops;
mod layer_norm;
mod mlp_branch;
mod prenorm;
mod rms_norm;
mod rotary;
mod softmax;
mod timing;

use candle_core::{DType, Device, Tensor, Var};
use test_support::{SplitMix64, GAMMA};

/// Step of the central differences.
pub(super) const FD_STEP: f64 = 1e-5;

/// Tolerance of the finite-difference checks of the f64 ops (see the module docs).
pub(super) const FD_TOL: f64 = 1e-7;

/// `n` reproducible pseudo-random values in `[-scale, scale)` (SplitMix64).
pub(crate) fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed.wrapping_mul(GAMMA).wrapping_add(1));
    (0..n).map(|_| (2.0 * rng.unit() - 1.0) * scale).collect()
}

/// A reproducible f64 tensor of `dims` with values in `[-scale, scale)`.
pub(crate) fn random(dims: &[usize], seed: u64, scale: f64) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_vec(values(n, seed, scale), dims, &Device::Cpu).unwrap()
}

pub(super) use test_support::max_abs_diff;

/// The elements of `t` as f64.
pub(crate) fn to_vec(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// `sum(f(inputs) * c)` for fixed random `c` of the output's shape, as a scalar tensor.
fn weighted_loss(
    f: &dyn Fn(&[Tensor]) -> candle_core::Result<Tensor>,
    inputs: &[Tensor],
) -> Tensor {
    let y = f(inputs).unwrap();
    let c = random(y.dims(), 0xC0FFEE, 1.0).to_dtype(y.dtype()).unwrap();
    (y * c).unwrap().sum_all().unwrap()
}

/// Checks the autograd gradient of `L = sum(f(inputs) * c)` with respect to every input
/// against central finite differences (f64), element by element, to `tol` relative to
/// `max(1, |gradient|)`.
pub(super) fn check_gradients(
    what: &str,
    f: &dyn Fn(&[Tensor]) -> candle_core::Result<Tensor>,
    inputs: &[Tensor],
    tol: f64,
) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let grads = weighted_loss(f, &tensors).backward().unwrap();
    for (k, var) in vars.iter().enumerate() {
        let analytic = to_vec(
            grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{what}: no gradient for input {k}")),
        );
        let base = to_vec(&inputs[k]);
        for j in 0..base.len() {
            let at = |delta: f64| {
                let mut v = base.clone();
                v[j] += delta;
                let mut moved = inputs.to_vec();
                moved[k] = Tensor::from_vec(v, inputs[k].dims(), &Device::Cpu).unwrap();
                weighted_loss(f, &moved).to_scalar::<f64>().unwrap()
            };
            let numeric = (at(FD_STEP) - at(-FD_STEP)) / (2.0 * FD_STEP);
            let err = (analytic[j] - numeric).abs();
            assert!(
                err <= tol * analytic[j].abs().max(1.0),
                "{what}: input {k}[{j}]: autograd {} vs finite differences {numeric} (err {err:e})",
                analytic[j]
            );
        }
    }
}

/// The gradients of `L = sum(f(inputs) * c)` with respect to every input, by autograd.
pub(super) fn gradients(
    f: &dyn Fn(&[Tensor]) -> candle_core::Result<Tensor>,
    inputs: &[Tensor],
) -> Vec<Tensor> {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let grads = weighted_loss(f, &tensors).backward().unwrap();
    vars.iter()
        .map(|v| grads.get(v.as_tensor()).unwrap().clone())
        .collect()
}

/// Leading dims and a last dim for the awkward-size sweeps.
pub(super) const SHAPES: &[&[usize]] = &[
    &[1],
    &[3],
    &[4, 1],
    &[2, 3],
    &[5, 7],
    &[2, 3, 8],
    &[3, 17],
    &[2, 2, 3, 17],
    &[4, 384],
    &[2, 3, 384],
    // Large enough for the rayon path (>= 2^15 elements).
    &[96, 384],
    &[2, 4, 40, 128],
];
