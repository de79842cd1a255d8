//! Training: the model on trainable variables, its losses, and checkpoints written as
//! Hugging Face directories.
//!
//! The forward passes run in [`crate::Mode::Train`]: layer by layer, every op carrying
//! gradients (the fused inference path keeps no gradient history and is never taken), with
//! dropout drawn from a seeded [`crate::Dropout`]. On the CPU in f32 the heavy steps (dense
//! layers, attention, dropout with the residual add, the embedding lookup, the cross entropy)
//! are fused ops with hand-written backward passes (`crate::autograd`); elsewhere candle's
//! differentiable primitives, which the ops are tested against.

pub mod budget;
pub mod checkpoint;
pub mod classify;
pub mod confusion;
pub mod dump;
mod error;
pub mod loss;
pub mod mlm;
pub mod options;
pub mod out_dir;
pub mod params;
pub mod resume;
pub mod run;
pub mod session;
pub mod vision;

pub use error::TrainError;
pub use loss::{classification_loss, cross_entropy, mlm_loss, BatchInputs, LossOutput, IGNORE};
pub use options::{resumed, Resumable, ResumeConflict, TrainOptions};
pub use params::{build_trainable, Params, Trainable};
pub use session::{
    fit, Finished, ModelStart, Observer, Prepared, PreparedData, TaskOptions, TrainRun,
};
pub use vision::{fit_vision, score_split, SplitScore, VisionTrainOptions};
