//! What can go wrong when loading or using the tokenizer.

use std::path::PathBuf;

/// Errors of [`RoFormerTokenizer`](super::RoFormerTokenizer): bad files and bad arguments.
///
/// No tokenizer method panics on any input text; text never produces an error (unknown words
/// become the unknown token, as in transformers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The vocabulary file is not UTF-8.
    #[error("{path} is not valid UTF-8 (line {line})")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
    },
    /// The vocabulary holds no token.
    #[error("the vocabulary {0} is empty")]
    EmptyVocab(PathBuf),
    /// A special token the tokenizer needs is not in the vocabulary.
    #[error("the vocabulary has no {role} token {token:?}")]
    MissingSpecialToken {
        /// Its role: unk, cls, sep or pad (mask is optional).
        role: &'static str,
        /// The token text that was looked for.
        token: String,
    },
    /// `tokenizer_config.json` is not the JSON object transformers writes.
    #[error("malformed {path}: {message}")]
    BadConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A truncation length too small to hold the special tokens.
    #[error("max_length {max_length} cannot hold the {special} special tokens of this input")]
    MaxLengthTooSmall {
        /// The requested length.
        max_length: usize,
        /// `[CLS]` and `[SEP]` (2) or `[CLS]`, `[SEP]`, `[SEP]` (3).
        special: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of the vocabulary (size {vocab_size})")]
    IdOutOfVocab {
        /// The id.
        id: u32,
        /// Number of ids (lines of vocab.txt).
        vocab_size: usize,
    },
    /// The tokenizer has no mask token: its vocabulary lacks it.
    #[error("the vocabulary has no mask token {0:?}")]
    NoMaskToken(String),
}
