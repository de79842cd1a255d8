//! How a forward pass runs: inference (no dropout, fastest path, no gradient history) or
//! training (every op differentiable, dropout drawn from a seeded generator).
//!
//! transformers puts dropout in the same places in RoFormer and BERT, with the config's
//! probabilities: after the embedding norm and after every dense layer before its residual
//! (`hidden_dropout_prob`), and on the attention probabilities (`attention_probs_dropout_prob`);
//! the classification heads add their own. A kept element is scaled by `1 / (1 - p)` so that
//! the expectation is unchanged, as `torch.nn.Dropout` does.

use std::sync::Mutex;

use candle_core::Tensor;

use crate::autograd::dropout;
pub use crate::autograd::dropout::KeepMask;
use crate::cpu::tensor::all_f32_on_cpu;
use crate::cpu::Precision;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// The mode of a forward pass.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Inference: no dropout; on the CPU in f32 the fused encoder may run, which builds its
    /// outputs outside candle's gradient graph.
    Inference,
    /// Training: the op-by-op path, whose every op carries gradients (never the fused one),
    /// with dropout drawn from the generator and the matrix products in `precision` (f32
    /// accumulation either way; norms, softmax and losses are f32).
    Train {
        /// The dropout generator.
        dropout: &'a Dropout,
        /// The precision of the matrix products' operands.
        precision: Precision,
    },
}

impl Mode<'_> {
    /// The precision of the matrix products: the training precision, f32 at inference (where
    /// it is a property of the loaded weights).
    pub fn precision(&self) -> Precision {
        match self {
            Mode::Inference => Precision::F32,
            Mode::Train { precision, .. } => *precision,
        }
    }

    /// Whether gradients must flow through this pass.
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train { .. })
    }

    /// The keep mask of a dropout of probability `p` over `n` elements: `None` at inference
    /// and whenever nothing is dropped (see [`Dropout::keep_mask`]).
    pub fn keep_mask(&self, n: usize, p: f64) -> Option<KeepMask> {
        match self {
            Mode::Inference => None,
            Mode::Train { dropout: d, .. } => d.keep_mask(n, p),
        }
    }
}

/// A seeded dropout generator: the same seed gives the same masks, call for call, so a
/// training run repeats bit for bit.
#[derive(Debug)]
pub struct Dropout {
    rng: Option<Mutex<ChaCha8Rng>>,
}

impl Dropout {
    /// Dropout drawing its masks from ChaCha8 seeded with `seed`.
    pub fn seeded(seed: u64) -> Dropout {
        Dropout {
            rng: Some(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
        }
    }

    /// No dropout at all (training-mode gradients with deterministic outputs, as transformers
    /// gives with all dropout probabilities 0).
    pub fn disabled() -> Dropout {
        Dropout { rng: None }
    }

    /// `x * mask / (1 - p)` with `mask` Bernoulli(1 - p) per element; `p >= 1` gives zeros.
    /// The mask is [`Dropout::keep_mask`]'s; on the CPU in f32 it is applied by one fused op
    /// whose backward multiplies by the same packed mask.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn apply(&self, x: &Tensor, p: f64) -> candle_core::Result<Tensor> {
        match self.keep_mask(x.elem_count(), p) {
            None => Ok(x.clone()),
            Some(mask) if all_f32_on_cpu(&[x]) => dropout::dropout(x, mask),
            Some(mask) => dropout::dropout_slow(x, mask),
        }
    }

    /// `Dropout(y) + residual` (`y` and `residual` of the same shape): the dropout of
    /// [`Dropout::apply`] and the residual add, fused into one op on the CPU in f32.
    ///
    /// # Errors
    /// Shapes that differ, and candle errors.
    pub fn apply_add(&self, y: &Tensor, residual: &Tensor, p: f64) -> candle_core::Result<Tensor> {
        match self.keep_mask(y.elem_count(), p) {
            None => y + residual,
            Some(mask) if all_f32_on_cpu(&[y, residual]) => dropout::dropout_add(y, residual, mask),
            Some(mask) => dropout::dropout_add_slow(y, residual, mask),
        }
    }

    /// The elements of an `n`-element tensor that a dropout of probability `p` keeps, and the
    /// scale of the kept ones; `None` when nothing is dropped (the generator is disabled or
    /// `p <= 0`). `p >= 1` drops everything.
    ///
    /// Each call draws a 256-bit key from the generator and keeps element `i` when word `i`
    /// of the ChaCha8 stream of that key (a uniform `u32`) is at least `p * 2^32`. The words
    /// are produced in parallel chunks, each seeking to its own offset in the stream, so the
    /// mask depends only on the seed and the sequence of calls, never on the threads.
    pub fn keep_mask(&self, n: usize, p: f64) -> Option<KeepMask> {
        let rng = self.rng.as_ref()?;
        if p <= 0.0 {
            return None;
        }
        let mut key = [0u8; 32];
        rng.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .fill_bytes(&mut key);
        if p >= 1.0 {
            return Some(KeepMask::new(vec![0; n.div_ceil(64)], n, 0.0));
        }
        // p < 1, so the threshold fits a u32.
        let threshold = (p * 4_294_967_296.0) as u32;
        let mut bits = vec![0u64; n.div_ceil(64)];
        bits.par_chunks_mut(MASK_CHUNK / 64)
            .enumerate()
            .for_each(|(c, out)| {
                let start = c * MASK_CHUNK;
                let mut stream = ChaCha8Rng::from_seed(key);
                stream.set_word_pos(start as u128);
                let mut words = [0u32; 64];
                for (w, slot) in out.iter_mut().enumerate() {
                    let count = (n - start - w * 64).min(64);
                    stream.fill(&mut words[..count]);
                    *slot = words[..count]
                        .iter()
                        .enumerate()
                        .fold(0u64, |acc, (j, &r)| acc | (u64::from(r >= threshold) << j));
                }
            });
        Some(KeepMask::new(bits, n, (1.0 / (1.0 - p)) as f32))
    }
}

/// Elements per task when a keep mask is drawn on the threads (a multiple of 64).
const MASK_CHUNK: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn same_seed_same_masks_and_scaled_keep() {
        let x = Tensor::ones((64, 64), DType::F32, &Device::Cpu).unwrap();
        let a = Dropout::seeded(7).apply(&x, 0.25).unwrap();
        let b = Dropout::seeded(7).apply(&x, 0.25).unwrap();
        let c = Dropout::seeded(8).apply(&x, 0.25).unwrap();
        let (a, b, c) = (
            a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            c.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        let dropped = a.iter().filter(|&&v| v == 0.0).count() as f64 / a.len() as f64;
        // 4096 Bernoulli(0.25) draws: standard deviation 0.0068, so +-0.04 is ~6 sigma.
        assert!((dropped - 0.25).abs() < 0.04, "{dropped}");
        assert!(a.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
    }
}
