//! transformers' `RoFormerTokenizer` (5.x; the same as 4.x's `RoFormerTokenizerFast`).
//!
//! The pipeline, per text:
//! 1. special tokens written in the text (`[MASK]`, `[CLS]`, ...) are found verbatim and kept
//!    ([`special`]);
//! 2. the text between them is normalised ([`normalize`]): control chars removed, whitespace
//!    made a space, accents stripped and lowercased per `tokenizer_config.json`;
//! 3. jieba cuts it into words (no HMM); a word in the vocabulary stays whole, any other is
//!    split into its ideographs and runs of other chars ([`jieba`]);
//! 4. WordPiece splits each pre-token into vocabulary pieces with `##` continuations, or the
//!    unknown token ([`wordpiece`]);
//! 5. the sequence is truncated if asked, framed as `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`,
//!    and padded in batches ([`encoding`]).
//!
//! Offsets are char ranges in the input text, as transformers' `return_offsets_mapping`
//! gives them. The tests compare ids, tokens and offsets with fixtures made by transformers
//! (`scripts/make_tokenizer_fixtures.py`).
//!
//! One difference in transformers 5.23 is not reproduced: loading a directory that holds only
//! `vocab.txt` (no `tokenizer.json`), it hands the vocabulary *path* to its jieba
//! pre-tokenizer, whose "is this word in the vocabulary" test then never holds, so no
//! multi-char word stays whole. This tokenizer keeps them, as transformers does when it has
//! the vocabulary itself (a directory written by `save_pretrained`, or transformers 4.x).

pub mod config;
mod cut;
pub mod decode;
pub mod encoding;
pub mod error;
pub mod jieba;
pub mod normalize;
pub mod special;
pub mod vocab;
pub mod wordpiece;

use std::path::Path;

pub use config::TokenizerConfig;
pub use encoding::{Encoding, Limited};
pub use error::TokenizerError;
pub use special::SpecialTokens;
pub use vocab::Vocab;

use encoding::Token;
use normalize::{NormalizeOptions, Normalized};
use special::Segment;

/// A RoFormer tokenizer: vocabulary, settings and special tokens.
#[derive(Debug, Clone)]
pub struct RoFormerTokenizer {
    vocab: Vocab,
    config: TokenizerConfig,
    normalize: NormalizeOptions,
    special: SpecialTokens,
}

