//! The error type of training.

use std::path::PathBuf;

/// What can go wrong while training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A model, config or input problem.
    #[error(transparent)]
    Model(#[from] crate::error::ModelError),
    /// A tokenizer's files.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// The run would not fit in memory (nothing was allocated).
    #[error(transparent)]
    TooLarge(#[from] crate::memory::TooLarge),
    /// The caller's [`Observer`](crate::train::Observer) refused the run.
    #[error(transparent)]
    Observer(Box<dyn std::error::Error + Send + Sync>),
    /// A file or directory could not be read or written (the cause is the error's source, not
    /// repeated in its message).
    #[error("cannot access {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A checkpoint could not be serialised.
    #[error("cannot save the checkpoint: {0}")]
    Save(String),
    /// A candle error during a step.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A vision model's config, weights or input.
    #[error(transparent)]
    Vision(#[from] crate::vision::VisionError),
    /// An image dataset that cannot be read.
    #[error(transparent)]
    Images(#[from] crate::images::error::DatasetError),
    /// An augmentation or batch setting out of range.
    #[error(transparent)]
    ImageConfig(#[from] crate::images::error::ConfigError),
    /// A corpus or its processing.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// The optimiser or its schedule.
    #[error(transparent)]
    Optim(#[from] crate::optim::OptimError),
    /// The loss or a gradient stopped being finite; nothing of this step was saved.
    #[error("non-finite {what} at step {step}")]
    NonFinite {
        /// The step (1-based) that produced it.
        step: u64,
        /// What was not finite.
        what: String,
    },
    /// The corpus is too short for one training block.
    #[error(
        "the corpus gives no training block of {seq_len} tokens: {documents} documents, {train} \
         of them for training (validation share {validation}); give more text, a shorter \
         sequence length, one document per block, or a smaller validation share"
    )]
    NoTrainingBlock {
        /// Tokens per block.
        seq_len: usize,
        /// Documents read.
        documents: usize,
        /// Documents on the training side of the split.
        train: usize,
        /// The validation share.
        validation: f64,
    },
    /// A checkpoint that cannot be resumed.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// A trajectory dump that cannot be made of this run.
    #[error("cannot dump the run's trajectory: {0}")]
    Dump(String),
    /// A malformed example of a classification file.
    #[error("{path}:{line}: {reason}")]
    Examples {
        /// The file.
        path: PathBuf,
        /// The 1-based line (0: the file as a whole).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}
