//! Masked-LM masking of one block: which tokens to predict, and what the model sees there.

use rand_chacha::ChaCha8Rng;

use super::blocks::Block;
use super::error::DataError;
use super::rng::{below, shuffle, unit};
use crate::tokenizer::RoFormerTokenizer;

/// The label of a position that is not predicted (PyTorch's `ignore_index`).
pub const IGNORE_LABEL: i64 = -100;

/// Masking settings (BERT's by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaskingOptions {
    /// Share of the maskable tokens to predict (0.15).
    pub probability: f64,
    /// Share of the predicted tokens replaced by `[MASK]` (0.8).
    pub mask_share: f64,
    /// Share of the predicted tokens replaced by a random ordinary token (0.1); the rest,
    /// `1 - mask_share - random_share`, stays unchanged.
    pub random_share: f64,
    /// Choose whole words instead of single tokens.
    pub whole_word: bool,
}

impl Default for MaskingOptions {
    fn default() -> Self {
        Self {
            probability: 0.15,
            mask_share: 0.8,
            random_share: 0.1,
            whole_word: false,
        }
    }
}

/// A masked block: what the model reads and what it must predict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masked {
    /// The block's ids with the chosen positions replaced, `[seq_len]`.
    pub input_ids: Vec<u32>,
    /// The original id at the chosen positions, [`IGNORE_LABEL`] elsewhere, `[seq_len]`.
    pub labels: Vec<i64>,
}

/// Masks blocks for one vocabulary.
#[derive(Debug, Clone)]
pub struct Masker {
    options: MaskingOptions,
    mask_id: u32,
    /// Sorted ids never chosen (the special tokens).
    specials: Vec<u32>,
    /// The ids a random replacement is drawn from: every id with a token that is not special.
    random_ids: Vec<u32>,
}

impl Masker {
    /// A masker for `tokenizer`'s vocabulary: its special tokens (pad, unk, cls, sep, mask)
    /// are never chosen nor drawn as replacements, nor are ids shadowed by a later duplicate
    /// in `vocab.txt`.
    ///
    /// # Errors
    /// [`DataError::Tokenizer`] if the vocabulary has no mask token, and the errors of
    /// [`from_ids`](Self::from_ids).
    pub fn new(options: MaskingOptions, tokenizer: &RoFormerTokenizer) -> Result<Self, DataError> {
        let mask_id = tokenizer.mask_token_id()?;
        let special = tokenizer.special_tokens();
        let vocab_size = u32::try_from(tokenizer.vocab_size()).unwrap_or(u32::MAX);
        let specials: Vec<u32> = (0..vocab_size).filter(|&id| special.contains(id)).collect();
        let random_ids = (0..vocab_size)
            .filter(|&id| !special.contains(id) && tokenizer.id_to_token(id).is_some())
            .collect();
        Self::build(options, mask_id, specials, random_ids)
    }

    /// A masker from raw ids: `specials` are never chosen, random replacements are drawn from
    /// `0..vocab_size` minus `specials`.
    ///
    /// # Errors
    /// [`DataError::BadMasking`] if `probability` is not in `(0, 1]` or the shares are negative
    /// or sum above 1; [`DataError::NoRandomTokens`] if every id is special.
    pub fn from_ids(
        options: MaskingOptions,
        mask_id: u32,
        specials: &[u32],
        vocab_size: u32,
    ) -> Result<Self, DataError> {
        let mut specials = specials.to_vec();
        specials.push(mask_id);
        specials.sort_unstable();
        specials.dedup();
        let random_ids = (0..vocab_size)
            .filter(|id| specials.binary_search(id).is_err())
            .collect();
        Self::build(options, mask_id, specials, random_ids)
    }

