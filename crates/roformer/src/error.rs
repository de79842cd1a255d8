//! The error type of the model side of the crate: configuration, checkpoint and input problems.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong loading or running a RoFormer model.
///
/// Bad user data (a config, a checkpoint, model inputs) always ends up here, never in a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file could not be read (the cause is the error's source, not repeated in its
    /// message).
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A model directory lacks a file it needs.
    #[error("{dir}: no {what} found")]
    MissingFile {
        /// The directory searched.
        dir: PathBuf,
        /// What was looked for (e.g. `config.json`).
        what: String,
    },
    /// `config.json` is not a valid JSON object or has a field of the wrong type (the parser's
    /// message is the error's source, not repeated in its message).
    #[error("{path}: malformed config")]
    ConfigJson {
        /// The file (or `<string>`).
        path: PathBuf,
        /// The parser's message.
        source: serde_json::Error,
    },
    /// A config value that parses but cannot describe a working model.
    #[error("invalid config: {field}: {reason}")]
    InvalidConfig {
        /// The `config.json` field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An activation name this crate does not know.
    #[error("unknown activation {name:?} in {field} (known: {known})")]
    UnknownActivation {
        /// The config field naming it.
        field: &'static str,
        /// The name found.
        name: String,
        /// The names accepted, comma-separated.
        known: String,
    },
    /// A checkpoint file that cannot be parsed (truncated, corrupt, or not a checkpoint).
    #[error("{path}: unreadable checkpoint: {reason}")]
    CorruptCheckpoint {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// A checkpoint file changed (was truncated or rewritten) while it was being read: a read
    /// that the file's size at opening allowed came back short, or its size or modification
    /// time differ from those it had when it was opened.
    #[error("{path} changed while it was being read: {what}; load it again once it is written")]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// Tensors the model needs that the checkpoint lacks or holds with the wrong shape; every
    /// problem found is listed, not only the first.
    #[error("{path}: {problems}")]
    Weights {
        /// The checkpoint file.
        path: PathBuf,
        /// The problems, one per tensor.
        problems: WeightProblems,
    },
    /// Model inputs that do not fit the model or each other.
    #[error("invalid input: {0}")]
    Input(String),
    /// An error from candle while running the model.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// One tensor a checkpoint gets wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightProblem {
    /// The tensor is absent.
    Missing {
        /// Its name as transformers writes it.
        name: String,
        /// The shape the model expects.
        expected: Vec<usize>,
    },
    /// The tensor has the wrong shape.
    Shape {
        /// Its name as stored in the file.
        name: String,
        /// The shape the model expects.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// The tensor is listed but its data cannot be read or converted.
    Unreadable {
        /// Its name as stored in the file.
        name: String,
        /// Why.
        reason: String,
    },
    /// The config asks for more encoder layers than the checkpoint holds (reported once, not
    /// as every tensor of the missing layers).
    LayerCount {
        /// `num_hidden_layers` of the config.
        expected: usize,
        /// Layers `0..found` have tensors in the checkpoint.
        found: usize,
    },
    /// The checkpoint holds a tensor the config gives the model no use for (a bias the config
    /// turns off, a layer past `num_hidden_layers`): loading would silently drop it.
    Unexpected {
        /// Its name as stored in the file.
        name: String,
        /// Its shape in the file.
        found: Vec<usize>,
    },
    /// The tensor holds a NaN or an infinity (the first one found is named).
    NonFinite {
        /// Its name as stored in the file.
        name: String,
        /// The flat (row-major) index of the first non-finite value.
        index: usize,
        /// That value as printed: `NaN`, `inf` or `-inf`.
        value: String,
    },
}

impl fmt::Display for WeightProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightProblem::Missing { name, expected } => {
                write!(f, "missing tensor {name} (expected shape {expected:?})")
            }
            WeightProblem::Shape {
                name,
                expected,
                found,
            } => write!(
                f,
                "tensor {name} has shape {found:?}, expected {expected:?}"
            ),
            WeightProblem::Unreadable { name, reason } => {
                write!(f, "tensor {name} cannot be read: {reason}")
            }
            WeightProblem::LayerCount { expected, found } => {
                write!(
                    f,
                    "config asks for {expected} layers, the checkpoint has {found}"
                )
            }
            WeightProblem::Unexpected { name, found } => write!(
                f,
                "unexpected tensor {name} (shape {found:?}): the config gives the model no use \
                 for it"
            ),
            WeightProblem::NonFinite { name, index, value } => write!(
                f,
                "tensor {name} holds {value} at flat index {index} (weights must be finite)"
            ),
        }
    }
}

/// The list of problems of one checkpoint, displayed one per line up to
/// [`WeightProblems::LISTED`], then counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WeightProblems(pub Vec<WeightProblem>);

impl WeightProblems {
    /// Problems displayed one per line; the rest are summarised as "... and N more".
    pub const LISTED: usize = 40;
}

impl fmt::Display for WeightProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} tensor problem(s):", self.0.len())?;
        for p in self.0.iter().take(Self::LISTED) {
            write!(f, "\n  {p}")?;
        }
        if let Some(rest) = self.0.len().checked_sub(Self::LISTED).filter(|&n| n > 0) {
            write!(f, "\n  ... and {rest} more")?;
        }
        Ok(())
    }
}

/// Shorthand for results of the model side of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;
