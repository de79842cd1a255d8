//! The report: one record per implementation and case, as JSON or as table rows.

use std::io::{self, Write};

use rotary::Isa;
use serde_json::json;

use crate::json::finite;

use super::cases::Case;
use super::impls::Impl;
use crate::bench::timing::Stats;

/// One measured implementation of one case.
pub(super) struct Record {
    pub(super) case: Case,
    pub(super) which: Impl,
    pub(super) stats: Stats,
}

impl Record {
    fn gbps(&self) -> f64 {
        self.case.bytes() as f64 / self.stats.median / 1e9
    }

    /// The record as one JSON object.
    ///
    /// # Errors
    /// A non-finite timing (JSON would write it as null).
    pub(super) fn json(&self, context: &RunInfo) -> anyhow::Result<serde_json::Value> {
        Ok(json!({
            "impl": self.which.family(),
            "variant": self.which.variant(self.case.layout),
            "rotation": self.case.rotation.name(),
            "shape": self.case.dims,
            "dtype": self.case.dtype.name(),
            "layout": self.case.layout.name(),
            "seconds": finite("seconds", self.stats.median)?,
            "gbps": finite("gbps", self.gbps())?,
            "bytes": self.case.bytes(),
            "p10_seconds": finite("p10_seconds", self.stats.p10)?,
            "p90_seconds": finite("p90_seconds", self.stats.p90)?,
            "samples": self.stats.samples,
            "calls_per_sample": self.stats.calls_per_sample,
            "threads": context.threads,
            "isa": context.isa.name(),
            "malloc_warm": context.malloc_warm,
        }))
    }
}

/// Facts about the run: every record carries the threads, the ISA and the allocator setting;
/// the header also names the timing budget.
pub(super) struct RunInfo {
    pub(super) threads: usize,
    pub(super) isa: Isa,
    pub(super) malloc_warm: bool,
    /// Fewest timed rounds per case (`--min-rounds`).
    pub(super) min_rounds: usize,
    /// Seconds of timed rounds per case (`--seconds`).
    pub(super) seconds: f64,
}

/// Formats seconds with a unit that keeps three significant digits readable.
fn human_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.2}us", s * 1e6)
    } else {
        format!("{:.2}ms", s * 1e3)
    }
}

pub(super) fn print_header(out: &mut impl Write, context: &RunInfo) -> io::Result<()> {
    writeln!(
        out,
        "RoPE on q and k (head-major, same shape), {} thread(s), kernels: {}, warm allocator: {}",
        context.threads,
        context.isa.name(),
        if context.malloc_warm { "yes" } else { "no" },
    )?;
    writeln!(
        out,
        "median time per call / GB/s, bytes = 2*(q+k) + cos/sin table; {}+ rounds and {} s per case",
        context.min_rounds, context.seconds
    )?;
    writeln!(
        out,
        "{:<8} {:<16} {:<5} {:<11} {:>18} {:>18} {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "rotation",
        "shape",
        "dtype",
        "layout",
        "fused in-place",
        "out-of-place",
        "memcpy",
        "candle",
        "drop-in",
        "fus/mem",
        "fus/cnd",
        "oop/mem",
        "oop/cnd",
        "drp/cnd",
        "drp/oop"
    )
}

pub(super) fn print_row(out: &mut impl Write, records: &[Record]) -> io::Result<()> {
    let case = records[0].case;
    let find = |w: Impl| records.iter().find(|r| r.which == w);
    let cell = |w: Impl| {
        find(w).map_or_else(String::new, |r| {
            format!("{} {:>6.1}", human_time(r.stats.median), r.gbps())
        })
    };
    let ratio = |a: Impl, b: Impl| match (find(a), find(b)) {
        (Some(a), Some(b)) => format!("{:.2}", a.gbps() / b.gbps()),
        _ => String::new(),
    };
    let [b, h, t, d] = case.dims;
    writeln!(
        out,
        "{:<8} {:<16} {:<5} {:<11} {:>18} {:>18} {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        case.rotation.name(),
        format!("{b}x{h}x{t}x{d}"),
        case.dtype.name(),
        case.layout.name(),
        cell(Impl::Fused),
        cell(Impl::OutOfPlace),
        cell(Impl::Memcpy),
        cell(Impl::Candle),
        cell(Impl::DropIn),
        ratio(Impl::Fused, Impl::Memcpy),
        ratio(Impl::Fused, Impl::Candle),
        ratio(Impl::OutOfPlace, Impl::Memcpy),
        ratio(Impl::OutOfPlace, Impl::Candle),
        ratio(Impl::DropIn, Impl::Candle),
        ratio(Impl::DropIn, Impl::OutOfPlace),
    )
}
