//! `roformer`: rotary position embeddings and RoFormer from the command line.
//!
//! A thin layer over the `rotary` and `roformer` crates: argument parsing, files, progress
//! bars, tables, plots and `--json` output.

mod analyze;
mod bench;
mod classify;
mod embed;
mod eval;
mod fill_mask;
mod forward;
mod llama;
mod rope_cmd;
mod serve;
mod tokenize;
mod train;
mod vision;
mod vocab;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use roformer_runner::{
    alloc, default_model, default_vision_model, inputs, json, output, plot, precision, truncation,
};

/// Rotary position embedding (RoPE) and the RoFormer transformer.
#[derive(Debug, Parser)]
#[command(name = "roformer", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure speed against the physical limit and peer implementations.
    #[command(subcommand)]
    Bench(bench::Command),
    /// Inspect rotary schedules.
    #[command(subcommand)]
    Rope(rope_cmd::Command),
    /// Run a checkpoint on token ids and write its outputs (the exact, scriptable entry point).
    Forward(forward::Args),
    /// Turn text into token ids with a checkpoint's tokenizer.
    Tokenize(tokenize::Args),
    /// Predict the tokens behind each `[MASK]`.
    FillMask(fill_mask::Args),
    /// One vector per input line.
    Embed(embed::Args),
    /// The paper's analyses, as numbers and plots.
    #[command(subcommand)]
    Analyze(analyze::Command),
    /// Build a vocabulary from a corpus.
    #[command(subcommand)]
    Vocab(vocab::Command),
    /// Evaluate a masked LM on held-out documents.
    #[command(subcommand)]
    Eval(eval::Command),
    /// Pre-train a masked LM or fine-tune a classifier.
    #[command(subcommand)]
    Train(train::Command),
    /// Label texts with a fine-tuned classifier.
    Classify(classify::Args),
    /// Serve the models over HTTP (embeddings, fill-mask, classification; completions with
    /// --gguf; images with --vision or --vision-model), with batching, limits and metrics.
    Serve(serve::Args),
    /// The paper's training claims at small scale (results.json, figures, EXPERIMENTS.md
    /// sections).
    #[command(subcommand)]
    Experiment(roformer_experiments::Command),
    /// A vision transformer with 2D RoPE (DINOv3 checkpoints).
    #[command(subcommand)]
    Vision(vision::Command),
    /// A pretrained LLaMA from a GGUF file (SmolLM2-135M by default), RoPE through our core.
    #[command(subcommand)]
    Llama(llama::Command),
}

impl Command {
    /// Whether the command trains a model (backward passes through candle's autograd).
    fn trains(&self) -> bool {
        matches!(
            self,
            Command::Train(_)
                | Command::Experiment(_)
                | Command::Vision(vision::Command::Train(_))
                | Command::Bench(bench::Command::Train(_))
        )
    }

    /// Whether candle's element-wise ops run on the calling thread
    /// ([`inline_candle_elementwise`]): training, and every vision command (inference too: each
    /// block scales and adds its branches through candle, and no quantized product runs).
    fn inlines_elementwise(&self) -> bool {
        self.trains()
            || matches!(
                self,
                Command::Vision(_) | Command::Bench(bench::Command::Vision(_))
            )
    }

    /// Whether the command runs under the warm allocator ([`alloc`]): training, and the
    /// benchmarks that time allocating code against peers timed the same way.
    fn runs_warm(&self) -> bool {
        self.trains()
            || matches!(
                self,
                Command::Bench(
                    bench::Command::Model(_) | bench::Command::Rope(_) | bench::Command::Vision(_)
                )
            )
    }
}

