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
//!
//! ```
//! use llama::generate::{generate, Sampling};
//! use llama::gguf::GgufFile;
//! use llama::{Llama, LoadOptions, Tokenizer};
//!
//! // The tiny random model of the tests (2 layers, width 64, 64 tokens): its text is noise.
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-llama/tiny.gguf");
//! let file = GgufFile::open(path)?;
//! let model = Llama::load(&file, &LoadOptions::default())?;
//! let tokenizer = Tokenizer::from_gguf(&file)?;
//! let prompt = tokenizer.encode("hello")?;
//! // Greedy, no end-of-sequence token: exactly 8 new tokens, each handed over as it comes.
//! let mut seen = Vec::new();
//! let out = generate(&model, &prompt, 8, Sampling::GREEDY, None, |id| {
//!     seen.push(id);
//!     Ok(())
//! })?;
//! assert_eq!((out.tokens.len(), &out.tokens), (8, &seen));
//! println!("{}", tokenizer.decode(&out.tokens)?);
//! # Ok::<(), llama::LlamaError>(())
//! ```
//!
//! `cargo run --release -p llama --example generate -- model.gguf "Once upon a time"` runs a
//! real model the same way.
#![warn(missing_docs)]

mod attention;
mod cache;
mod cached_attention;
mod config;
mod error;
mod finite;
pub mod generate;
pub mod gguf;
mod groups;
mod linear;
mod model;
pub mod q4_1;
pub mod q8_0;
mod tokenizer;

pub use cache::KvCache;
pub use config::LlamaConfig;
pub use error::{LlamaError, Result};
pub use linear::{Linear, Weight};
pub use model::{Chunk, Llama, LoadOptions, Logits};
pub use q4_1::Q4_1Matrix;
pub use q8_0::Q8_0Matrix;
pub use tokenizer::Tokenizer;
