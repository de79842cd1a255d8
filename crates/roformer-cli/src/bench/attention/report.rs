//! The report: records, crossover lengths and the text tables.

use std::io::Write;

use roformer::measure::Masking;
use serde::Serialize;

use super::args::Args;
use super::cases::{masking_name, Kind};
use super::measure::Measurement;

/// One output line per case.
#[derive(Debug, Serialize)]
pub(super) struct Record {
    pub(super) attention: &'static str,
    pub(super) masking: &'static str,
    pub(super) len: usize,
    pub(super) heads: usize,
    pub(super) head_dim: usize,
    /// `ok`, `skipped` or `failed`.
    pub(super) status: &'static str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(super) measurement: Option<Measurement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
}

/// The shortest lengths from which linear attention beats softmax for good.
#[derive(Debug, Serialize)]
pub(super) struct Crossover {
    pub(super) masking: &'static str,
    /// Shortest measured length from which linear is faster at every longer length measured
    /// for both (`None`: never, or no common length).
    pub(super) time_len: Option<usize>,
    /// The same for peak memory.
    pub(super) memory_len: Option<usize>,
    /// Shortest length measured for both: a crossover equal to it may lie below it.
    pub(super) shortest_common_len: Option<usize>,
}

/// Crossover lengths of one masking from its records.
pub(super) fn crossover(masking: Masking, records: &[Record]) -> Crossover {
    let name = masking_name(masking);
    let get = |kind: Kind, len: usize| {
        records
            .iter()
            .find(|r| r.masking == name && r.attention == kind.name() && r.len == len)
            .and_then(|r| r.measurement.as_ref())
    };
    let mut common: Vec<(usize, &Measurement, &Measurement)> = records
        .iter()
        .filter(|r| r.masking == name && r.attention == Kind::Softmax.name())
        .filter_map(|r| Some((r.len, get(Kind::Softmax, r.len)?, get(Kind::Linear, r.len)?)))
        .collect();
    common.sort_by_key(|c| c.0);
    let from = |wins: &dyn Fn(&Measurement, &Measurement) -> bool| {
        let mut best = None;
        for &(len, s, l) in common.iter().rev() {
            if !wins(s, l) {
                break;
            }
            best = Some(len);
        }
        best
    };
    Crossover {
        masking: name,
        time_len: from(&|s, l| l.median_s < s.median_s),
        memory_len: from(&|s, l| l.peak_bytes < s.peak_bytes),
        shortest_common_len: common.first().map(|c| c.0),
    }
}

fn human_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn human_bytes(b: u64) -> String {
    if b < 1 << 20 {
        format!("{:.0} KiB", b as f64 / 1024.0)
    } else if b < 1 << 30 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    }
}

/// Prints one table per masking and the crossovers.
pub(super) fn print_table(
    out: &mut impl Write,
    records: &[Record],
    crossovers: &[Crossover],
    args: &Args,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "one attention layer, [1, {}, N, {}] f32, RoPE included; median time per call; peak = \
         resident memory the call added (child process per case)",
        args.heads, args.head_dim
    )?;
    for c in crossovers {
        writeln!(out, "\n{}:", c.masking)?;
        writeln!(
            out,
            "{:>8}  {:>11}  {:>11}  {:>13}  {:>11}  {:>11}",
            "N", "softmax", "linear", "softmax/lin", "softmax pk", "linear pk"
        )?;
        for len in args.lengths() {
            let cell = |kind: Kind| {
                records
                    .iter()
                    .find(|r| r.masking == c.masking && r.attention == kind.name() && r.len == len)
            };
            let (s, l) = (cell(Kind::Softmax), cell(Kind::Linear));
            let time = |r: Option<&Record>| match r.and_then(|r| r.measurement.as_ref()) {
                Some(m) => human_time(m.median_s),
                None => r.map_or("-", |r| r.status).to_string(),
            };
            let peak = |r: Option<&Record>| {
                r.and_then(|r| r.measurement.as_ref())
                    .map_or("-".to_string(), |m| human_bytes(m.peak_bytes))
            };
            let ratio = match (
                s.and_then(|r| r.measurement.as_ref()),
                l.and_then(|r| r.measurement.as_ref()),
            ) {
                (Some(s), Some(l)) => format!("{:.2}x", s.median_s / l.median_s),
                _ => "-".into(),
            };
            writeln!(
                out,
                "{len:>8}  {:>11}  {:>11}  {ratio:>13}  {:>11}  {:>11}",
                time(s),
                time(l),
                peak(s),
                peak(l)
            )?;
        }
        let show = |n: Option<usize>| match (n, c.shortest_common_len) {
            (Some(n), Some(first)) if n == first => format!("N <= {n} (already at the shortest)"),
            (Some(n), _) => format!("N = {n}"),
            (None, _) => "not within the lengths measured".into(),
        };
        writeln!(
            out,
            "linear wins from: time {}, memory {}",
            show(c.time_len),
            show(c.memory_len)
        )?;
    }
    for r in records.iter().filter(|r| r.status != "ok") {
        if let Some(reason) = &r.reason {
            writeln!(
                out,
                "{} {} N={}: {}: {reason}",
                r.masking, r.attention, r.len, r.status
            )?;
        }
    }
    Ok(())
}
