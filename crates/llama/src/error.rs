//! The error type of the crate.

use std::path::PathBuf;

/// Everything that can go wrong reading a GGUF file, building the model or running it.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The bytes are not a well-formed GGUF file.
    #[error("malformed GGUF file at byte {offset}: {what}")]
    Malformed {
        /// Offset into the file where reading failed.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// A metadata key the model needs is absent.
    #[error("GGUF metadata has no `{0}`")]
    MissingKey(String),
    /// A metadata value has the wrong type or an unusable value.
    #[error("GGUF metadata `{key}`: {what}")]
    BadValue {
        /// The key.
        key: String,
        /// What was wrong.
        what: String,
    },
    /// A tensor the model needs is absent.
    #[error("GGUF file has no tensor `{0}`")]
    MissingTensor(String),
    /// A tensor has the wrong shape for the configuration.
    #[error("tensor `{name}` has shape {got:?}, the configuration asks for {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// The shape the configuration implies (row-major, outermost first).
        expected: Vec<usize>,
        /// The shape the file stores.
        got: Vec<usize>,
    },
    /// The model's architecture or a feature of it is not supported.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenId {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// A request the model cannot serve (empty prompt, context exceeded, bad sampling option).
    #[error("{0}")]
    Request(String),
    /// The tokenizer could not be built or could not encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The rotary core refused a shape or a table.
    #[error(transparent)]
    Rope(#[from] rotary::RopeError),
    /// A candle operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, LlamaError>;
