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
//! ([`super::alloc::WARM_ENV`]) so that timed calls reuse freed memory. Peak memory is read from
//! Linux's `/proc/self/status`: the child builds its inputs, resets the high-water mark
//! (`/proc/self/clear_refs`), runs the layer once and reports `VmHWM - VmRSS(before)`: the
//! resident memory the call added at its peak (inputs excluded, output included). Time is the
//! median over rounds after that call. Softmax lengths whose `N x N` score matrix alone would
//! exceed `--memory-budget-mib` are skipped and reported as skipped.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use candle_core::{DType, Device, Tensor};
use plotters::coord::Shift;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use roformer::attention::softmax_attention;
use roformer::linear_attention::{LinearAttention, Masking, DEFAULT_CHUNK};
use rotary::{rotate_tensor, Coefficients, Direction, Layout, Order, Positions, Rope};
use serde::{Deserialize, Serialize};

use super::alloc::WARM_ENV;
use super::timing::{round_robin, Budget};
use crate::plot::{self, err, Figure, FAMILY};

/// Arguments of `roformer bench attention`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One JSON object per line: a record per case (or skipped case), then the crossover
    /// lengths per masking.
    #[arg(long)]
    json: bool,
    /// Write a plot of time and peak memory against length to this file (.png or .svg).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Shortest sequence length; lengths double from here.
    #[arg(long, default_value_t = 64)]
    min_len: usize,
    /// Longest sequence length.
    #[arg(long, default_value_t = 65536)]
    max_len: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 1)]
    heads: usize,
    /// Dimensions per head (even).
    #[arg(long, default_value_t = 64)]
    head_dim: usize,
    /// Which attention masks to measure.
    #[arg(long, value_enum, default_value_t = MaskingArg::Both)]
    masking: MaskingArg,
    /// Skip softmax lengths whose N x N f32 score matrix (all heads) exceeds this many MiB.
    #[arg(long, default_value_t = 512)]
    memory_budget_mib: u64,
    /// Seconds of timed rounds per case (at least 3 rounds run).
    #[arg(long, default_value_t = 0.3)]
    seconds: f64,
    /// Tokens per chunk of the causal linear attention.
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    chunk: usize,
    /// Internal: run one case in this process (`KIND:MASKING:LEN`) and print its measurement.
    #[arg(long, hide = true)]
    case: Option<String>,
}

/// The masking choice of the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MaskingArg {
    /// Every key visible.
    Bidirectional,
    /// Keys up to the query.
    Causal,
    /// Both, one after the other.
    Both,
}

impl MaskingArg {
    fn list(self) -> Vec<Masking> {
        match self {
            MaskingArg::Bidirectional => vec![Masking::Bidirectional],
            MaskingArg::Causal => vec![Masking::Causal],
            MaskingArg::Both => vec![Masking::Bidirectional, Masking::Causal],
        }
    }
}

fn masking_name(m: Masking) -> &'static str {
    match m {
        Masking::Bidirectional => "bidirectional",
        Masking::Causal => "causal",
    }
}

/// The two attention layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Softmax,
    Linear,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Softmax, Kind::Linear];

    fn name(self) -> &'static str {
        match self {
            Kind::Softmax => "softmax",
            Kind::Linear => "linear",
        }
    }
}

/// One case: a layer, a masking and a length.
#[derive(Debug, Clone, Copy)]
struct Case {
    kind: Kind,
    masking: Masking,
    len: usize,
}

impl Case {
    fn spec(&self) -> String {
        format!(
            "{}:{}:{}",
            self.kind.name(),
            masking_name(self.masking),
            self.len
        )
    }

    fn parse(spec: &str) -> anyhow::Result<Case> {
        let parts: Vec<&str> = spec.split(':').collect();
        let [kind, masking, len] = parts[..] else {
            bail!("--case takes KIND:MASKING:LEN, got {spec:?}");
        };
        let kind = match kind {
            "softmax" => Kind::Softmax,
            "linear" => Kind::Linear,
            _ => bail!("unknown attention kind {kind:?}"),
        };
        let masking = match masking {
            "bidirectional" => Masking::Bidirectional,
            "causal" => Masking::Causal,
            _ => bail!("unknown masking {masking:?}"),
        };
        Ok(Case {
            kind,
            masking,
            len: len.parse().context("--case length")?,
        })
    }
}

