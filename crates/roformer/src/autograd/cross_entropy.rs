//! Mean cross entropy of rows of logits against targets as one op, with the arg-max of each
//! row from the same pass.
//!
//! ```text
//! forward   lse_i = m_i + ln sum_j exp(x_ij - m_i),  m_i = max_j x_ij
//!           loss = (1/n) sum_i (lse_i - x_i,target_i)
//! backward  dx_ij = (g / n) (exp(x_ij - lse_i) - [j = target_i])
//! ```

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::cpu::math::{exp_approx, multiversion, LANES};
use crate::cpu::tensor::{f32_slice, tensor, with_f32};

/// The mean cross entropy of `logits` (`[n, classes]`, CPU f32) against `targets` (`n`
/// classes), a differentiable scalar, and the arg-max class of each row.
///
/// # Errors
/// A target count that is not `n`, a target out of range, no rows; candle errors.
pub(crate) fn cross_entropy(
    logits: &Tensor,
    targets: &[u32],
) -> candle_core::Result<(Tensor, Vec<u32>)> {
    let (n, classes) = logits.dims2()?;
    if n != targets.len() || n == 0 {
        return Err(candle_core::Error::Msg(format!(
            "cross entropy: {} targets for {n} rows",
            targets.len()
        )));
    }
    if let Some(&c) = targets.iter().find(|&&c| c as usize >= classes) {
        return Err(candle_core::Error::Msg(format!(
            "cross entropy: target {c} of {classes} classes"
        )));
    }
    let stats = std::sync::Arc::new(OnceLock::new());
    let loss = logits.contiguous()?.apply_op1(CrossEntropyOp {
        targets: targets.to_vec(),
        stats: std::sync::Arc::clone(&stats),
    })?;
    let predictions = stats
        .get()
        .map(|s: &Stats| s.argmax.clone())
        .ok_or_else(|| candle_core::Error::Msg("cross entropy: no forward".into()))?;
    Ok((loss, predictions))
}

/// [`cross_entropy`] of candle ops (log-softmax, gather, arg-max) on any device and dtype,
/// without its checks of the targets.
///
/// # Errors
/// Candle errors (a target past the classes among them).
pub(crate) fn cross_entropy_slow(
    logits: &Tensor,
    targets: &[u32],
) -> candle_core::Result<(Tensor, Vec<u32>)> {
    let n = targets.len();
    let target = Tensor::from_slice(targets, n, logits.device())?;
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let picked = log_probs.gather(&target.unsqueeze(1)?, 1)?; // [n, 1]
    let loss = (picked.sum_all()? * (-1.0 / n as f64))?;
    let predictions = logits
        .argmax(D::Minus1)?
        .to_dtype(DType::U32)?
        .to_vec1::<u32>()?;
    Ok((loss, predictions))
}

/// Per row: the log-sum-exp and the arg-max.
struct Stats {
    lse: Vec<f32>,
    argmax: Vec<u32>,
}

struct CrossEntropyOp {
    targets: Vec<u32>,
    stats: std::sync::Arc<OnceLock<Stats>>,
}

multiversion! {
    /// `(max, index of the first max, sum exp(x - max))` of a row.
    fn row_stats(row: &[f32]) -> (f32, u32, f32) {
        let mut max = f32::NEG_INFINITY;
        let mut arg = 0usize;
        for (j, &x) in row.iter().enumerate() {
            if x > max {
                max = x;
                arg = j;
            }
        }
        let mut lanes = [0f32; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (l, &x) in lanes.iter_mut().zip(chunk) {
                *l += exp_approx(x - max);
            }
        }
        let mut sum: f32 = lanes.iter().sum();
        for &x in chunks.remainder() {
            sum += exp_approx(x - max);
        }
        (max, arg as u32, sum)
    }
}

multiversion! {
    /// `out_j = scale * exp(x_j - lse)`.
    fn softmax_scaled(x: &[f32], out: &mut [f32], lse: f32, scale: f32) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = scale * exp_approx(v - lse);
        }
    }
}

impl CustomOp1 for CrossEntropyOp {
    fn name(&self) -> &'static str {
        "cross-entropy"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l, "cross entropy")?;
        let (_, classes) = l.shape().dims2()?;
        let rows: Vec<(f32, u32, f32)> = x
            .par_chunks(classes)
            .zip(self.targets.par_iter())
            .map(|(row, &target)| {
                let (max, arg, sum) = row_stats(row);
                let lse = max + sum.ln();
                (lse, arg, lse - row[target as usize])
            })
            .collect();
        // Summed in order, in f64: the same on any thread count.
        let total: f64 = rows.iter().map(|r| f64::from(r.2)).sum();
        let loss = (total / rows.len() as f64) as f32;
        let _ = self.stats.set(Stats {
            lse: rows.iter().map(|r| r.0).collect(),
            argmax: rows.iter().map(|r| r.1).collect(),
        });
        Ok((CpuStorage::F32(vec![loss]), Shape::from(())))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let stats = self
            .stats
            .get()
            .ok_or_else(|| candle_core::Error::Msg("cross entropy backward: no forward".into()))?;
        let (n, classes) = x.dims2()?;
        let g = g.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?;
        let scale = g / n as f32;
        let dx = with_f32(x, "cross entropy backward", |x| {
            let mut dx = vec![0f32; n * classes];
            dx.par_chunks_mut(classes)
                .zip(x.par_chunks(classes))
                .zip(self.targets.par_iter().zip(stats.lse.par_iter()))
                .for_each(|((out, row), (&target, &lse))| {
                    softmax_scaled(row, out, lse, scale);
                    out[target as usize] -= scale;
                });
            Ok(dx)
        })?;
        Ok(Some(tensor(dx, x.shape())?))
    }
}
