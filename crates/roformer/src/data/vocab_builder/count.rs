//! Counting a corpus's jieba words, and the candidate tokens they give.

use std::collections::{BTreeSet, HashMap};

use rayon::prelude::*;

use super::special_tokens;
use crate::data::corpus::Document;
use crate::data::error::DataError;
use crate::tokenizer::normalize::{is_chinese_char, Normalized};
use crate::tokenizer::special::Segment;
use crate::tokenizer::{jieba, wordpiece, SpecialTokens, TokenizerConfig, Vocab};

/// Occurrences of each jieba word of the normalised corpus (whitespace words left out).
pub(super) type WordCounts = HashMap<String, u64>;

/// Counts the jieba words of `documents` as the tokenizer of `config` would cut them: special
/// tokens written in the text split out (and not counted), each text segment normalised, then
/// cut by jieba. Runs on rayon's pool.
///
/// # Errors
/// [`DataError::Tokenizer`] if the config's special tokens do not survive as `vocab.txt`
/// lines.
pub(super) fn count_words(
    documents: &[Document],
    config: &TokenizerConfig,
) -> Result<WordCounts, DataError> {
    let special = SpecialTokens::new(&Vocab::from_tokens(special_tokens(config)), config)?;
    let options = config.normalize_options();
    let counts = documents
        .par_iter()
        .fold(WordCounts::new, |mut counts, doc| {
            let chars: Vec<char> = doc.text.chars().collect();
            for segment in special.split(&chars) {
                let Segment::Text(range) = segment else {
                    continue;
                };
                let normalized = Normalized::bert(&chars[range], 0, options);
                let text = normalized.chars();
                for word in jieba::cut(text) {
                    let word = &text[word];
                    if !word.iter().all(|c| c.is_whitespace()) {
                        *counts.entry(word.iter().collect()).or_insert(0) += 1;
                    }
                }
            }
            counts
        })
        .reduce(WordCounts::new, |mut big, mut small| {
            if big.len() < small.len() {
                std::mem::swap(&mut big, &mut small);
            }
            for (word, n) in small {
                *big.entry(word).or_insert(0) += n;
            }
            big
        });
    Ok(counts)
}

/// Candidate token counts (see the parent module's documentation).
pub(super) struct Counts {
    /// Each ideograph, and each first char of a run.
    singles: HashMap<char, u64>,
    /// Each later char of a run; alphanumeric chars of runs are present even at count 0.
    continuations: HashMap<char, u64>,
    /// Runs of two or more chars.
    run_words: HashMap<String, u64>,
    /// Jieba words of two or more chars holding an ideograph.
    jieba_words: HashMap<String, u64>,
}

impl Counts {
    /// Splits each word as the tokenizer splits a word missing from the vocabulary.
    pub(super) fn new(words: &WordCounts) -> Self {
        let empty = Vocab::from_tokens(Vec::<String>::new());
        let mut counts = Self {
            singles: HashMap::new(),
            continuations: HashMap::new(),
            run_words: HashMap::new(),
            jieba_words: HashMap::new(),
        };
        let mut pieces = Vec::new();
        for (word, &n) in words {
            let chars: Vec<char> = word.chars().collect();
            if chars.len() > 1 && chars.iter().any(|&c| is_chinese_char(c)) {
                *counts.jieba_words.entry(word.clone()).or_insert(0) += n;
            }
            pieces.clear();
            jieba::word_pre_tokens(&chars, 0..chars.len(), &empty, &mut pieces);
            for piece in &pieces {
                counts.add_piece(&chars[piece.clone()], n);
            }
        }
        counts
    }

    /// Counts one pre-token (an ideograph or a run) seen `n` times.
    fn add_piece(&mut self, piece: &[char], n: u64) {
        let Some((&first, rest)) = piece.split_first() else {
            return;
        };
        *self.singles.entry(first).or_insert(0) += n;
        if is_chinese_char(first) && rest.is_empty() {
            return;
        }
        if piece.len() > 1 {
            *self.run_words.entry(piece.iter().collect()).or_insert(0) += n;
        }
        for &c in rest {
            *self.continuations.entry(c).or_insert(0) += n;
        }
        for &c in piece.iter().filter(|c| c.is_alphanumeric()) {
            self.continuations.entry(c).or_insert(0);
        }
    }

    /// Every single and every continuation (`##c`), with counts.
    pub(super) fn alphabet(&self) -> Vec<(String, u64)> {
        let singles = self.singles.iter().map(|(c, &n)| (c.to_string(), n));
        let continuations = self
            .continuations
            .iter()
            .map(|(c, &n)| (format!("{}{c}", wordpiece::CONTINUATION), n));
        singles.chain(continuations).collect()
    }

    /// Run words seen at least `min_count` times.
    pub(super) fn run_words(&self, min_count: u64) -> Vec<(String, u64)> {
        at_least(&self.run_words, min_count)
    }

    /// Jieba words seen at least `min_count` times.
    pub(super) fn jieba_words(&self, min_count: u64) -> Vec<(String, u64)> {
        at_least(&self.jieba_words, min_count)
    }

    /// The distinct chars of the corpus, whitespace excepted, sorted.
    pub(super) fn distinct_chars(&self) -> Vec<char> {
        let chars: BTreeSet<char> = self
            .singles
            .keys()
            .chain(self.continuations.keys())
            .copied()
            .collect();
        chars.into_iter().collect()
    }
}

fn at_least(counts: &HashMap<String, u64>, min_count: u64) -> Vec<(String, u64)> {
    counts
        .iter()
        .filter(|(_, &n)| n >= min_count)
        .map(|(word, &n)| (word.clone(), n))
        .collect()
}
