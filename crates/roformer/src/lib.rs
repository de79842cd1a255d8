//! RoFormer on candle.
#![warn(missing_docs)]

pub mod activation;
pub mod attention;
pub mod autograd;
pub mod config;
mod cpu;
pub mod data;
pub mod embeddings;
pub mod encoder;
pub mod error;
mod fused;
pub mod heads;
pub mod images;
mod input;
pub mod linear_attention;
pub mod memory;
pub mod mode;
pub mod model;
pub mod norm;
pub mod optim;
pub mod pipeline;
pub mod plan;
pub mod position_bias;
pub mod roofline;
pub mod rope_scaling;
pub mod score_mask;
pub mod shapes;
pub mod tasks;
pub mod tokenizer;
pub mod train;
pub mod vision;
pub mod weights;

pub use activation::Activation;
pub use config::{NormType, PositionEmbeddingType, RawConfig, RoFormerConfig};
pub use cpu::Precision;
pub use error::{ModelError, WeightProblem, WeightProblems};
pub use mode::{Dropout, KeepMask, Mode};
pub use model::{Architecture, ModelDir, RoFormerModel};
pub use plan::{Kernels, Plan};
pub use tasks::{
    HeadModel, HeadOutput, RoFormerForMaskedLM, RoFormerForSequenceClassification,
    RoFormerForTokenClassification,
};
pub use tokenizer::{Encoding, RoFormerTokenizer, TokenizerError};
pub use weights::{Checkpoint, Format, Loaded};
