//! Text generation: one prefill over the prompt, then one decode step per new token, each at
//! the cache's offset.

use std::time::{Duration, Instant};

use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{LlamaError, Result};
use crate::model::{Llama, Logits};

/// How the next token is chosen from the logits `z`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 for greedy decoding (`argmax z`, the first on ties); above 0, sample from
    /// `softmax(z / temperature)`.
    pub temperature: f64,
    /// Seed of the sampler's generator (unused when greedy).
    pub seed: u64,
}

impl Sampling {
    /// Greedy decoding.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        seed: 0,
    };
}

/// What a call of [`generate`] produced, and how long its two phases took.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The new tokens (the prompt not included).
    pub tokens: Vec<u32>,
    /// Whether generation ended at the end-of-sequence token (which is included in `tokens`).
    pub stopped_at_eos: bool,
    /// Tokens in the prompt.
    pub prompt_len: usize,
    /// Time of the prefill: one forward pass over the prompt, and the first token's choice.
    pub prefill: Duration,
    /// Time of the decode steps: one forward pass per token after the first.
    pub decode: Duration,
}

impl Generation {
    /// Prompt tokens per second of prefill.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_len as f64 / self.prefill.as_secs_f64()
    }

    /// Decode steps per second (0 when there was none).
    pub fn decode_tokens_per_second(&self) -> f64 {
        let steps = self.tokens.len().saturating_sub(1);
        if steps == 0 {
            0.0
        } else {
            steps as f64 / self.decode.as_secs_f64()
        }
    }
}

/// Continues `prompt` by up to `max_new` tokens, stopping after `eos` when given, calling
/// `on_token` with each new token as it is chosen.
///
/// # Errors
/// [`LlamaError::Request`] for an empty prompt, a temperature that is negative or not finite, or
/// more tokens than the model's context length; the errors of [`Llama::forward`] (among them
/// [`LlamaError::NonFiniteLogit`]) and of `on_token`.
pub fn generate(
    model: &Llama,
    prompt: &[u32],
    max_new: usize,
    sampling: Sampling,
    eos: Option<u32>,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(LlamaError::Request("the prompt has no tokens".into()));
    }
    if !(sampling.temperature.is_finite() && sampling.temperature >= 0.0) {
        return Err(LlamaError::Request(format!(
            "temperature {} is not a finite number >= 0",
            sampling.temperature
        )));
    }
    let context = model.config().context_length;
    let total = prompt.len().saturating_add(max_new);
    if total > context {
        return Err(LlamaError::Request(format!(
            "{} prompt tokens + {max_new} new ones exceed the model's context of {context}",
            prompt.len()
        )));
    }
    let mut sampler = Sampler::new(sampling);
    let mut cache = model.cache(1, total);
    let mut tokens = Vec::with_capacity(max_new);
    let mut stopped_at_eos = false;

    let start = Instant::now();
    let mut next = if max_new > 0 {
        let ids = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
        let logits = model.forward(&ids, &mut cache, Logits::Last)?;
        Some(sampler.next(&logits.squeeze(0)?.to_vec1::<f32>()?))
    } else {
        None
    };
    let prefill = start.elapsed();

    let start = Instant::now();
    while let Some(token) = next.take() {
        tokens.push(token);
        on_token(token)?;
        if Some(token) == eos {
            stopped_at_eos = true;
            break;
        }
        if tokens.len() == max_new {
            break;
        }
        let ids = Tensor::new(&[token], model.device())?.unsqueeze(0)?;
        let logits = model.forward(&ids, &mut cache, Logits::Last)?;
        next = Some(sampler.next(&logits.squeeze(0)?.to_vec1::<f32>()?));
    }
    let decode = start.elapsed();
    Ok(Generation {
        tokens,
        stopped_at_eos,
        prompt_len: prompt.len(),
        prefill,
        decode,
    })
}

/// Chooses tokens from logits by one [`Sampling`]: its own generator, seeded once, draws one
/// number per sampled token, so a sequence's tokens depend only on its logits and its seed.
#[derive(Debug, Clone)]
pub struct Sampler {
    sampling: Sampling,
    rng: StdRng,
}

impl Sampler {
    /// A sampler for `sampling`, its generator seeded with `sampling.seed`.
    pub fn new(sampling: Sampling) -> Sampler {
        Sampler {
            sampling,
            rng: StdRng::seed_from_u64(sampling.seed),
        }
    }

    /// The next token from the logits `z` of one position (finite: [`Llama::forward`] checks
    /// them): `argmax z` when greedy, else a draw from `softmax(z / temperature)`.
    pub fn next(&mut self, z: &[f32]) -> u32 {
        if self.sampling.temperature == 0.0 {
            return argmax(z);
        }
        // softmax(z / T) in f64, shifted by the maximum.
        let top = z.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let weights: Vec<f64> = z
            .iter()
            .map(|&v| ((v as f64 - top) / self.sampling.temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut u = self.rng.random::<f64>() * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return i as u32;
            }
            u -= w;
        }
        argmax(z)
    }
}

/// Index of the largest value, the first one on ties.
pub fn argmax(z: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in z.iter().enumerate() {
        if v > z[best] {
            best = i;
        }
    }
    best as u32
}
