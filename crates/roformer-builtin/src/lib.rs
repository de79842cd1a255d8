//! The models built into this project's programs, read from memory (nothing is written to
//! disk): the CLI's defaults and the Python package's `Model.builtin()` and
//! `VisionModel.builtin()` share them from here.
//!
//! - [`poetry`]: a small character-level RoFormer masked LM trained on Chinese poetry
//!   (`assets/poetry-model/MODEL_CARD.md`);
//! - [`fashion`]: a small ViT with 2D RoPE trained on Fashion-MNIST
//!   (`assets/fashion-model/MODEL_CARD.md`).
#![warn(missing_docs)]

pub mod fashion;
pub mod poetry;
