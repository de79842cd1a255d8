//! The error type of the crate.

use std::path::PathBuf;

/// Everything that can go wrong reading a GGUF file, building the model or running it.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The file could not be opened or read, or is not a regular file (the cause is the
    /// error's source, not repeated in its message).
    #[error("cannot read {path}")]
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
    /// The file changed (was truncated or rewritten) while it was being read: a read that the
    /// file's size at opening allowed came back short.
    #[error("{path} changed while it was being read: {what}")]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// Which bytes were asked for and what came back.
        what: String,
    },
    /// A stored weight is NaN or an infinity: one of a float tensor's values, or the scale (or
    /// minimum) of a block of a quantized tensor.
    #[error(
        "tensor `{name}` holds {value} at {place}; every weight and block scale must be finite"
    )]
    NonFiniteWeight {
        /// The tensor.
        name: String,
        /// Where: `index I` of a float tensor, or `the scale d of block B (values A..E)`.
        place: String,
        /// The value read.
        value: f32,
    },
    /// An activation entering a quantized product is NaN, infinite, or too large for the 8-bit
    /// blocks it is quantized to (whose scale is an f16): the quantization would turn it into
    /// a silently wrong number.
    #[error(
        "the input of `{weight}` holds {value} at flat index {index}; a quantized product takes \
         finite values of magnitude at most {limit:e} (a weight before it is likely corrupt or \
         too large)"
    )]
    Activation {
        /// The weight of the product.
        weight: String,
        /// Flat (row-major) index into the input.
        index: usize,
        /// The value found.
        value: f32,
        /// The largest magnitude the product's activation blocks hold.
        limit: f32,
    },
    /// The model computed a NaN or infinite logit.
    #[error(
        "the model produced a non-finite logit {value} (sequence {sequence}, position {position}, \
         token {token}); a weight is likely corrupt or too large"
    )]
    NonFiniteLogit {
        /// The sequence of the batch.
        sequence: usize,
        /// The position among the positions whose logits were asked for.
        position: usize,
        /// The vocabulary entry.
        token: usize,
        /// The value.
        value: f32,
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
