//! One forward pass over the new tokens of several sequences at once, each with its own
//! cache and length: what a server decoding many completions together runs each step.
//!
//! The rows of every sequence are stacked into one `[1, n, hidden]` input, so the embedding,
//! the norms, the projections and the feed-forward layers see `n` rows at once (a quantized
//! product reads its weights once for all of them). Only attention splits the rows again: each
//! sequence's queries attend over its own cache, with the same operations as
//! [`Llama::forward`] on that sequence alone. Every row-wise operation here computes each row
//! on its own, so a sequence's logits do not depend on the other sequences of the step.

use candle_core::Tensor;

use super::Llama;
use crate::cache::KvCache;
use crate::error::{LlamaError, Result};
use crate::finite::first_out_of_range;

/// One sequence's part of a [`Llama::forward_ragged`] step.
#[derive(Debug)]
pub struct Chunk<'a> {
    /// The tokens after the `cache.len()` cached ones, at positions
    /// `cache.len()..cache.len() + ids.len()` (at least one).
    pub ids: &'a [u32],
    /// The sequence's cache (made for one sequence); the step appends to it.
    pub cache: &'a mut KvCache,
    /// Whether the step returns the logits of the last of `ids`.
    pub logits: bool,
}

impl Llama {
    /// Runs the new tokens of every chunk in one pass, appending each chunk's keys and values
    /// to its cache, and returns `[k, vocab]`: the logits of the last token of each of the `k`
    /// chunks that ask for them, in the chunks' order.
    ///
    /// A chunk's logits are those [`Llama::forward`] gives for its tokens and cache alone.
    /// Every logit is checked finite. On an error no cache has moved on (a step may be run
    /// again, for instance chunk by chunk to find the one that fails).
    ///
    /// # Errors
    /// [`LlamaError::Request`] for no chunk, an empty chunk or a cache of more than one
    /// sequence; [`LlamaError::TokenId`] for an id outside the vocabulary;
    /// [`LlamaError::Activation`] for an input a quantized product cannot take;
    /// [`LlamaError::NonFiniteLogit`] (`sequence` the index among the chunks asking for
    /// logits, `position` the token's position in its sequence); candle errors otherwise.
    pub fn forward_ragged(&self, chunks: &mut [Chunk<'_>]) -> Result<Tensor> {
        if chunks.is_empty() {
            return Err(LlamaError::Request("no sequence to run".into()));
        }
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut lens = Vec::with_capacity(chunks.len());
        let mut last_rows = Vec::new();
        for chunk in chunks.iter() {
            if chunk.ids.is_empty() {
                return Err(LlamaError::Request(
                    "a sequence has no tokens to run".into(),
                ));
            }
            if chunk.cache.batch() != 1 {
                return Err(LlamaError::Request(format!(
                    "a cache of {} sequences given for one",
                    chunk.cache.batch()
                )));
            }
            let offset = chunk.cache.len();
            let end = u32::try_from(offset + chunk.ids.len())
                .map_err(|_| LlamaError::Request("a position past u32".into()))?;
            positions.extend(u32::try_from(offset).unwrap_or(u32::MAX)..end);
            ids.extend_from_slice(chunk.ids);
            lens.push(chunk.ids.len());
            if chunk.logits {
                last_rows.push(u32::try_from(ids.len() - 1).unwrap_or(u32::MAX));
            }
        }
        self.check_ids(&ids)?;
        let n = ids.len();
        let x = self.embed(&Tensor::from_vec(ids, (1, n), &self.device)?)?;
        let mut caches: Vec<&mut KvCache> = chunks.iter_mut().map(|c| &mut *c.cache).collect();
        let x = self.blocks(x, |attn, h, layer| {
            attn.forward_ragged(h, &self.rope, &positions, &mut caches, &lens, layer)
        })?;
        let wanted = last_rows.len();
        let logits = if wanted == 0 {
            Tensor::zeros(
                (0, self.config.vocab_size),
                candle_core::DType::F32,
                &self.device,
            )?
        } else {
            let rows = Tensor::from_vec(last_rows.clone(), wanted, &self.device)?;
            let x = x.squeeze(0)?.index_select(&rows, 0)?; // [k, hidden]
            self.head.forward(&self.norm.forward(&x)?)?
        };
        if let Some((index, value)) = first_out_of_range(&logits, f32::MAX)? {
            let vocab = self.config.vocab_size;
            let sequence = index / vocab;
            return Err(LlamaError::NonFiniteLogit {
                sequence,
                position: positions[last_rows[sequence] as usize] as usize,
                token: index % vocab,
                value,
            });
        }
        for (cache, &t) in caches.iter_mut().zip(&lens) {
            cache.advance(t);
        }
        Ok(logits)
    }
}
