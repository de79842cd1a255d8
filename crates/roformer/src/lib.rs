//! RoFormer (Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary Position
//! Embedding") on candle: the encoder with rotary position embedding (and the other position
//! kinds it is compared with), its tokenizer, Hugging Face checkpoints in and out, the
//! pipelines that use it, training, and a vision transformer with 2D RoPE.
//!
//! A query or key vector at position `m` is rotated pair by pair by the angles `m * theta_i`,
//! `theta_i = base^(-2i/d)`, so that `<R_m q, R_n k> = <q, R_{n-m} k>` depends only on `n - m`
//! (the rotation itself is the [`rotary`] crate's).
//!
//! # Fill a mask, embed a text
//!
//! [`pipeline::MaskedLm`] is a checkpoint saved from `RoFormerForMaskedLM` with its
//! tokenizer: a directory (`config.json`, `model.safetensors` or `pytorch_model.bin`,
//! `vocab.txt`), or the built-in poetry model of the `roformer-builtin` crate
//! (`roformer_builtin::poetry::masked_lm`, which puts 月 first in `举头望明[MASK]`).
//!
//! ```
//! use roformer::pipeline::{MaskedLm, Pooling};
//! use roformer::Precision;
//!
//! // A tiny random checkpoint of the tests (2 layers, width 32, 97 CJK characters).
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/roundtrip/mlm_rotary");
//! let lm = MaskedLm::from_dir(dir, Precision::F32)?;
//! let masks = lm.fill_mask("一七[MASK]上", 3)?;
//! assert_eq!((masks.len(), masks[0].position), (1, 3)); // [CLS] 一 七 [MASK] 上 [SEP]
//! let best = &masks[0].predictions[0];
//! assert!(best.probability >= masks[0].predictions[2].probability);
//! println!("{:?} {:?}", best.token, best.sequence);
//!
//! let vectors = lm.embed(&["一七三上", "不与"], Pooling::Mean)?;
//! let norm: f32 = vectors[0].iter().map(|x| x * x).sum::<f32>().sqrt();
//! assert_eq!(vectors[0].len(), 32); // the hidden size
//! assert!((norm - 1.0).abs() < 1e-5); // L2-normalised: a dot product is the cosine
//! # Ok::<(), roformer::pipeline::PipelineError>(())
//! ```
//!
//! Below the front door: [`ModelDir`] loads a checkpoint (every missing, mis-shaped or unused
//! tensor named in one error) into a [`RoFormerModel`] or a task model
//! ([`RoFormerForMaskedLM`], [`RoFormerForSequenceClassification`], ...), and
//! [`pipeline`] runs batches of encodings through them.
//!
//! # Train
//!
//! [`train::fit`] is a whole run in one call: the data read, the model built (from a
//! checkpoint, or fresh from a config and a vocabulary), AdamW and its schedule, checkpoints in
//! the run's directory, a resume from them, and a stop flag. [`train::TrainOptions`] carries
//! the optimisation settings with their documented defaults.
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//!
//! use roformer::train::mlm::MlmDataOptions;
//! use roformer::train::run::Event;
//! use roformer::train::{fit, ModelStart, Observer, TaskOptions, TrainOptions, TrainRun};
//!
//! /// Keeps the loss of every step.
//! struct Losses(Vec<f64>);
//! impl Observer for Losses {
//!     fn event(&mut self, event: Event) {
//!         if let Event::Step(step) = event {
//!             self.0.push(step.loss);
//!         }
//!     }
//! }
//!
//! let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
//! let model = ModelStart::from_checkpoint(format!("{fixtures}/roundtrip/mlm_rotary").as_ref())?;
//! let data = MlmDataOptions {
//!     corpus: vec![format!("{fixtures}/poetry").into()],
//!     seq_len: 32,
//!     batch_size: 4,
//!     ..MlmDataOptions::default()
//! };
//! let out = std::env::temp_dir().join(format!("roformer-doc-fit-{}", std::process::id()));
//! let run = TrainRun {
//!     options: TrainOptions { steps: Some(10), lr: 1e-3, ..TrainOptions::default() },
//!     ..TrainRun::new(&out, &model, TaskOptions::MaskedLm(data))
//! };
//! let mut losses = Losses(Vec::new());
//! let finished = fit(&run, &mut losses, &AtomicBool::new(false))?;
//! assert_eq!((finished.steps, losses.0.len()), (10, 10));
//! assert!(out.join("checkpoint/model.safetensors").is_file());
//! # std::fs::remove_dir_all(&out).ok();
//! # Ok::<(), roformer::train::TrainError>(())
//! ```
//!
//! Whole programs: `cargo run -p roformer --example train` (this run, its losses printed);
//! `roformer-builtin`'s `fill_mask` and `embed` examples on the built-in model; `rotary`'s
//! `candle_attention`, RoPE inside a candle model of one's own.
#![warn(missing_docs)]

pub(crate) mod activation;
pub(crate) mod attention;
pub(crate) mod autograd;
pub mod config;
mod cpu;
pub mod data;
pub(crate) mod embeddings;
pub(crate) mod encoder;
pub mod error;
mod forward_input;
mod fused;
pub(crate) mod heads;
pub mod images;
mod input;
pub(crate) mod linear_attention;
pub mod measure;
pub mod memory;
pub(crate) mod mode;
pub(crate) mod model;
pub(crate) mod norm;
pub mod optim;
pub mod pipeline;
pub(crate) mod plan;
pub(crate) mod position_bias;
pub(crate) mod roofline;
pub mod rope_scaling;
pub(crate) mod score_mask;
pub(crate) mod shapes;
pub(crate) mod tasks;
pub mod tokenizer;
pub mod train;
pub mod vision;
pub(crate) mod weights;

pub use activation::Activation;
pub use autograd::param_grads::ParamGrads;
pub use config::{NormType, PositionEmbeddingType, RawConfig, RoFormerConfig};
pub use cpu::Precision;
pub use error::{ModelError, WeightProblem, WeightProblems};
pub use forward_input::{ForwardInput, ForwardTensors};
pub use mode::{Dropout, KeepMask, Mode};
pub use model::{Architecture, ModelDir, RoFormerModel};
pub use plan::{Kernels, Plan};
pub use tasks::{
    HeadModel, HeadOutput, RoFormerForMaskedLM, RoFormerForSequenceClassification,
    RoFormerForTokenClassification,
};
pub use tokenizer::{Encoding, RoFormerTokenizer, TokenizerError};
pub use weights::{Checkpoint, Format, Loaded};

/// Whether this process asks for oneDNN's bf16 products, which run on its OpenMP threads: on
/// a CPU with AMX-BF16, or with `ROFORMER_ONEDNN=1` (`ROFORMER_ONEDNN=0` turns it off). It
/// reads the variable and the CPU only; nothing is opened.
///
/// A program that gets `true` should set `OMP_WAIT_POLICY=passive` before its first bf16
/// product, as the `roformer` binary and the Python package do: libgomp reads it when oneDNN
/// opens, and by default its idle threads spin after each product on the cores that rayon's
/// threads want for the work between the products (a DINOv3 ViT-S/16 forward at batch 8 took
/// 1.0 CPU seconds spinning and 0.58 passive; BENCHMARKS.md, "oneDNN").
pub fn bf16_products_on_openmp() -> bool {
    cpu::bf16::onednn::requested()
}
