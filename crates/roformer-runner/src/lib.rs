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
//! - [`precision`]: the `--precision` flag.
//!
//! An application crate: errors are [`anyhow::Error`]s with the context a person reads, and
//! it prints (stderr notes, progress bars), as a command does.

#![warn(missing_docs)]

pub mod json;
pub mod output;
pub mod plot;
pub mod precision;
pub mod train;
