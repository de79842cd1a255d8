//! Tests of the optimisation module (one file per concern) and their shared helpers.

mod adamw;
mod gradients;
mod schedule;
mod state;
mod torch;

use candle_core::{Device, Tensor, Var};

/// Deterministic pseudo-random values in `[-1, 1)` (xorshift64*), `n` of them.
pub(super) fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let bits = s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40; // 24 bits
            bits as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// An `f32` CPU variable of `dims` filled with [`values`]`(seed)`.
pub(super) fn var(seed: u64, dims: &[usize]) -> Var {
    let n = dims.iter().product();
    Var::from_vec(values(seed, n), dims, &Device::Cpu).expect("var")
}

/// An `f32` CPU tensor of `dims` filled with [`values`]`(seed)` times `scale`.
pub(super) fn tensor(seed: u64, dims: &[usize], scale: f32) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f32> = values(seed, n).iter().map(|x| x * scale).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).expect("tensor")
}

/// The values of a tensor as a flat `f32` vector.
pub(super) fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().and_then(|t| t.to_vec1()).expect("flat")
}
