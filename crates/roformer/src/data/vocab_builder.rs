//! A BERT `vocab.txt` (and `tokenizer_config.json`) built from a corpus.
//!
//! The corpus is seen as [`RoFormerTokenizer`](crate::tokenizer::RoFormerTokenizer) sees it:
//! special tokens written in the text are split out, the rest is normalised with the
//! tokenizer's normaliser and cut into words by jieba. Each jieba word is split as the
//! tokenizer splits a word the vocabulary lacks: every CJK ideograph alone, other chars in
//! runs (words like `hello`, or a punctuation mark). Counted, with each occurrence:
//! - *singles*: each ideograph, and the first char of each run (`h`);
//! - *continuations*: `##c` for each later char of a run (`##e`, `##l`, ...);
//! - *run words*: each run of two or more chars (`hello`);
//! - *jieba words*: each jieba word of two or more chars with an ideograph (`明月`).
//!
//! Selection, for a vocabulary of `size` tokens:
//! 1. the special tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0 to 4, as named in the
//!    config);
//! 2. the *alphabet*: every single, and `##c` for every char seen after the start of a run
//!    and for every alphanumeric char of a run (so that any word made of known chars can be
//!    WordPiece'd), best first, up to the size;
//! 3. in the room left, the words: run words and, when `jieba_word_share > 0`, at most
//!    `floor(jieba_word_share * size)` jieba words, each seen at least `min_count` times, best
//!    first.
//!
//! "Best first" is by count, descending, ties broken by the token string (in `str` order);
//! the tokens after the specials are written in that order too.

mod count;
mod write;

use std::collections::HashSet;

pub use write::{tokenizer_config_json, write_tokenizer_config, write_vocab_dir};

use self::count::{count_words, Counts};
use super::corpus::Document;
use super::error::DataError;
use crate::tokenizer::{jieba, wordpiece, TokenizerConfig, Vocab};

/// How to build the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct VocabOptions {
    /// Number of tokens (lines of `vocab.txt`), special tokens included.
    pub size: usize,
    /// Fewest occurrences for a run word or jieba word to be considered (default 2).
    pub min_count: u64,
    /// Largest share of `size` given to multi-char jieba words (default 0: none).
    pub jieba_word_share: f64,
    /// Normalisation and special token strings, as the tokenizer will use them.
    pub config: TokenizerConfig,
}

impl VocabOptions {
    /// Options for `size` tokens with the defaults: `min_count` 2, no jieba words,
    /// transformers' default tokenizer config.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            min_count: 2,
            jieba_word_share: 0.0,
            config: TokenizerConfig::default(),
        }
    }
}

/// What the vocabulary covers of the corpus it was built from.
#[derive(Debug, Clone, PartialEq)]
pub struct VocabStats {
    /// Tokens in the vocabulary (at most the requested size: fewer when the corpus has fewer
    /// candidates).
    pub size: usize,
    /// Distinct chars of the normalised corpus, whitespace excepted.
    pub distinct_chars: usize,
    /// How many of them are a token by themselves.
    pub chars_in_vocab: usize,
    /// Multi-char tokens (run words and jieba words, not `##` continuations).
    pub words: usize,
    /// Tokens the tokenizer makes of the corpus with this vocabulary (special tokens written
    /// in the text not counted).
    pub tokens: u64,
    /// How many of them are `[UNK]`.
    pub unk_tokens: u64,
    /// `1 - unk_tokens / tokens` (1 for a corpus without tokens).
    pub coverage: f64,
}

/// A built vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltVocab {
    /// The tokens in id order (the lines of `vocab.txt`).
    pub tokens: Vec<String>,
    /// The corpus count of each token (0 for the special tokens).
    pub counts: Vec<u64>,
    /// Coverage figures.
    pub stats: VocabStats,
}

impl BuiltVocab {
    /// The vocabulary as the tokenizer reads it.
    pub fn vocab(&self) -> Vocab {
        Vocab::from_tokens(&self.tokens)
    }
}

