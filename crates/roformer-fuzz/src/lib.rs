//! A seeded mutation fuzzer for RoFormer's loaders and inputs, on stable Rust.
//!
//! Six targets ([`targets::Target`]) take raw bytes: `config.json`, `vocab.txt` with
//! `tokenizer_config.json`, `model.safetensors`, `pytorch_model.bin` (a `torch.save` zip),
//! `roformer forward`'s input JSON, and a GGUF file. Each parses its input with the `roformer`
//! (or `llama`) crate's public entry points and, when that works, builds and runs a small model
//! (or tokenizes a few texts). Refusing an input with an error is fine; a panic, an abort, a stack overflow,
//! running out of memory or time is a finding.
//!
//! Mutations ([`mutate`]) start from the `roformer` crate's test fixtures: format-blind ones
//! (bit flips, interesting bytes and integers, truncation, runs inserted and deleted, splices
//! of two inputs) and format-aware ones (JSON values set to extremes, wrong types and deep
//! nesting; safetensors shapes, offsets and dtypes; pickle opcodes, integers and nesting in a
//! re-zipped archive).
//!
//! The `roformer-fuzz` binary runs inputs in a worker process ([`run`]) with a memory limit,
//! so that a crash is recorded rather than ending the run; `cargo test` runs a short
//! deterministic slice of each target (`tests/slice.rs`). The same target functions serve
//! libFuzzer targets in the repository's `fuzz/` directory (`cargo +nightly fuzz`).
//!
//! ```
//! use roformer_fuzz::outcome::Outcome;
//! use roformer_fuzz::targets::Target;
//!
//! // A seed passes; a mangled one is refused with an error, never a panic or a NaN.
//! let seed = Target::Config.seeds().remove(0);
//! assert_eq!(Target::Config.run(&seed), Outcome::Accepted);
//! let broken = &seed[..seed.len() / 2];
//! assert!(matches!(Target::Config.run(broken), Outcome::Rejected(_)));
//! ```

#![warn(missing_docs)]

pub mod fixtures;
pub mod mutate;
pub mod outcome;
pub mod rng;
pub mod run;
pub mod targets;

pub use outcome::Outcome;
pub use targets::Target;
