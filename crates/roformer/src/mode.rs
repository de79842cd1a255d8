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
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The mode of a forward pass.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Inference: no dropout; on the CPU in f32 the fused encoder may run, which builds its
    /// outputs outside candle's gradient graph.
    Inference,
    /// Training: the op-by-op path, whose every op carries gradients (never the fused one),
    /// with dropout drawn from the generator.
    Train(&'a Dropout),
}

impl Mode<'_> {
    /// Whether gradients must flow through this pass.
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// `x` with dropout of probability `p` in training (the identity at inference, or when
    /// `p` is 0 or the generator is disabled).
    ///
    /// # Errors
    /// Candle errors only.
    pub fn dropout(&self, x: &Tensor, p: f64) -> candle_core::Result<Tensor> {
        match self {
            Mode::Inference => Ok(x.clone()),
            Mode::Train(d) => d.apply(x, p),
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
    ///
    /// # Errors
    /// Candle errors only.
    pub fn apply(&self, x: &Tensor, p: f64) -> candle_core::Result<Tensor> {
        let Some(rng) = &self.rng else {
            return Ok(x.clone());
        };
        if p <= 0.0 {
            return Ok(x.clone());
        }
        if p >= 1.0 {
            return x.zeros_like();
        }
        let scale = (1.0 / (1.0 - p)) as f32;
        // Drop when a uniform u32 falls below p * 2^32.
        let threshold = (p * 4_294_967_296.0) as u64;
        let n = x.elem_count();
        let mut mask = Vec::with_capacity(n);
        {
            let mut rng = rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            mask.extend((0..n).map(|_| {
                if u64::from(rng.random::<u32>()) < threshold {
                    0f32
                } else {
                    scale
                }
            }));
        }
        let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
        x.mul(&mask)
    }
}

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

    #[test]
    fn inference_and_disabled_are_identity() {
        let x = Tensor::arange(0f32, 10.0, &Device::Cpu).unwrap();
        let d = Dropout::disabled();
        for y in [
            Mode::Inference.dropout(&x, 0.5).unwrap(),
            Mode::Train(&d).dropout(&x, 0.5).unwrap(),
            Mode::Train(&Dropout::seeded(1)).dropout(&x, 0.0).unwrap(),
        ] {
            assert_eq!(y.to_vec1::<f32>().unwrap(), x.to_vec1::<f32>().unwrap());
        }
        let zeros = Dropout::seeded(1).apply(&x, 1.0).unwrap();
        assert!(zeros.to_vec1::<f32>().unwrap().iter().all(|&v| v == 0.0));
    }
}