/// What a child process measures for one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measurement {
    /// Median seconds per call.
    median_s: f64,
    /// 10th and 90th percentiles of seconds per call.
    p10_s: f64,
    p90_s: f64,
    /// Timed samples.
    samples: usize,
    /// Resident bytes the first call added at its peak (`VmHWM - VmRSS` before the call).
    peak_bytes: u64,
}

/// One output line per case.
#[derive(Debug, Serialize)]
struct Record {
    attention: &'static str,
    masking: &'static str,
    len: usize,
    heads: usize,
    head_dim: usize,
    /// `ok`, `skipped` or `failed`.
    status: &'static str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    measurement: Option<Measurement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The shortest lengths from which linear attention beats softmax for good.
#[derive(Debug, Serialize)]
struct Crossover {
    masking: &'static str,
    /// Shortest measured length from which linear is faster at every longer length measured
    /// for both (`None`: never, or no common length).
    time_len: Option<usize>,
    /// The same for peak memory.
    memory_len: Option<usize>,
    /// Shortest length measured for both: a crossover equal to it may lie below it.
    shortest_common_len: Option<usize>,
}

/// Resident-set figures of this process from `/proc/self/status`, in bytes.
fn proc_status(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("peak memory is read from /proc/self/status (Linux only)")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kib: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("parsing {line:?}"))?;
    Ok(kib * 1024)
}

/// Resets the peak resident-set size (`VmHWM`) to the current one.
fn reset_peak() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .context("resetting VmHWM via /proc/self/clear_refs")
}

/// A `[1, heads, len, head_dim]` tensor of N(0, 1/4) values, made straight from a vector so
/// that no freed temporaries are left in the heap for the measured call to reuse.
fn input(rng: &mut StdRng, heads: usize, len: usize, head_dim: usize) -> anyhow::Result<Tensor> {
    let values: Vec<f32> = (0..heads * len * head_dim)
        .map(|_| 0.5 * rng.sample::<f32, _>(StandardNormal))
        .collect();
    Ok(Tensor::from_vec(
        values,
        (1, heads, len, head_dim),
        &Device::Cpu,
    )?)
}

/// The layer under test, ready to call on fixed inputs.
struct Layer {
    case: Case,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    coefficients: Coefficients,
    linear: LinearAttention,
}

impl Layer {
    fn new(case: Case, args: &Args, rope: &Rope) -> anyhow::Result<Layer> {
        let mut rng = StdRng::seed_from_u64(case.len as u64);
        let (h, d) = (args.heads, args.head_dim);
        Ok(Layer {
            case,
            q: input(&mut rng, h, case.len, d)?,
            k: input(&mut rng, h, case.len, d)?,
            v: input(&mut rng, h, case.len, d)?,
            coefficients: rope.coefficients(Positions::START, 1, case.len)?,
            linear: LinearAttention::new(args.chunk)?,
        })
    }

    fn call(&self) -> candle_core::Result<Tensor> {
        let (q, k, v, c) = (&self.q, &self.k, &self.v, &self.coefficients);
        match self.case.kind {
            Kind::Linear => self.linear.forward(q, k, v, c, None, self.case.masking),
            Kind::Softmax => {
                let rotate = |x| rotate_tensor(x, c.clone(), Order::HeadMajor, Direction::Forward);
                let t = self.case.len;
                let mask = match self.case.masking {
                    Masking::Bidirectional => Tensor::zeros((1, 1, 1, t), DType::F32, q.device())?,
                    // 0 on and below the diagonal, the lowest f32 above (as the model's mask).
                    Masking::Causal => (Tensor::tril2(t, DType::F32, q.device())? - 1.0)?
                        .affine(f64::from(f32::MAX), 0.0)?,
                };
                softmax_attention(&rotate(q)?, &rotate(k)?, v, Some(&mask))
            }
        }
    }
}