impl RoFormerTokenizer {
    /// Loads a checkpoint directory's tokenizer: `vocab.txt`, and `tokenizer_config.json` when
    /// present (otherwise transformers' defaults: lowercase, strip accents).
    ///
    /// # Errors
    /// A missing, unreadable or empty `vocab.txt`, a malformed `tokenizer_config.json`, or a
    /// vocabulary without the unk, cls, sep or pad token (see [`TokenizerError`]).
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let vocab = Vocab::from_file(&dir.join("vocab.txt"))?;
        Self::new(vocab, TokenizerConfig::from_dir(dir)?)
    }

    /// A tokenizer from the text of `vocab.txt` and, if given, of `tokenizer_config.json`
    /// (otherwise the defaults of [`RoFormerTokenizer::from_dir`]), for a tokenizer held in
    /// memory.
    ///
    /// # Errors
    /// [`TokenizerError::BadConfig`] for a malformed config, and the errors of
    /// [`RoFormerTokenizer::new`] (an empty vocabulary lacks the special tokens).
    pub fn from_texts(vocab_txt: &str, config_json: Option<&str>) -> Result<Self, TokenizerError> {
        let config = match config_json {
            Some(json) => {
                TokenizerConfig::from_json(json).map_err(|message| TokenizerError::BadConfig {
                    path: std::path::PathBuf::from("tokenizer_config.json"),
                    message,
                })?
            }
            None => TokenizerConfig::default(),
        };
        Self::new(Vocab::from_text(vocab_txt), config)
    }

    /// A tokenizer from a vocabulary and settings.
    ///
    /// # Errors
    /// [`TokenizerError::MissingSpecialToken`] if the vocabulary lacks the unk, cls, sep or
    /// pad token of `config`.
    pub fn new(vocab: Vocab, config: TokenizerConfig) -> Result<Self, TokenizerError> {
        let special = SpecialTokens::new(&vocab, &config)?;
        Ok(Self {
            normalize: config.normalize_options(),
            vocab,
            config,
            special,
        })
    }

    /// Loads jieba's dictionary now (about a second) instead of at the first encode.
    pub fn warm_up(&self) {
        jieba::warm_up();
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Number of ids (lines of `vocab.txt`).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The settings.
    pub fn config(&self) -> &TokenizerConfig {
        &self.config
    }

    /// The special tokens' ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// The id of the mask token.
    ///
    /// # Errors
    /// [`TokenizerError::NoMaskToken`] if the vocabulary has none.
    pub fn mask_token_id(&self) -> Result<u32, TokenizerError> {
        self.special
            .mask
            .ok_or_else(|| TokenizerError::NoMaskToken(self.config.mask_token.clone()))
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.vocab.token_to_id(token)
    }

    /// The token of `id` (`None` out of range or for an id shadowed by a later duplicate).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.vocab.id_to_token(id)
    }

    /// Encodes one text as `[CLS] text [SEP]`, untruncated.
    pub fn encode(&self, text: &str) -> Encoding {
        self.frame(self.tokenize(text), None)
    }

    /// Encodes a pair as `[CLS] first [SEP] second [SEP]` (types 0 then 1), untruncated.
    ///
    /// An empty `second` gives `encode(first)`, as in transformers (which tests the pair's
    /// truthiness); an empty `first` is kept: `[CLS] [SEP] second [SEP]`.
    pub fn encode_pair(&self, first: &str, second: &str) -> Encoding {
        let second = (!second.is_empty()).then(|| self.tokenize(second));
        self.frame(self.tokenize(first), second)
    }

    /// Encodes a text, or a pair when `second` is given, cut to at most `max_length` tokens in
    /// all (transformers' `truncation=True, max_length=...`, strategy `longest_first`). An
    /// empty `second` counts as none, as in [`encode_pair`](Self::encode_pair).
    ///
    /// Only the first `64 * max_length` characters of each text are tokenised, cut at a
    /// whitespace or clause mark when there is one (see `cut`), so that memory and time follow
    /// what is kept. The tokens kept are those of the whole text unless its words average more
    /// than 32 characters; and when both texts of a pair are cut, the one with more tokens
    /// before its cut counts as the longer.
    ///
    /// # Errors
    /// [`TokenizerError::MaxLengthTooSmall`] if `max_length` is below 2 (3 for a pair).
    pub fn encode_truncated(
        &self,
        first: &str,
        second: Option<&str>,
        max_length: usize,
    ) -> Result<Encoding, TokenizerError> {
        let window = max_length.saturating_mul(cut::CHARS_PER_KEPT_TOKEN);
        let kept = |text: &str| self.tokenize(&text[..cut::cut_len(text, window)]);
        let mut a = kept(first);
        let mut b = second.filter(|text| !text.is_empty()).map(kept);
        encoding::truncate(&mut a, b.as_mut(), max_length)?;
        Ok(self.frame(a, b))
    }

    /// Encodes one text as `[CLS] text [SEP]`, cut to at most `max_length` tokens when a limit
    /// is given (as [`encode_truncated`](Self::encode_truncated) cuts), and tells how many
    /// tokens the uncut encoding has, so that a caller can say what was cut.
    ///
    /// # Errors
    /// [`TokenizerError::MaxLengthTooSmall`] if `max_length` is below 2.
    pub fn encode_limited(
        &self,
        text: &str,
        max_length: Option<usize>,
    ) -> Result<Limited, TokenizerError> {
        let mut tokens = self.tokenize(text);
        let untruncated_len = tokens.len().saturating_add(2);
        if let Some(max_length) = max_length {
            encoding::truncate(&mut tokens, None, max_length)?;
        }
        Ok(Limited {
            encoding: self.frame(tokens, None),
            untruncated_len,
        })
    }

    /// Encodes several texts and pads them with the pad token (right side, type 0, attention
    /// 0) to the longest: every encoding has the same length, ready for a `[batch, seq]`
    /// tensor. With `max_length`, each text is first truncated as by
    /// [`encode_truncated`](Self::encode_truncated).
    ///
    /// # Errors
    /// [`TokenizerError::MaxLengthTooSmall`] if `max_length` is below 2.
    pub fn encode_batch<S: AsRef<str>>(
        &self,
        texts: &[S],
        max_length: Option<usize>,
    ) -> Result<Vec<Encoding>, TokenizerError> {
        let mut encodings = texts
            .iter()
            .map(|text| match max_length {
                Some(max_length) => self.encode_truncated(text.as_ref(), None, max_length),
                None => Ok(self.encode(text.as_ref())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let longest = encodings.iter().map(Encoding::len).max().unwrap_or(0);
        for encoding in &mut encodings {
            encoding.pad_to(longest, self.special.pad, &self.config.pad_token);
        }
        Ok(encodings)
    }

    /// Decodes ids to text as transformers' `decode` does: tokens joined with spaces, `##`
    /// continuations glued to the previous token, a space before `.,!?` removed; special
    /// tokens (pad, unk, cls, sep, mask) dropped when `skip_special_tokens`. An id shadowed by
    /// a later duplicate in `vocab.txt` has no token and is dropped. Decode a single id
    /// (fill-mask) with `decode(&[id], false)`: a continuation keeps its `##`.
    ///
    /// # Errors
    /// [`TokenizerError::IdOutOfVocab`] for an id past the vocabulary (transformers silently
    /// drops it).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        let mut tokens = Vec::with_capacity(ids.len());
        for &id in ids {
            if id as usize >= self.vocab.len() {
                return Err(TokenizerError::IdOutOfVocab {
                    id,
                    vocab_size: self.vocab.len(),
                });
            }
            if skip_special_tokens && self.special.contains(id) {
                continue;
            }
            tokens.extend(self.vocab.id_to_token(id));
        }
        Ok(decode::join_tokens(tokens))
    }

    /// The ids of one text without `[CLS]`/`[SEP]` (the ids `encode(text)` puts between them),
    /// each with the index of the word it came from, for whole-word masking: words are
    /// numbered 0, 1, ... in text order. A word is one jieba word of the normalised text
    /// (its WordPiece pieces share its index, and so do its ideographs when the vocabulary
    /// lacks the word and they become one token each) or one special token written in the
    /// text; whitespace takes no index.
    ///
    /// A long text is tokenised in pieces of at most 64 Ki characters, cut at a whitespace or
    /// clause mark (see `cut`), so that the tokenizer's working memory stays that of a piece;
    /// the result is the whole text's unless a piece must be cut inside a word.
    pub fn ids_and_words(&self, text: &str) -> (Vec<u32>, Vec<u32>) {
        let (mut ids, mut words) = (Vec::new(), Vec::new());
        let mut next_word = 0u32;
        for piece in cut::pieces(text, cut::PIECE_CHARS) {
            let first_word = next_word;
            self.walk(piece, |id, _, word| {
                let word = first_word.saturating_add(word);
                ids.push(id);
                words.push(word);
                next_word = word.saturating_add(1);
            });
        }
        (ids, words)
    }

    /// The tokens of one text, before framing.
    fn tokenize(&self, text: &str) -> Vec<Token> {
        let mut tokens = Vec::new();
        self.walk(text, |id, offsets, _| tokens.push(self.token(id, offsets)));
        tokens
    }

    /// Runs the pipeline on one text: `emit(id, original char range, word index)` per token.
    fn walk(&self, text: &str, mut emit: impl FnMut(u32, (usize, usize), u32)) {
        let chars: Vec<char> = text.chars().collect();
        let mut word = 0u32;
        for segment in self.special.split(&chars) {
            match segment {
                Segment::Special(id, range) => {
                    emit(id, (range.start, range.end), word);
                    word = word.saturating_add(1);
                }
                Segment::Text(range) => {
                    let start = range.start;
                    let normalized = Normalized::bert(&chars[range], start, self.normalize);
                    self.walk_normalized(&normalized, &mut word, &mut emit);
                }
            }
        }
    }

    /// Pre-tokenises and WordPiece-splits a normalised segment, counting its words on from
    /// `word`.
    fn walk_normalized(
        &self,
        normalized: &Normalized,
        word: &mut u32,
        emit: &mut impl FnMut(u32, (usize, usize), u32),
    ) {
        let chars = normalized.chars();
        let mut pre_tokens = Vec::new();
        for jieba_word in jieba::cut(chars) {
            pre_tokens.clear();
            jieba::word_pre_tokens(chars, jieba_word, &self.vocab, &mut pre_tokens);
            for pre in &pre_tokens {
                let pieces =
                    wordpiece::split_word(&chars[pre.clone()], &self.vocab, self.special.unk);
                for piece in pieces {
                    let offsets =
                        normalized.original_range(pre.start + piece.start, pre.start + piece.end);
                    emit(piece.id, offsets, *word);
                }
            }
            if !pre_tokens.is_empty() {
                *word = word.saturating_add(1);
            }
        }
    }

    fn token(&self, id: u32, offsets: (usize, usize)) -> Token {
        let text = self.vocab.id_to_token(id).unwrap_or_default().to_owned();
        Token { id, text, offsets }
    }

    fn frame(&self, first: Vec<Token>, second: Option<Vec<Token>>) -> Encoding {
        let cls = self.token(self.special.cls, (0, 0));
        let sep = self.token(self.special.sep, (0, 0));
        Encoding::framed(&cls, &sep, first, second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_limited_cuts_as_encode_truncated_and_counts_the_uncut_tokens() {
        let tokenizer =
            RoFormerTokenizer::from_texts("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\nc\n", None).unwrap();
        let cut = tokenizer.encode_limited("a b c a b", Some(4)).unwrap();
        assert_eq!(
            cut.encoding,
            tokenizer.encode_truncated("a b c a b", None, 4).unwrap()
        );
        assert_eq!((cut.encoding.len(), cut.untruncated_len), (4, 7));
        assert!(cut.was_cut());
        let whole = tokenizer.encode_limited("a b c a b", None).unwrap();
        assert_eq!(whole.encoding, tokenizer.encode("a b c a b"));
        assert!(!whole.was_cut());
        assert!(!tokenizer.encode_limited("a", Some(3)).unwrap().was_cut());
        assert!(tokenizer.encode_limited("a", Some(1)).is_err());
    }
}
