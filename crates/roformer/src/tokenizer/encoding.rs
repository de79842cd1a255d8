//! The model inputs of one text: ids, tokens, offsets, token types, attention mask; and how
//! sequences are truncated, framed with `[CLS]`/`[SEP]` and padded.

use super::error::TokenizerError;

/// One token of a sequence before framing: id, text, original char range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub id: u32,
    pub text: String,
    pub offsets: (usize, usize),
}

/// An encoded input, all vectors of the same length `n` (the number of tokens).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Encoding {
    /// Token ids, `[n]`.
    pub ids: Vec<u32>,
    /// Token texts, `[n]` (WordPiece continuations keep their `##`).
    pub tokens: Vec<String>,
    /// `(start, end)` of each token in the text it came from, in chars (Unicode scalar values),
    /// as transformers' `return_offsets_mapping` reports them; `(0, 0)` for `[CLS]`, `[SEP]`,
    /// `[PAD]`. In a pair, offsets of the second text's tokens are into the second text.
    pub offsets: Vec<(usize, usize)>,
    /// Token type ids, `[n]`: 0 for `[CLS]`, the first text and its `[SEP]`; 1 for the second text
    /// and its `[SEP]`; 0 for padding.
    pub type_ids: Vec<u32>,
    /// 1 for real tokens, 0 for padding, `[n]`.
    pub attention_mask: Vec<u32>,
}

impl Encoding {
    /// Number of tokens (padding included).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there is no token (never the case for a framed encoding).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// `[CLS] a [SEP]`, or `[CLS] a [SEP] b [SEP]` with type 1 from `b` on.
    pub(crate) fn framed(
        cls: &Token,
        sep: &Token,
        first: Vec<Token>,
        second: Option<Vec<Token>>,
    ) -> Self {
        let mut encoding = Self::default();
        encoding.push(cls, 0);
        for token in &first {
            encoding.push(token, 0);
        }
        encoding.push(sep, 0);
        if let Some(second) = second {
            for token in &second {
                encoding.push(token, 1);
            }
            encoding.push(sep, 1);
        }
        encoding
    }

    fn push(&mut self, token: &Token, type_id: u32) {
        self.ids.push(token.id);
        self.tokens.push(token.text.clone());
        self.offsets.push(token.offsets);
        self.type_ids.push(type_id);
        self.attention_mask.push(1);
    }

    /// Appends `pad` (type 0, mask 0, offsets (0, 0)) up to `len` tokens.
    pub(crate) fn pad_to(&mut self, len: usize, pad_id: u32, pad_token: &str) {
        let missing = len.saturating_sub(self.len());
        self.ids.extend(std::iter::repeat_n(pad_id, missing));
        self.tokens
            .extend(std::iter::repeat_n(pad_token.to_owned(), missing));
        self.offsets.extend(std::iter::repeat_n((0, 0), missing));
        self.type_ids.extend(std::iter::repeat_n(0, missing));
        self.attention_mask.extend(std::iter::repeat_n(0, missing));
    }
}

/// An encoding cut to a length limit, with the length it had before
/// ([`RoFormerTokenizer::encode_limited`](super::RoFormerTokenizer::encode_limited)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// The encoding, at most as long as the limit.
    pub encoding: Encoding,
    /// Tokens of the uncut encoding, `[CLS]` and `[SEP]` included.
    pub untruncated_len: usize,
}

impl Limited {
    /// Whether tokens were cut off.
    pub fn was_cut(&self) -> bool {
        self.encoding.len() < self.untruncated_len
    }
}

/// Cuts sequences so that, framed, they hold at most `max_length` tokens: tokenizers'
/// `longest_first` strategy. A single sequence keeps its first `max_length - 2` tokens. A pair
/// gets `max_length - 3` tokens in all: the shorter keeps its length when the longer can take
/// the rest; if both are too long, the shorter gets half the budget rounded down and the longer
/// the rest (of two equal lengths, the second counts as the longer).
///
/// # Errors
/// [`TokenizerError::MaxLengthTooSmall`] if `max_length` cannot even hold the special tokens
/// (transformers then silently skips truncation).
pub(crate) fn truncate(
    first: &mut Vec<Token>,
    second: Option<&mut Vec<Token>>,
    max_length: usize,
) -> Result<(), TokenizerError> {
    let special = if second.is_some() { 3 } else { 2 };
    let budget = max_length
        .checked_sub(special)
        .ok_or(TokenizerError::MaxLengthTooSmall {
            max_length,
            special,
        })?;
    let Some(second) = second else {
        first.truncate(budget);
        return Ok(());
    };
    if first.len() + second.len() <= budget {
        return Ok(());
    }
    let swap = first.len() > second.len();
    let (mut short, mut long) = if swap {
        (second.len(), first.len())
    } else {
        (first.len(), second.len())
    };
    long = if short > budget {
        short
    } else {
        long.min(short.max(budget - short))
    };
    if short + long > budget {
        short = budget / 2;
        long = short + budget % 2;
    }
    let (n1, n2) = if swap { (long, short) } else { (short, long) };
    first.truncate(n1);
    second.truncate(n2);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize) -> Vec<Token> {
        (0..n as u32)
            .map(|id| Token {
                id,
                text: String::new(),
                offsets: (0, 0),
            })
            .collect()
    }

    fn lengths(a: usize, b: usize, max_length: usize) -> (usize, usize) {
        let (mut x, mut y) = (tokens(a), tokens(b));
        truncate(&mut x, Some(&mut y), max_length).unwrap();
        (x.len(), y.len())
    }

    #[test]
    fn longest_first_for_pairs() {
        // Fits: unchanged.
        assert_eq!(lengths(2, 3, 8), (2, 3));
        // Only the longer one is cut, to what the shorter leaves.
        assert_eq!(lengths(7, 1, 8), (4, 1));
        assert_eq!(lengths(1, 7, 8), (1, 4));
        // Both cut: halves, the odd token to the longer.
        assert_eq!(lengths(10, 10, 9), (3, 3));
        assert_eq!(lengths(10, 9, 10), (4, 3));
        assert_eq!(lengths(9, 10, 10), (3, 4));
    }

    #[test]
    fn single_keeps_its_head_and_tiny_limits_are_errors() {
        let mut x = tokens(5);
        truncate(&mut x, None, 4).unwrap();
        assert_eq!(x.iter().map(|t| t.id).collect::<Vec<_>>(), [0, 1]);
        assert!(truncate(&mut tokens(5), None, 1).is_err());
        assert!(truncate(&mut tokens(5), Some(&mut tokens(1)), 2).is_err());
    }
}
