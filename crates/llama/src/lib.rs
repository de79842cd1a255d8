//! A LLaMA decoder on candle that reads GGUF files (llama.cpp's format), with its rotary
//! position embedding computed by the [`rotary`] crate.
//!
//! - [`gguf`]: a bounds-checked GGUF reader; tensors are read (not mapped) and checked finite.
//! - [`LlamaConfig`]: hyper-parameters from the `llama.*` metadata.
//! - [`Llama`]: embedding, `layers` x (RMS norm, grouped-query attention with RoPE and a KV
//!   cache, RMS norm, SwiGLU), final norm, head (tied to the embedding when the file has no
//!   `output.weight`); weights quantized (candle's ggml kernels) or dequantized to f32.
//! - [`Tokenizer`]: the byte-level BPE the file's metadata describes, built with Hugging Face's
//!   `tokenizers`.
//! - [`generate`]: greedy or temperature sampling with a KV cache, timed.
//! - [`Llama::forward_ragged`]: one pass over the new tokens of several sequences, each with
//!   its own cache (continuous batching).
//!
//! GGUF files store the q/k projection rows permuted so that interleaved RoPE pairs
//! `(x_{2i}, x_{2i+1})` apply; [`LoadOptions::layout`] = [`rotary::Layout::Half`] undoes the
//! permutation and runs Hugging Face's half layout `(x_i, x_{i+d/2})` instead, with the same
//! logits.

mod attention;
mod cache;
mod config;
mod error;
mod finite;
pub mod generate;
pub mod gguf;
mod linear;
mod model;
pub mod q4_1;
mod tokenizer;

pub use cache::KvCache;
pub use config::LlamaConfig;
pub use error::{LlamaError, Result};
pub use linear::{Linear, Weight};
pub use model::{Chunk, Llama, LoadOptions, Logits};
pub use q4_1::Q4_1Matrix;
pub use tokenizer::Tokenizer;
