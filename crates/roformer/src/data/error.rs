//! What can go wrong when reading a corpus or preparing pre-training data.

use std::fmt;
use std::path::PathBuf;

use crate::tokenizer::TokenizerError;

/// Where in a file a record is: a line of a line-based file or an element of a JSON array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// 1-based line (JSON Lines).
    Line(usize),
    /// 0-based index in the top-level array (chinese-poetry JSON).
    Element(usize),
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line(line) => write!(f, "line {line}"),
            Self::Element(index) => write!(f, "element {index}"),
        }
    }
}

/// Errors of the [`data`](super) module: bad corpus files and bad arguments.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A file or directory could not be read (or a file written).
    #[error("cannot access {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A corpus file is not UTF-8.
    #[error("{path} is not valid UTF-8 (line {line})")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
    },
    /// A JSON or JSON Lines file does not parse.
    #[error("{path}: invalid JSON at line {line}, column {column}: {message}")]
    BadJson {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error in the file.
        line: usize,
        /// 1-based column (in bytes) on that line.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// A chinese-poetry file whose top level is not a JSON array.
    #[error("{path}: expected a JSON array of poems")]
    NotAnArray {
        /// The file.
        path: PathBuf,
    },
    /// A record lacks a field, or the field has the wrong type.
    #[error("{path}: {record} has no {field:?} field holding {expected}")]
    MissingField {
        /// The file.
        path: PathBuf,
        /// Which record.
        record: Record,
        /// The field looked for.
        field: String,
        /// What it should hold ("a string", "an array of strings").
        expected: &'static str,
    },
    /// A corpus without any record: no corpus file, or only empty ones.
    #[error("the corpus {path} is empty")]
    EmptyCorpus {
        /// The file or directory given.
        path: PathBuf,
    },
    /// A corpus whose records are all blank after trimming.
    #[error("the corpus {path} has {records} records but none with text")]
    NoUsableDocument {
        /// The file or directory given.
        path: PathBuf,
        /// How many (blank) records it has.
        records: usize,
    },
    /// A block length too short for `[CLS]`, one token and `[SEP]`.
    #[error("seq_len {seq_len} is too small: blocks need at least {min} tokens")]
    SeqLenTooSmall {
        /// The requested block length.
        seq_len: usize,
        /// The smallest allowed.
        min: usize,
    },
    /// Blocks that cannot be batched: none, or of different lengths.
    #[error("cannot batch these blocks: {0}")]
    BadBlocks(String),
    /// A batch size of 0.
    #[error("the batch size must be at least 1")]
    ZeroBatchSize,
    /// Masking probabilities out of range.
    #[error("invalid masking options: {0}")]
    BadMasking(String),
    /// A vocabulary without any ordinary (non-special) token to draw random replacements from.
    #[error("the vocabulary has no non-special token to use as a random replacement")]
    NoRandomTokens,
    /// A vocabulary size that cannot hold the special tokens and one more.
    #[error("vocabulary size {size} is too small: at least {min} (the special tokens and one)")]
    VocabTooSmall {
        /// The requested size.
        size: usize,
        /// The smallest allowed.
        min: usize,
    },
    /// A tokenizer problem (missing mask token, unreadable vocabulary, ...).
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

impl DataError {
    /// An [`Io`](Self::Io) error for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
