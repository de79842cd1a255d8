//! Training: the model on trainable variables, its losses, and checkpoints written as
//! Hugging Face directories.
//!
//! The forward passes run in [`crate::Mode::Train`]: op by op, every op carrying gradients
//! (the fused inference path keeps no gradient history and is never taken), with dropout
//! drawn from a seeded [`crate::Dropout`].

pub mod checkpoint;
pub mod loss;
pub(crate) mod ops;
pub mod params;

use std::path::PathBuf;

pub use loss::{classification_loss, cross_entropy, mlm_loss, BatchInputs, LossOutput, IGNORE};
pub use params::{build_trainable, Params, Trainable};

/// What can go wrong while training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A model, config or input problem.
    #[error(transparent)]
    Model(#[from] crate::error::ModelError),
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
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
}
