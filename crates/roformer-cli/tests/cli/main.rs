//! End-to-end tests of the `roformer` binary: one module per command, one test binary.

mod analyze_attention_2d;
mod analyze_decay;
mod bench_attention;
mod bench_model;
mod bench_rope;
mod bench_rope_variants;
mod bench_train;
mod common;
mod default_model;
mod embed;
mod eval;
mod experiment;
mod fill_mask;
mod forward;
mod llama;
mod loader;
mod non_finite;
mod output_paths;
mod plot_files;
mod rope_freqs;
mod tokenize;
mod train;
