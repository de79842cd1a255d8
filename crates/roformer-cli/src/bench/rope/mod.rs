//! `roformer bench rope`: the rotary kernels against memcpy (the physical limit) and candle-nn,
//! timed round-robin in one run.
//!
//! For every case (rotation x shape `[batch, heads, seq, head_dim]` x dtype x layout), q and k
//! have the same head-major shape and each implementation rotates both:
//! - `rotary` / `fused_inplace`: [`Rope::apply_qk_inplace`] (one call, q and k in place);
//! - `rotary` / `out_of_place`: [`Rope::apply`] on q and on k into preallocated outputs;
//! - `memcpy` / `copy`: q and k copied into preallocated buffers (on the same threads);
//! - `candle` / `rope` or `rope_i`: candle-nn's `rope` (half layout) or `rope_i`
//!   (interleaved) on the same data, cos/sin `[seq, head_dim / 2]` built once, called from the
//!   main thread;
//! - `rotary` / `candle_rope` or `candle_rope_i`: our drop-in for those two,
//!   `rotary::candle::rope` or `rope_i`, on candle's very tensors: what a candle model gets by
//!   switching its `use` line (the kernels, plus widening candle's cos/sin into our table on
//!   every call and candle's op and allocation overheads). Against `out_of_place` it prices
//!   taking cos/sin tensors instead of our cached table.
//!
//! Rotations other than 1D RoPE (axial 2D over a patch grid, YaRN) run through the same kernels
//! on tables made from their angles; each default one shares its shape with a 1D case, so the
//! GB/s compare directly, and candle-nn is handed the same cos/sin.
//!
//! Every implementation is credited with the same bytes, q and k read and written plus the
//! cos/sin table read, `2 * (bytes(q) + bytes(k)) + seq * head_dim * elem_size`, the formula of
//! the peer benchmarks in `shared/peers`, so GB/s compare across implementations and with them.
//! Reported times are medians per call. The command runs with glibc's mmap and trim
//! thresholds raised (`main` replaces the process with a copy that has them, [`crate::alloc`]),
//! so freed buffers are reused instead of being page-faulted in again on every call.
//!
//! [`Rope::apply_qk_inplace`]: rotary::Rope::apply_qk_inplace
//! [`Rope::apply`]: rotary::Rope::apply

mod cases;
mod impls;
mod measure;
mod report;

use std::io::{self, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rotary::{DType, Isa, Layout};

use super::timing::Budget;
use crate::alloc;
use cases::{cases, Rotation};
use measure::run_any;
use report::{print_header, print_row, RunInfo};

use crate::output::OutputArgs;

/// Arguments of `roformer bench rope`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per line: impl, variant, rotation, shape, dtype, layout, seconds \
     (median per call), gbps, bytes, p10/p90 seconds, samples, threads, isa"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// Shapes as BATCHxHEADSxSEQxHEAD_DIM, comma-separated [default: the four shapes]
    #[arg(long, value_delimiter = ',', value_parser = parse_shape)]
    shapes: Vec<[usize; 4]>,
    /// Rotations (rope1d, axial2d, yarn), comma-separated [default: rope1d on --shapes; without
    /// --shapes, rope1d on the default shapes plus the axial2d and yarn cases]
    #[arg(long, value_delimiter = ',', value_parser = parse_rotation)]
    rotations: Vec<Rotation>,
    /// Storage types (f32, f16, bf16), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16", value_parser = parse_dtype)]
    dtypes: Vec<DType>,
    /// Pair layouts (interleaved, half), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "interleaved,half", value_parser = parse_layout)]
    layouts: Vec<Layout>,
    /// Seconds of timed rounds per case, all implementations together, once the minimum rounds
    /// are done.
    #[arg(long, default_value_t = 0.6)]
    seconds: f64,
    /// Fewest timed rounds per case.
    #[arg(long, default_value_t = 5)]
    min_rounds: usize,
    /// Small shapes and a short budget: a smoke test of a few seconds.
    #[arg(long)]
    quick: bool,
    /// Worker threads for every implementation [default: one per core]
    #[arg(long)]
    threads: Option<usize>,
}

fn parse_shape(s: &str) -> Result<[usize; 4], String> {
    let dims: Vec<usize> = s
        .split('x')
        .map(|d| d.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?}: {e}"))?;
    match dims[..] {
        [b, h, t, d] if b * h * t * d > 0 && d % 2 == 0 => Ok([b, h, t, d]),
        _ => Err(format!(
            "{s:?}: expected BATCHxHEADSxSEQxHEAD_DIM, all non-zero, HEAD_DIM even"
        )),
    }
}

fn parse_rotation(s: &str) -> Result<Rotation, String> {
    Rotation::ALL
        .into_iter()
        .find(|r| r.name() == s)
        .ok_or_else(|| format!("{s:?}: expected rope1d, axial2d or yarn"))
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .find(|d| d.name() == s)
        .ok_or_else(|| format!("{s:?}: expected f32, f16 or bf16"))
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    [Layout::Interleaved, Layout::Half]
        .into_iter()
        .find(|l| l.name() == s)
        .ok_or_else(|| format!("{s:?}: expected interleaved or half"))
}

/// Runs the benchmark.
///
/// # Errors
/// Bad options, a failing implementation, or our result disagreeing with candle's.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("sizing the thread pool")?;
    }
    let context = RunInfo {
        threads: rayon::current_num_threads(),
        isa: Isa::detect(),
        malloc_warm: alloc::is_warm(),
        min_rounds: args.min_rounds,
        seconds: args.seconds,
    };
    let budget = Budget {
        // One untimed call each: the agreement check has already run the out-of-place and
        // candle calls once, so every buffer and candle's allocations are warm after it.
        warmup: 1,
        min_rounds: args.min_rounds.max(1),
        max_rounds: 100_000,
        seconds: if args.quick {
            args.seconds.min(0.05)
        } else {
            args.seconds
        },
        sample: Duration::from_micros(200),
    };
    let mut out = io::stdout().lock();
    let written = (|| -> Result<()> {
        if !args.stdout.json {
            print_header(&mut out, &context)?;
        }
        for case in cases(
            &args.shapes,
            &args.rotations,
            args.quick,
            &args.dtypes,
            &args.layouts,
        ) {
            let records = run_any(case, &budget)?;
            if args.stdout.json {
                for r in &records {
                    writeln!(out, "{}", r.json(&context)?)?;
                }
            } else {
                print_row(&mut out, &records)?;
            }
            out.flush()?;
        }
        Ok(())
    })();
    match written {
        // A reader that stops early (`| head`) is not a failure of the benchmark.
        Err(e)
            if e.downcast_ref::<io::Error>().map(io::Error::kind)
                == Some(io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}
