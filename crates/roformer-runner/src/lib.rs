//! What a program that trains and reports needs beside the `roformer` library, shared by the
//! `roformer` binary and the experiments (`roformer-experiments`):
//!
//! - [`train`]: the observer of a training run ([`train::observer::train`]: announcements,
//!   progress bar, `metrics.jsonl`, loss plot, summary; [`train::vision::Printer`] for a
//!   vision run), stop signals, the run's record
//!   (`run.json`) and fingerprint, the note of a repaired output directory (whose rules are
//!   [`roformer::train::out_dir`]'s), and the checks of a run's flags;
//! - [`output`]: every file write (atomic) and every line on standard output ([`outln!`]);
//! - [`json`]: JSON that refuses non-finite numbers, naming the field;
//! - [`plot`]: figures written as PNG or SVG with an embedded font;
//! - [`precision`]: the `--precision` flag;
//! - [`default_model`] and [`default_vision_model`]: the model of `--model DIR`, or the built-in
//!   one of `roformer-builtin`;
//! - [`truncation`]: `--max-length`, a text cut to its first tokens and the notice that says so;
//! - [`inputs`]: an output refused where it would replace one of the command's own inputs;
//! - [`alloc`]: the warm allocator settings of the training commands and the benchmarks.
//!
//! An application crate: errors are [`anyhow::Error`]s with the context a person reads, and
//! it prints (stderr notes, progress bars), as a command does.
//!
//! ```
//! use roformer_runner::{json, output};
//!
//! #[derive(serde::Serialize)]
//! struct Row {
//!     step: u64,
//!     loss: f64,
//! }
//! // JSON with a non-finite number is an error naming the field, never `null`.
//! let text = json::to_string(&Row { step: 3, loss: 2.5 })?;
//! assert_eq!(text, r#"{"step":3,"loss":2.5}"#);
//! let err = json::to_string(&Row { step: 4, loss: f64::NAN }).unwrap_err();
//! assert!(err.to_string().contains("loss"), "{err}");
//!
//! // A file is written whole or not at all (a temporary file renamed over the path).
//! let path = std::env::temp_dir().join(format!("runner-doc-{}.json", std::process::id()));
//! output::write(&path, text.as_bytes())?;
//! assert_eq!(std::fs::read_to_string(&path)?, text);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod default_model;
pub mod default_vision_model;
pub mod inputs;
pub mod json;
pub mod output;
pub mod plot;
pub mod precision;
pub mod train;
pub mod truncation;