/// The child's side: measures one case and prints it as one JSON line.
fn run_child(spec: &str, args: &Args) -> anyhow::Result<()> {
    let case = Case::parse(spec)?;
    let rope = Rope::new(
        args.head_dim,
        args.head_dim,
        rotary::DEFAULT_BASE,
        Layout::Interleaved,
    )?;
    // Start thread pools and caches on a small problem, outside the measurement.
    let small = Case {
        len: case.len.min(64),
        ..case
    };
    Layer::new(small, args, &rope)?.call()?;
    let layer = Layer::new(case, args, &rope)?;
    let before = proc_status("VmRSS:")?;
    reset_peak()?;
    drop(layer.call()?);
    let peak = proc_status("VmHWM:")?.saturating_sub(before);
    let budget = Budget {
        warmup: 1,
        min_rounds: 3,
        max_rounds: 1000,
        seconds: args.seconds,
        sample: Duration::from_millis(10),
    };
    let stats = round_robin(1, &budget, |_| layer.call().map(drop))?;
    let m = Measurement {
        median_s: stats[0].median,
        p10_s: stats[0].p10,
        p90_s: stats[0].p90,
        samples: stats[0].samples,
        peak_bytes: peak,
    };
    println!("{}", serde_json::to_string(&m)?);
    Ok(())
}