fn main() -> ExitCode {
    quiet_library_backtraces();
    fix_thread_count();
    idle_openmp_threads_sleep();
    let cli = Cli::parse();
    if cli.command.inlines_elementwise() {
        inline_candle_elementwise();
    }
    if cli.command.runs_warm() {
        alloc::exec_warm();
    }
    let result = match cli.command {
        Command::Bench(c) => bench::run(c),
        Command::Rope(c) => rope_cmd::run(c),
        Command::Forward(a) => forward::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::FillMask(a) => fill_mask::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Analyze(c) => analyze::run(c),
        Command::Vocab(c) => vocab::run(c),
        Command::Eval(c) => eval::run(c),
        Command::Train(c) => train::run(c),
        Command::Classify(a) => classify::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Experiment(c) => roformer_experiments::run(c),
        Command::Vision(c) => vision::run(c),
        Command::Llama(c) => llama::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `roformer ... | head`: the reader had what it wanted.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `err` comes from writing to a pipe whose reader has gone, as when the output is
/// piped into `head`: not a failure of the command, and nothing to report.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Keeps library errors to one message: candle attaches a backtrace to its errors (and prints
/// it in their message) whenever `RUST_BACKTRACE` is set, which would bury a user's mistake
/// under stack frames. `RUST_LIB_BACKTRACE=0` turns that capture off while panics still get
/// their backtrace from `RUST_BACKTRACE`; a `RUST_LIB_BACKTRACE` already set is kept, so
/// `RUST_LIB_BACKTRACE=1` shows where an error came from.
fn quiet_library_backtraces() {
    // Called first in `main`, before any other thread exists.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// Fixes the worker count once. With `RAYON_NUM_THREADS` unset, candle works out its thread
/// count on every matrix product by reading `/proc/cpuinfo` for the physical cores, which
/// measured about a quarter of a SmolLM2 decode step (`bench llama`: 108-125 -> 143-163
/// tokens/s). Setting the variable to that same count, once, keeps candle's threading and drops
/// the repeated read; rayon's pool (our kernels) then also runs one thread per physical core. A
/// value already set is kept.
fn fix_thread_count() {
    // Called in `main` before any other thread exists, like `quiet_library_backtraces`.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let threads = candle_core::utils::get_num_threads();
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    }
}

/// Lets oneDNN's OpenMP threads sleep as soon as a product ends (`OMP_WAIT_POLICY=passive`)
/// where the bf16 products run on them (`roformer::bf16_products_on_openmp`, whose doc gives
/// the measurement). libgomp reads the variable when oneDNN is first opened; a value already
/// set is kept.
fn idle_openmp_threads_sleep() {
    // Called in `main` before any other thread exists, like `fix_thread_count`.
    if roformer::bf16_products_on_openmp() && std::env::var_os("OMP_WAIT_POLICY").is_none() {
        std::env::set_var("OMP_WAIT_POLICY", "passive");
    }
}

/// Runs candle's element-wise ops on the calling thread alone in training commands. candle
/// runs them (in training: every gradient accumulation of the backward, `zeros + grad`) on a
/// worker pool of its own beside rayon's, and on two cores the two pools take the cores from
/// each other: each pool's idle workers spin or yield a while before they sleep, while the
/// other pool's threads want the core, and every op hands its work between threads. With the
/// element-wise ops inline (`CANDLE_NUM_THREADS=1`: no pool workers; candle's products still
/// use every thread), the built-in model's config trains about 6 % faster, with 8-14 % less
/// CPU time a step and fewer slow steps (`bench train --config poetry --precision bf16`, 8 x
/// 128 and 32 x 128, 2 threads, AMD EPYC Zen 4; BENCHMARKS.md).
/// The vision commands run so at inference too: a ViT block scales and adds its two branches
/// through candle, and with the pool a DINOv3 ViT-S/16 forward at 224 x 224 spent 11 % of its
/// samples in candle's pool barrier; inline, its CPU seconds fell from 0.25-0.33 to 0.13 at
/// batch 1 and from 1.09 to 0.89 at batch 8 (`bench vision`, 2 threads, AMD EPYC Zen 4, a
/// loaded machine). Not for the other inference commands: they run few element-wise ops
/// through that pool, but candle's quantized products (`llama`) use it for every product. candle reads the variable
/// once, when it starts the pool; a value already set is kept.
fn inline_candle_elementwise() {
    // Called in `main` after parsing the arguments, before any other thread exists.
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command `roformer ARGS` parses to, or clap's message.
    fn command(args: &[&str]) -> Result<Command, String> {
        Cli::try_parse_from(std::iter::once("roformer").chain(args.iter().copied()))
            .map(|cli| cli.command)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn only_training_and_vision_commands_run_candles_element_wise_ops_inline() {
        let inline = |args: &[&str]| command(args).map(|c| c.inlines_elementwise());
        assert_eq!(inline(&["bench", "train"]), Ok(true));
        assert_eq!(inline(&["bench", "vision"]), Ok(true));
        assert_eq!(inline(&["vision", "classify", "x.png"]), Ok(true));
        let vision_train = [
            "vision", "train", "--data", "d", "--config", "c", "--out", "o",
        ];
        assert_eq!(inline(&vision_train), Ok(true));
        assert_eq!(command(&vision_train).map(|c| c.trains()), Ok(true));
        assert_eq!(inline(&["bench", "model"]), Ok(false));
        assert_eq!(inline(&["bench", "llama"]), Ok(false));
        assert_eq!(inline(&["fill-mask", "a[MASK]"]), Ok(false));
    }

    #[test]
    fn training_and_the_allocating_benchmarks_run_warm() {
        let warm = |args: &[&str]| command(args).map(|c| c.runs_warm());
        for args in [
            &["train", "mlm", "--resume", "--out", "run"][..],
            &["bench", "train"],
            &["bench", "model"],
            &["bench", "rope"],
            &["bench", "vision", "--part", "train"],
        ] {
            assert_eq!(warm(args), Ok(true), "{args:?}");
        }
        for args in [
            &["bench", "llama"][..],
            &["fill-mask", "a[MASK]"],
            &["serve"],
        ] {
            assert_eq!(warm(args), Ok(false), "{args:?}");
        }
    }
}