/// The special tokens of `config` in id order: pad, unk, cls, sep, mask.
pub fn special_tokens(config: &TokenizerConfig) -> [&str; 5] {
    [
        &config.pad_token,
        &config.unk_token,
        &config.cls_token,
        &config.sep_token,
        &config.mask_token,
    ]
}

/// Builds a vocabulary from `documents` (see the module documentation for the scheme).
///
/// # Errors
/// [`DataError::VocabTooSmall`] if `size` is below the special tokens + 1;
/// [`DataError::Tokenizer`] if a special token of the config cannot be a `vocab.txt` line
/// (it ends in whitespace).
pub fn build_vocab(
    documents: &[Document],
    options: &VocabOptions,
) -> Result<BuiltVocab, DataError> {
    let specials = special_tokens(&options.config);
    let min = specials.len() + 1;
    if options.size < min {
        return Err(DataError::VocabTooSmall {
            size: options.size,
            min,
        });
    }
    let words = count_words(documents, &options.config)?;
    let counts = Counts::new(&words);
    let budget = options.size - specials.len();

    let mut alphabet = counts.alphabet();
    sort_best_first(&mut alphabet);
    alphabet.truncate(budget);
    let jieba_limit = (options.jieba_word_share.clamp(0.0, 1.0) * options.size as f64) as usize;
    let mut jieba_words = counts.jieba_words(options.min_count);
    sort_best_first(&mut jieba_words);
    jieba_words.truncate(jieba_limit);
    let mut word_tokens = counts.run_words(options.min_count);
    word_tokens.extend(jieba_words);
    sort_best_first(&mut word_tokens);
    word_tokens.truncate(budget - alphabet.len());

    let mut chosen = alphabet;
    chosen.extend(word_tokens);
    sort_best_first(&mut chosen);
    let mut seen: HashSet<String> = specials.iter().map(|s| (*s).to_owned()).collect();
    let mut tokens: Vec<String> = specials.iter().map(|s| (*s).to_owned()).collect();
    let mut token_counts = vec![0; tokens.len()];
    for (token, count) in chosen {
        if seen.insert(token.clone()) {
            tokens.push(token);
            token_counts.push(count);
        }
    }
    let stats = stats(&words, &counts, &tokens);
    Ok(BuiltVocab {
        tokens,
        counts: token_counts,
        stats,
    })
}

/// Sorts by count (descending), then token.
fn sort_best_first(tokens: &mut [(String, u64)]) {
    tokens.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
}

/// Coverage of the corpus (its jieba word counts) by `tokens`, split as the tokenizer does.
fn stats(words: &count::WordCounts, counts: &Counts, tokens: &[String]) -> VocabStats {
    let vocab = Vocab::from_tokens(tokens);
    // The unk token is id 1 by construction.
    let unk = 1;
    let (mut total, mut unknown) = (0u64, 0u64);
    let mut pre_tokens = Vec::new();
    for (word, &n) in words {
        let chars: Vec<char> = word.chars().collect();
        pre_tokens.clear();
        jieba::word_pre_tokens(&chars, 0..chars.len(), &vocab, &mut pre_tokens);
        for pre in &pre_tokens {
            for piece in wordpiece::split_word(&chars[pre.clone()], &vocab, unk) {
                total += n;
                if piece.id == unk {
                    unknown += n;
                }
            }
        }
    }
    let chars = counts.distinct_chars();
    let chars_in_vocab = chars
        .iter()
        .filter(|c| vocab.contains(c.encode_utf8(&mut [0; 4])))
        .count();
    let words = tokens
        .iter()
        .skip(5)
        .filter(|t| !t.starts_with(wordpiece::CONTINUATION) && t.chars().count() > 1)
        .count();
    VocabStats {
        size: tokens.len(),
        distinct_chars: chars.len(),
        chars_in_vocab,
        words,
        tokens: total,
        unk_tokens: unknown,
        coverage: if total == 0 {
            1.0
        } else {
            1.0 - unknown as f64 / total as f64
        },
    }
}

#[cfg(test)]
mod tests;