    fn build(
        options: MaskingOptions,
        mask_id: u32,
        specials: Vec<u32>,
        random_ids: Vec<u32>,
    ) -> Result<Self, DataError> {
        let MaskingOptions {
            probability,
            mask_share,
            random_share,
            ..
        } = options;
        if !(probability > 0.0 && probability <= 1.0) {
            return Err(DataError::BadMasking(format!(
                "probability {probability} is not in (0, 1]"
            )));
        }
        let shares_ok =
            mask_share >= 0.0 && random_share >= 0.0 && mask_share + random_share <= 1.0;
        if !shares_ok {
            return Err(DataError::BadMasking(format!(
                "mask_share {mask_share} and random_share {random_share} must be >= 0 with a sum <= 1"
            )));
        }
        if random_ids.is_empty() {
            return Err(DataError::NoRandomTokens);
        }
        Ok(Self {
            options,
            mask_id,
            specials,
            random_ids,
        })
    }

    /// The settings.
    pub fn options(&self) -> &MaskingOptions {
        &self.options
    }

    /// Whether `id` may be chosen (it is not a special token).
    pub fn is_maskable(&self, id: u32) -> bool {
        self.specials.binary_search(&id).is_err()
    }

    /// Masks `block` with draws from `rng`.
    ///
    /// The candidates are the maskable real tokens (positions `< block.len` whose id is not
    /// special); with `n` of them the target is `k = min(n, max(1, round(probability * n)))`
    /// (0 when `n = 0`).
    /// - By token: a partial Fisher-Yates shuffle of the candidates picks `k` (for `j` in
    ///   `0..k`, swap candidate `j` with candidate `j + below(n - j)`).
    /// - Whole words: the candidates are grouped by word (`block.word_ids`), the groups
    ///   shuffled (Fisher-Yates), and taken in that order, a group skipped when it would bring
    ///   the count past `k`, until `k` tokens are taken or the groups run out (Google's BERT
    ///   rule: every token of a chosen word is predicted, at most `k` in all).
    ///
    /// Then, for the chosen positions in increasing order, one draw `u = unit()` each:
    /// `u < mask_share` gives `[MASK]`; `u < mask_share + random_share` gives
    /// `random_ids[below(len)]` (which may happen to be the original); otherwise the token
    /// stays. Labels hold the original id at every chosen position.
    pub fn mask(&self, block: &Block, rng: &mut ChaCha8Rng) -> Masked {
        let mut input_ids = block.input_ids.clone();
        let mut labels = vec![IGNORE_LABEL; input_ids.len()];
        let real = block.len.min(input_ids.len());
        let candidates: Vec<usize> = (0..real)
            .filter(|&i| self.is_maskable(block.input_ids[i]))
            .collect();
        let n = candidates.len();
        if n == 0 {
            return Masked { input_ids, labels };
        }
        let k = ((self.options.probability * n as f64).round() as usize).clamp(1, n);
        let mut chosen = if self.options.whole_word {
            choose_words(&candidates, &block.word_ids, k, rng)
        } else {
            choose_tokens(candidates, k, rng)
        };
        chosen.sort_unstable();
        let random_cut = self.options.mask_share + self.options.random_share;
        for i in chosen {
            labels[i] = i64::from(block.input_ids[i]);
            let u = unit(rng);
            if u < self.options.mask_share {
                input_ids[i] = self.mask_id;
            } else if u < random_cut {
                input_ids[i] = self.random_ids[below(rng, self.random_ids.len())];
            }
        }
        Masked { input_ids, labels }
    }
}

/// `k` of the candidate positions, by a partial Fisher-Yates shuffle.
fn choose_tokens(mut candidates: Vec<usize>, k: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let n = candidates.len();
    for j in 0..k.min(n) {
        let pick = j + below(rng, n - j);
        candidates.swap(j, pick);
    }
    candidates.truncate(k);
    candidates
}

/// Whole words of candidate positions, in shuffled order, skipping a word that would pass
/// `k` positions, until `k` are taken.
fn choose_words(
    candidates: &[usize],
    word_ids: &[u32],
    k: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<usize> {
    let mut words: Vec<&[usize]> = candidates
        .chunk_by(|&a, &b| word_ids.get(a) == word_ids.get(b))
        .collect();
    shuffle(&mut words, rng);
    let mut chosen = Vec::with_capacity(k);
    for word in words {
        if chosen.len() >= k {
            break;
        }
        if chosen.len() + word.len() <= k {
            chosen.extend_from_slice(word);
        }
    }
    chosen
}

#[cfg(test)]
#[path = "masking_tests.rs"]
mod tests;
