//! CPU slice helpers shared by the gradient operations and AdamW: conversion of tensors to
//! `f32` buffers, chunked (rayon) loops over large buffers, and in-place access to a `Var`'s
//! storage.
//!
//! Every reduction here has a fixed summation order (fixed chunks, chunk sums added in order),
//! so results do not depend on the thread count or on rayon's work stealing.

use std::cell::RefCell;

use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Tensor, Var};
use rayon::prelude::*;

use super::error::Result;

/// Buffers at least this long are processed in parallel chunks.
pub(crate) const PAR_MIN: usize = 1 << 15;
/// The chunk length of the parallel loops (and of the fixed-order reductions).
pub(crate) const CHUNK: usize = 1 << 14;

/// The elements of `t`, converted to `f32`, in row-major order (copied to the CPU when needed).
pub(crate) fn to_f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// `Σ xᵢ²` in `f64`, eight interleaved partial sums per chunk (vectorisable), chunks of
/// [`CHUNK`] summed in order: the same result whatever the parallelism.
pub(crate) fn sum_squares(xs: &[f32]) -> f64 {
    fn seq(xs: &[f32]) -> f64 {
        let mut acc = [0f64; 8];
        let mut it = xs.chunks_exact(8);
        for c in &mut it {
            for (a, &x) in acc.iter_mut().zip(c) {
                let x = f64::from(x);
                *a += x * x;
            }
        }
        let tail: f64 = it
            .remainder()
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum();
        acc.iter().sum::<f64>() + tail
    }
    if xs.len() < PAR_MIN {
        // Same chunking as the parallel branch, so the result does not depend on the length
        // threshold either.
        return xs.chunks(CHUNK).map(seq).sum();
    }
    let partial: Vec<f64> = xs.par_chunks(CHUNK).map(seq).collect();
    partial.iter().sum()
}

/// Whether every element of `xs` is finite: an integer test of the exponent bits (all ones
/// for NaN and ±∞), OR-reduced over chunks of [`CHUNK`] (vectorisable, no early exit inside a
/// chunk), chunks in parallel for large buffers.
pub(crate) fn all_finite(xs: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    let chunk_ok = |c: &[f32]| {
        !c.iter()
            .fold(false, |bad, x| bad | (x.to_bits() & EXPONENT == EXPONENT))
    };
    if xs.len() < PAR_MIN {
        xs.chunks(CHUNK).all(chunk_ok)
    } else {
        xs.par_chunks(CHUNK).all(chunk_ok)
    }
}

/// Applies `f` to every element of `xs` (in parallel chunks for large buffers).
pub(crate) fn map_in_place(xs: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    let run = |c: &mut [f32]| c.iter_mut().for_each(|x| *x = f(*x));
    if xs.len() < PAR_MIN {
        run(xs);
    } else {
        xs.par_chunks_mut(CHUNK).for_each(run);
    }
}

/// `xs[i] += ys[i]` (in parallel chunks for large buffers); lengths are checked by the caller.
pub(crate) fn add_assign(xs: &mut [f32], ys: &[f32]) {
    let run = |(a, b): (&mut [f32], &[f32])| a.iter_mut().zip(b).for_each(|(x, &y)| *x += y);
    if xs.len() < PAR_MIN {
        run((xs, ys));
    } else {
        xs.par_chunks_mut(CHUNK)
            .zip(ys.par_chunks(CHUNK))
            .for_each(run);
    }
}

/// Hands the storage of a contiguous `f32` CPU tensor to a closure, once.
struct WithSlice<F> {
    f: RefCell<Option<F>>,
}

impl<F: FnOnce(&mut [f32])> InplaceOp1 for WithSlice<F> {
    fn name(&self) -> &'static str {
        "roformer-optim-in-place"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let slice = crate::cpu::tensor::f32_slice_mut(storage, layout, "in-place update")?;
        if let Some(f) = self.f.borrow_mut().take() {
            f(slice);
        }
        Ok(())
    }
}

/// Runs `f` on the values of `var` as one mutable `f32` slice (row-major) and leaves the result
/// in `var`.
///
/// A contiguous `f32` variable on the CPU is updated in place, in its own storage (no copy).
/// Any other variable (another device or dtype) takes the fallback path: its values are copied
/// to a CPU `f32` buffer, `f` runs there, and the result is converted back to the variable's
/// dtype and device and written with [`Var::set`] (a lower-precision dtype rounds the result).
pub(crate) fn update_var(var: &Var, f: impl FnOnce(&mut [f32])) -> Result<()> {
    if crate::cpu::tensor::all_f32_on_cpu(&[var.as_tensor()]) && var.is_contiguous() {
        var.inplace_op1(&WithSlice {
            f: RefCell::new(Some(f)),
        })?;
        return Ok(());
    }
    let mut values = to_f32_vec(var.as_tensor())?;
    f(&mut values);
    let t = Tensor::from_vec(values, var.shape(), &Device::Cpu)?
        .to_dtype(var.dtype())?
        .to_device(var.device())?;
    var.set(&t)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_squares_is_exact_on_small_integers_and_independent_of_length_threshold() {
        let xs: Vec<f32> = (0..100_003).map(|i| (i % 7) as f32 - 3.0).collect();
        let expect: f64 = xs.iter().map(|&x| f64::from(x * x)).sum();
        assert_eq!(sum_squares(&xs), expect);
        assert_eq!(sum_squares(&xs[..5]), 9.0 + 4.0 + 1.0 + 0.0 + 1.0);
    }

    #[test]
    fn all_finite_finds_nan_and_infinities_anywhere() {
        let mut xs = vec![f32::MAX; 70_001];
        xs[3] = f32::MIN_POSITIVE / 2.0; // subnormal: finite
        assert!(all_finite(&xs) && all_finite(&xs[..10]) && all_finite(&[]));
        for (i, bad) in [
            (0, f32::NAN),
            (40_000, f32::INFINITY),
            (70_000, f32::NEG_INFINITY),
        ] {
            let mut ys = xs.clone();
            ys[i] = bad;
            assert!(!all_finite(&ys), "{i}");
        }
    }

    #[test]
    fn update_var_in_place_and_through_the_fallback() -> Result<()> {
        let v = Var::from_vec(vec![1f32, 2., 3., 4.], (2, 2), &Device::Cpu)?;
        update_var(&v, |xs| xs.iter_mut().for_each(|x| *x *= 2.0))?;
        assert_eq!(to_f32_vec(&v)?, [2., 4., 6., 8.]);
        let w = Var::from_vec(vec![1f64, 2.], 2, &Device::Cpu)?;
        update_var(&w, |xs| xs.iter_mut().for_each(|x| *x += 0.5))?;
        assert_eq!(w.dtype(), DType::F64);
        assert_eq!(w.to_vec1::<f64>()?, [1.5, 2.5]);
        Ok(())
    }
}
