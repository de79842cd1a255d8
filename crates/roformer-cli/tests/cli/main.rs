//! End-to-end tests of the `roformer` binary: one module per command, one test binary.

mod common;
mod rope_freqs;
mod tokenize;
