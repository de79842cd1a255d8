//! The models built into this project's programs, read from memory (nothing is written to
//! disk): the CLI's defaults and the Python package's `Model.builtin()` and
//! `VisionModel.builtin()` share them from here.
//!
//! - [`poetry`]: a small character-level RoFormer masked LM trained on Chinese poetry
//!   (`assets/poetry-model/MODEL_CARD.md`);
//! - [`fashion`]: a small ViT with 2D RoPE trained on Fashion-MNIST
//!   (`assets/fashion-model/MODEL_CARD.md`).
//!
//! # Fill a mask, embed, classify an image
//!
//! ```
//! use roformer::pipeline::image::{classify_image, pixel_values};
//! use roformer::pipeline::Pooling;
//! use roformer::Precision;
//!
//! let lm = roformer_builtin::poetry::masked_lm(Precision::F32)?;
//! let masks = lm.fill_mask("床前明月[MASK]", 3)?; // [CLS] 床 前 明 月 [MASK] [SEP]
//! assert_eq!((masks.len(), masks[0].position), (1, 5));
//! let best = &masks[0].predictions;
//! assert!(best[0].probability >= best[1].probability);
//!
//! let vectors = lm.embed(&["举头望明月", "低头思故乡"], Pooling::Mean)?;
//! let cosine: f32 = vectors[0].iter().zip(&vectors[1]).map(|(a, b)| a * b).sum();
//! assert!(cosine.abs() <= 1.0 + 1e-5); // unit vectors: the dot product is the cosine
//!
//! let vision = roformer_builtin::fashion::model_dir()?;
//! let classifier = vision.load_classifier(candle_core::DType::F32, &candle_core::Device::Cpu)?;
//! let processor = roformer_builtin::fashion::processor()?;
//! let png = std::fs::read(concat!(
//!     env!("CARGO_MANIFEST_DIR"),
//!     "/../roformer/tests/fixtures/images/grey.png"
//! ))?;
//! let channels = classifier.model.config().num_channels; // 1: Fashion-MNIST is grey
//! let pixels = pixel_values(&png, &processor, channels, &Default::default())?;
//! let top = classify_image(&classifier.model, &pixels, 3)?;
//! assert_eq!(top.len(), 3); // the three likeliest of the ten classes, best first
//! assert!(top[0].score >= top[1].score && top[0].score <= 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod fashion;
pub mod poetry;