/// Runs one case in a child process.
fn measure(case: Case, args: &Args) -> anyhow::Result<Result<Measurement, String>> {
    let exe = std::env::current_exe().context("locating the roformer executable")?;
    let output = Command::new(&exe)
        .args(["bench", "attention", "--case", &case.spec()])
        .args(["--heads", &args.heads.to_string()])
        .args(["--head-dim", &args.head_dim.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--chunk", &args.chunk.to_string()])
        .envs(WARM_ENV)
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
        return Ok(Err(format!("child exited with {}: {tail}", output.status)));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    Ok(Ok(serde_json::from_str(line.trim()).with_context(
        || format!("parsing the child's measurement {line:?}"),
    )?))
}

/// The lengths measured: doubling from `min_len` up to `max_len`.
fn lengths(args: &Args) -> Vec<usize> {
    std::iter::successors(Some(args.min_len), |&n| n.checked_mul(2))
        .take_while(|&n| n <= args.max_len)
        .collect()
}

/// Crossover lengths of one masking from its records.
fn crossover(masking: Masking, records: &[Record]) -> Crossover {
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

/// Runs `roformer bench attention`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(spec) = &args.case {
        return run_child(spec, &args);
    }
    ensure!(args.min_len >= 1, "--min-len must be at least 1");
    ensure!(args.min_len <= args.max_len, "--min-len exceeds --max-len");
    ensure!(args.heads >= 1, "--heads must be at least 1");
    ensure!(args.seconds >= 0.0, "--seconds must not be negative");
    LinearAttention::new(args.chunk)?;
    rotary::inv_freqs(args.head_dim, rotary::DEFAULT_BASE).context("--head-dim")?;
    if let Some(path) = &args.out {
        plot::Format::from_path(path)?;
    }
    let budget_bytes = args.memory_budget_mib.saturating_mul(1 << 20);
    let mut records = Vec::new();
    let mut out = std::io::stdout().lock();
    for masking in args.masking.list() {
        for len in lengths(&args) {
            for kind in Kind::ALL {
                let case = Case { kind, masking, len };
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
                } else {
                    match measure(case, &args)? {
                        Ok(m) => record.measurement = Some(m),
                        Err(reason) => {
                            record.status = "failed";
                            record.reason = Some(reason);
                        }
                    }
                }
                if args.json {
                    writeln!(out, "{}", serde_json::to_string(&record)?)?;
                    out.flush()?;
                }
                records.push(record);
            }
        }
    }
    let crossovers: Vec<Crossover> = args
        .masking
        .list()
        .into_iter()
        .map(|m| crossover(m, &records))
        .collect();
    if args.json {
        for c in &crossovers {
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
        if !args.json {
            writeln!(out, "plot written to {}", path.display())?;
        }
    }
    Ok(())
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
fn print_table(
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
        for len in lengths(args) {
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

/// Time and peak memory against length, log-log, one line per layer and masking.
struct BenchFigure<'a> {
    records: &'a [Record],
    crossovers: &'a [Crossover],
    heads: usize,
    head_dim: usize,
}

impl BenchFigure<'_> {
    fn series(
        &self,
        kind: Kind,
        masking: &str,
        value: impl Fn(&Measurement) -> f64,
    ) -> Vec<(f64, f64)> {
        self.records
            .iter()
            .filter(|r| r.attention == kind.name() && r.masking == masking)
            .filter_map(|r| Some((r.len as f64, value(r.measurement.as_ref()?))))
            .collect()
    }

    fn panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        y_desc: &str,
        value: &dyn Fn(&Measurement) -> f64,
    ) -> anyhow::Result<()> {
        let mut all: Vec<(f64, f64)> = Vec::new();
        let mut lines = Vec::new();
        for (i, c) in self.crossovers.iter().enumerate() {
            for kind in Kind::ALL {
                let points = self.series(kind, c.masking, value);
                all.extend(&points);
                let color = match (kind, i) {
                    (Kind::Softmax, 0) => RGBColor(31, 119, 180),
                    (Kind::Softmax, _) => RGBColor(23, 190, 207),
                    (Kind::Linear, 0) => RGBColor(214, 39, 40),
                    (Kind::Linear, _) => RGBColor(255, 127, 14),
                };
                lines.push((format!("{} ({})", kind.name(), c.masking), points, color));
            }
        }
        // x is log2(N), so lengths that double are evenly spaced and labelled by N itself.
        let log_n = |x: f64| x.log2();
        let xs = all.iter().map(|p| log_n(p.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        let (x0, x1) = if x0.is_finite() {
            (x0 - 0.3, x1 + 0.3)
        } else {
            (0.0, 1.0)
        };
        let positive = all.iter().map(|p| p.1).filter(|&y| y > 0.0);
        let (y0, y1) = positive.fold((f64::INFINITY, 0.0f64), |(lo, hi), y| {
            (lo.min(y), hi.max(y))
        });
        let (y0, y1) = if y0.is_finite() {
            (y0 / 1.5, y1 * 1.5)
        } else {
            (1.0, 10.0)
        };
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FAMILY, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("sequence length N (log scale)")
            .y_desc(y_desc)
            .x_labels(((x1 - x0).ceil() as usize + 1).max(2))
            .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 15))
            .draw()
            .map_err(err)?;
        for (label, points, color) in lines {
            if points.is_empty() {
                continue;
            }
            let points: Vec<(f64, f64)> = points.into_iter().map(|(n, y)| (log_n(n), y)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

impl Figure for BenchFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
        let shape = format!("[1, {}, N, {}]", self.heads, self.head_dim);
        self.panel(
            &left,
            &format!("time per call, {shape}"),
            "seconds (median)",
            &|m| m.median_s,
        )?;
        self.panel(
            &right,
            &format!("peak memory added by one call, {shape}"),
            "bytes",
            &|m| (m.peak_bytes as f64).max(4096.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: Kind, len: usize, seconds: f64, bytes: u64) -> Record {
        Record {
            attention: kind.name(),
            masking: "causal",
            len,
            heads: 1,
            head_dim: 8,
            status: "ok",
            measurement: Some(Measurement {
                median_s: seconds,
                p10_s: seconds,
                p90_s: seconds,
                samples: 3,
                peak_bytes: bytes,
            }),
            reason: None,
        }
    }

    #[test]
    fn crossover_is_where_linear_wins_for_good() {
        // Linear is faster at 256 (a fluke), slower at 512, faster from 1024 on; memory wins
        // everywhere.
        let mut records = Vec::new();
        for (len, s, l) in [
            (256, 2.0, 1.0),
            (512, 2.0, 3.0),
            (1024, 5.0, 4.0),
            (2048, 9.0, 5.0),
        ] {
            records.push(record(Kind::Softmax, len, s, 100 * len as u64));
            records.push(record(Kind::Linear, len, l, len as u64));
        }
        let c = crossover(Masking::Causal, &records);
        assert_eq!(c.time_len, Some(1024));
        assert_eq!(c.memory_len, Some(256));
        assert_eq!(c.shortest_common_len, Some(256));
        assert!(crossover(Masking::Bidirectional, &records)
            .time_len
            .is_none());
    }

    #[test]
    fn case_specs_round_trip() {
        let case = Case {
            kind: Kind::Linear,
            masking: Masking::Causal,
            len: 4096,
        };
        let back = Case::parse(&case.spec()).unwrap();
        assert_eq!(
            (back.kind, back.masking, back.len),
            (case.kind, case.masking, case.len)
        );
        assert!(Case::parse("linear:causal").is_err());
        assert!(Case::parse("dense:causal:4").is_err());
    }
}
