//! `roformer bench attention`: one attention layer, softmax against linear (eq. 19), by
//! sequence length.
//!
//! A layer here is everything between the q/k/v projections and the output projection, for
//! one batch of `heads` heads of `head_dim`, inputs `[1, heads, N, head_dim]`:
//! - softmax: `R q`, `R k` through the rotary kernels, then the model's
//!   [`softmax_attention`]: `softmax(R q (R k)^T / sqrt(d) + mask) v`, with an additive padding
//!   mask `[1, 1, 1, N]` (bidirectional) or a causal mask `[N, N]` built in the call;
//! - linear: [`LinearAttention::forward`] (rotation of `phi(q)`, `phi(k)` included), bidirectional
//!   through the `d x d` summary or causal through chunked prefix sums.
//!
//! Every case runs in a fresh child process (this binary, re-executed with a hidden `--case`),
//! with glibc's mmap and trim thresholds raised as for the other benchmarks
//! ([`crate::alloc::WARM_ENV`]) so that timed calls reuse freed memory. Peak memory is read from
//! Linux's `/proc/self/status`: the child builds its inputs, resets the high-water mark
//! (`/proc/self/clear_refs`), runs the layer once and reports `VmHWM - VmRSS(before)`: the
//! resident memory the call added at its peak (inputs excluded, output included). Time is the
//! median over rounds after that call. Softmax lengths whose `N x N` score matrix alone would
//! exceed `--memory-budget-mib` are skipped and reported as skipped.
//!
//! [`softmax_attention`]: roformer::measure::softmax_attention

mod args;
mod cases;
mod figure;
mod measure;
mod report;
#[cfg(test)]
mod tests;

use std::io::Write;

use anyhow::{ensure, Context};
use roformer::measure::LinearAttention;

use crate::plot;
pub use args::Args;
use cases::{masking_name, Case, Kind};
use figure::BenchFigure;
use measure::{measure, run_child};
use report::{crossover, print_table, Crossover, Record};

/// Runs `roformer bench attention`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(spec) = &args.case {
        return run_child(spec, &args);
    }
    check(&args)?;
    let mut out = std::io::stdout().lock();
    let records = measure_all(&args, &mut out)?;
    let crossovers: Vec<Crossover> = args
        .masking
        .list()
        .into_iter()
        .map(|m| crossover(m, &records))
        .collect();
    if args.stdout.json {
        for c in &crossovers {
            // Lengths only: no float that `json!` could turn into null.
            writeln!(out, "{}", serde_json::json!({ "crossover": c }))?;
        }
    } else {
        print_table(&mut out, &records, &crossovers, &args)?;
    }
    if let Some(path) = &args.out {
        let figure = BenchFigure {
            records: &records,
            crossovers: &crossovers,
            heads: args.heads,
            head_dim: args.head_dim,
        };
        plot::save(&figure, path, (1200, 520))?;
        if !args.stdout.json {
            writeln!(out, "plot written to {}", path.display())?;
        }
    }
    Ok(())
}

/// The checks of the arguments, before anything is measured.
///
/// # Errors
/// A length, head count, time, chunk, head dim or plot file that cannot be used.
fn check(args: &Args) -> anyhow::Result<()> {
    ensure!(args.min_len >= 1, "--min-len must be at least 1");
    ensure!(args.min_len <= args.max_len, "--min-len exceeds --max-len");
    ensure!(args.heads >= 1, "--heads must be at least 1");
    ensure!(
        args.seconds.is_finite() && args.seconds >= 0.0,
        "--seconds must be a finite number of seconds, at least 0"
    );
    LinearAttention::new(args.chunk)?;
    rotary::inv_freqs(args.head_dim, rotary::DEFAULT_BASE).context("--head-dim")?;
    if let Some(path) = &args.out {
        plot::Format::from_path(path)?;
    }
    Ok(())
}

/// Measures every case (masking, length, layer), printing each record as a JSON line with
/// `--json` as it comes.
///
/// # Errors
/// A case that could not be run at all, and stdout errors.
fn measure_all(args: &Args, out: &mut impl Write) -> anyhow::Result<Vec<Record>> {
    let mut records = Vec::new();
    for masking in args.masking.list() {
        for len in args.lengths() {
            for kind in Kind::ALL {
                let record = measure_case(Case { kind, masking, len }, args)?;
                if args.stdout.json {
                    writeln!(out, "{}", crate::json::to_string(&record)?)?;
                    out.flush()?;
                }
                records.push(record);
            }
        }
    }
    Ok(records)
}

/// The record of one case: measured, failed (with the reason), or skipped when softmax's
/// score matrix would pass `--memory-budget-mib`.
///
/// # Errors
/// A case that could not be run at all.
fn measure_case(case: Case, args: &Args) -> anyhow::Result<Record> {
    let Case { kind, masking, len } = case;
    let mut record = Record {
        attention: kind.name(),
        masking: masking_name(masking),
        len,
        heads: args.heads,
        head_dim: args.head_dim,
        status: "ok",
        measurement: None,
        reason: None,
    };
    let budget_bytes = args.memory_budget_mib.saturating_mul(1 << 20);
    let scores = (args.heads as u64)
        .saturating_mul(len as u64)
        .saturating_mul(len as u64)
        .saturating_mul(4);
    if kind == Kind::Softmax && scores > budget_bytes {
        record.status = "skipped";
        record.reason = Some(format!(
            "the {len} x {len} score matrix needs {} MiB, over the {} MiB budget \
             (--memory-budget-mib)",
            scores >> 20,
            args.memory_budget_mib
        ));
        return Ok(record);
    }
    match measure(case, args)? {
        Ok(m) => record.measurement = Some(m),
        Err(reason) => {
            record.status = "failed";
            record.reason = Some(reason);
        }
    }
    Ok(record)
}
