//! The WordPiece vocabulary: `vocab.txt`, one token per line, the line number is the id.

use std::collections::HashMap;
use std::path::Path;

use super::error::TokenizerError;

/// Token <-> id maps read the way Hugging Face tokenizers' `WordPiece::read_file` reads
/// `vocab.txt` (which is how transformers 5 loads it):
///
/// - line `i` (0-based, split at `\n`) is id `i`;
/// - the token is the line with trailing whitespace removed (leading whitespace is kept);
/// - a token on several lines maps to its **last** id; the earlier ids stay valid ids (the
///   model has embedding rows for them) but have no token: they decode to nothing.
#[derive(Debug, Clone)]
pub struct Vocab {
    ids: HashMap<String, u32>,
    tokens: Vec<Option<String>>,
    /// Chars in the longest token.
    longest: usize,
}

impl Vocab {
    /// Reads `vocab.txt`.
    ///
    /// # Errors
    /// [`TokenizerError::Io`] if it cannot be read, [`TokenizerError::NotUtf8`] if it is not
    /// UTF-8, [`TokenizerError::EmptyVocab`] if it has no line.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let bytes = crate::memory::read_input_file(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|err| {
            let valid = &err.as_bytes()[..err.utf8_error().valid_up_to()];
            TokenizerError::NotUtf8 {
                path: path.to_path_buf(),
                line: valid.iter().filter(|&&b| b == b'\n').count() + 1,
            }
        })?;
        let vocab = Self::from_text(&text);
        if vocab.is_empty() {
            return Err(TokenizerError::EmptyVocab(path.to_path_buf()));
        }
        Ok(vocab)
    }

    /// Builds the vocabulary from the contents of a `vocab.txt` (same rules as
    /// [`from_file`](Self::from_file); an empty text gives an empty vocabulary).
    pub fn from_text(text: &str) -> Self {
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines: Vec<&str> = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').collect()
        };
        // A `\r` before `\n` is trailing whitespace: the trim in `from_tokens` drops it.
        Self::from_tokens(lines)
    }

    /// Builds the vocabulary from tokens in id order (each one trimmed at the end, as a line).
    ///
    /// Ids past `u32::MAX` cannot be represented; tokens beyond it are ignored.
    pub fn from_tokens<I, S>(tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut ids = HashMap::new();
        let mut by_id: Vec<Option<String>> = Vec::new();
        let mut longest = 0;
        for (index, token) in tokens.into_iter().enumerate() {
            let Ok(id) = u32::try_from(index) else { break };
            let token = token.as_ref().trim_end().to_owned();
            longest = longest.max(token.chars().count());
            if let Some(previous) = ids.insert(token.clone(), id) {
                if let Some(slot) = by_id.get_mut(previous as usize) {
                    *slot = None;
                }
            }
            by_id.push(Some(token));
        }
        Self {
            ids,
            tokens: by_id,
            longest,
        }
    }

    /// Chars in the longest token (`##` included): no longer string can be in the vocabulary,
    /// which bounds WordPiece's search.
    pub fn longest_token_chars(&self) -> usize {
        self.longest
    }

    /// Number of ids (lines), including ids shadowed by a later duplicate.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary has no id.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// Whether `token` is in the vocabulary.
    pub fn contains(&self, token: &str) -> bool {
        self.ids.contains_key(token)
    }

    /// The token of `id`: `None` when `id` is out of range or shadowed by a later duplicate.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize)?.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_trimmed_at_the_end_only_and_crlf_is_one_break() {
        let vocab = Vocab::from_text("a\r\n b \nc\t\n\n");
        assert_eq!(vocab.len(), 4);
        assert_eq!(vocab.token_to_id("a"), Some(0));
        assert_eq!(vocab.token_to_id(" b"), Some(1));
        assert_eq!(vocab.token_to_id("c"), Some(2));
        assert_eq!(vocab.token_to_id(""), Some(3));
    }

    #[test]
    fn last_line_without_newline_counts() {
        let vocab = Vocab::from_text("a\nb");
        assert_eq!(vocab.len(), 2);
        assert_eq!(vocab.id_to_token(1), Some("b"));
        assert!(Vocab::from_text("").is_empty());
    }

    #[test]
    fn duplicates_keep_the_last_id() {
        let vocab = Vocab::from_text("x\ny\nx\n");
        assert_eq!(vocab.len(), 3);
        assert_eq!(vocab.token_to_id("x"), Some(2));
        assert_eq!(vocab.id_to_token(0), None);
        assert_eq!(vocab.id_to_token(2), Some("x"));
        assert_eq!(vocab.id_to_token(3), None);
    }

    #[test]
    fn the_longest_token_is_counted_in_chars() {
        assert_eq!(Vocab::from_text("a\n##éé\nbc  \n").longest_token_chars(), 4);
        assert_eq!(Vocab::from_text("").longest_token_chars(), 0);
    }
}
