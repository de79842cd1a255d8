//! `roformer analyze decay`: the paper's long-term decay bound (its Figure 2), optionally with
//! measured scores for random vectors on the same chart.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use rotary::analysis::decay::{relative_bounds, scores_by_distance};
use rotary::{inv_freqs, Layout, Rope};
use serde::Serialize;

use super::limits::{at_most, MAX_DISTANCE, MAX_SAMPLES, MAX_TABLE_ELEMENTS, MAX_WORK};
use crate::output::outln;
use crate::output::OutputArgs;
use crate::plot::{self, err, Figure, FAMILY};

/// Arguments of `roformer analyze decay`.
///
/// Limits (see `analyze::limits`): d at most 65536, r at most 2^20, d/2 x (r + 1) at most
/// 2^30; with --measured, samples at most 2^16, (r + 1) x d at most 2^26 and
/// samples x (r + 1) x d at most 2^30.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "Print JSON (a list of {\"distance\", \"bound\"[, \"measured\"]}) instead of a table"
)))]
pub struct Args {
    /// Rotated dimensions d (even, at most 65536).
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Frequency base: theta_i = base^(-2i/d).
    #[arg(long, default_value_t = rotary::DEFAULT_BASE)]
    base: f64,
    /// Largest relative distance r (at most 2^20; d/2 x (r + 1) at most 2^30).
    #[arg(long, default_value_t = 256)]
    max_distance: usize,
    /// Write the plot to this file (.png or .svg).
    #[arg(long)]
    out: Option<PathBuf>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// Also measure mean |<R_m q, R_n k>| over random Gaussian vectors, rotated by the kernels.
    #[arg(long)]
    measured: bool,
    /// Number of random (q, k) pairs for --measured (at most 2^16; samples x (r + 1) x d at
    /// most 2^30).
    #[arg(long, default_value_t = 256)]
    samples: usize,
    /// How k relates to q for --measured. `same` (k = q) is the case the decay describes;
    /// with `independent` vectors E<q, R_r k> = 0 at every r and the mean |.| stays flat.
    #[arg(long, value_enum, default_value_t = Pairing::Same)]
    qk: Pairing,
    /// Seed of the random vectors.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// How the random key relates to the random query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Pairing {
    /// k = q.
    Same,
    /// k drawn independently of q.
    Independent,
}

impl Pairing {
    fn describe(self) -> &'static str {
        match self {
            Pairing::Same => "k = q",
            Pairing::Independent => "q, k independent",
        }
    }
}

/// One row of the output.
#[derive(Debug, Serialize)]
struct Row {
    distance: usize,
    bound: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured: Option<f64>,
}

/// Mean over `samples` random pairs of `|<R_m q, R_{m+r} k>|` for `r = 0..=max_distance`, with
/// q, k ~ N(0, I_d) and m drawn from `0..1024` per pair (the scores depend on r only; varying m
/// checks that through the kernels).
fn measure(args: &Args, rope: &Rope) -> anyhow::Result<Vec<f64>> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut total = vec![0f64; args.max_distance + 1];
    let gaussian = |rng: &mut StdRng| -> Vec<f32> {
        (0..args.dim).map(|_| rng.sample(StandardNormal)).collect()
    };
    for _ in 0..args.samples {
        let q = gaussian(&mut rng);
        let k = match args.qk {
            Pairing::Same => q.clone(),
            Pairing::Independent => gaussian(&mut rng),
        };
        let m = rng.random_range(0..1024);
        let scores = scores_by_distance(rope, &q, &k, m, args.max_distance)?;
        for (t, s) in total.iter_mut().zip(scores) {
            *t += s.abs();
        }
    }
    Ok(total.iter().map(|t| t / args.samples as f64).collect())
}

/// The figure: the bound on the left axis, the measured mean (if any) on the right one.
struct DecayFigure<'a> {
    rows: &'a [Row],
    dim: usize,
    base: f64,
    pairing: Pairing,
}

impl Figure for DecayFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let max_r = self.rows.len().saturating_sub(1).max(1) as f64;
        let top = self.rows.iter().map(|r| r.bound).fold(0.0, f64::max) * 1.05;
        let measured: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter_map(|r| r.measured.map(|m| (r.distance as f64, m)))
            .collect();
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(
                format!(
                    "Long-term decay of RoPE (d = {}, base = {})",
                    self.dim, self.base
                ),
                (FAMILY, 22),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60);
        if measured.is_empty() {
            let mut chart = builder
                .build_cartesian_2d(0.0..max_r, 0.0..top.max(1e-9))
                .map_err(err)?;
            self.draw_bound(&mut chart)?;
            return draw_legend(&mut chart, SeriesLabelPosition::UpperRight);
        }
        let high = measured.iter().map(|p| p.1).fold(0.0, f64::max) * 1.05;
        // The secondary axis must exist before the mesh is drawn, or the primary labels are
        // repeated on the right.
        let mut chart = builder
            .right_y_label_area_size(80)
            .build_cartesian_2d(0.0..max_r, 0.0..top.max(1e-9))
            .map_err(err)?
            .set_secondary_coord(0.0..max_r, 0.0..high.max(1e-9));
        self.draw_bound(&mut chart)?;
        chart
            .configure_secondary_axes()
            .y_desc(format!(
                "mean |⟨R_m q, R_n k⟩| ({})",
                self.pairing.describe()
            ))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(err)?;
        chart
            .draw_secondary_series(LineSeries::new(measured, RED.stroke_width(1)))
            .map_err(err)?
            .label("measured mean (right axis)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
        // Both curves decay for k = q, leaving the upper right free; for independent vectors
        // the measured curve runs flat along the top, and the middle right is free.
        let position = match self.pairing {
            Pairing::Same => SeriesLabelPosition::UpperRight,
            Pairing::Independent => SeriesLabelPosition::MiddleRight,
        };
        draw_legend(&mut chart, position)
    }
}

impl DecayFigure<'_> {
    /// Draws the mesh, the axis labels and the bound curve on the primary axes.
    fn draw_bound<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    ) -> anyhow::Result<()> {
        chart
            .configure_mesh()
            .x_desc("relative distance")
            .y_desc("relative upper bound")
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(err)?;
        let bound = self.rows.iter().map(|r| (r.distance as f64, r.bound));
        chart
            .draw_series(LineSeries::new(bound, BLUE.stroke_width(2)))
            .map_err(err)?
            .label("relative upper bound (1/(d/2)) Σ_j |S_j|")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        Ok(())
    }
}

/// Draws the series legend at `position`.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Checks the sizes the options imply against [`super::limits`], before any work (`--dim`
/// itself is checked when its frequencies are made).
fn check_limits(args: &Args) -> anyhow::Result<()> {
    let r = args.max_distance as u128;
    at_most("--max-distance", r, MAX_DISTANCE as u128)?;
    let (d, distances) = (args.dim as u128, r + 1);
    at_most(
        "--dim / 2 x (--max-distance + 1)",
        d / 2 * distances,
        MAX_WORK,
    )?;
    if args.measured {
        ensure!(args.samples > 0, "--samples must be at least 1");
        at_most("--samples", args.samples as u128, MAX_SAMPLES as u128)?;
        let table = distances * d;
        at_most("(--max-distance + 1) x --dim", table, MAX_TABLE_ELEMENTS)?;
        let work = args.samples as u128 * table;
        at_most("--samples x (--max-distance + 1) x --dim", work, MAX_WORK)?;
    }
    Ok(())
}

/// Runs `roformer analyze decay`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.out {
        plot::Format::from_path(path)?;
    }
    let inv_freq =
        inv_freqs(args.dim, args.base).context("the frequency schedule (--dim, --base)")?;
    check_limits(&args)?;
    let bounds = relative_bounds(&inv_freq, args.max_distance)?;
    let measured = if args.measured {
        let rope = Rope::new(args.dim, args.dim, args.base, Layout::Interleaved)?;
        Some(measure(&args, &rope)?)
    } else {
        None
    };
    let rows: Vec<Row> = bounds
        .iter()
        .enumerate()
        .map(|(distance, &bound)| Row {
            distance,
            bound,
            measured: measured.as_ref().map(|m| m[distance]),
        })
        .collect();
    if let Some(path) = &args.out {
        let figure = DecayFigure {
            rows: &rows,
            dim: args.dim,
            base: args.base,
            pairing: args.qk,
        };
        plot::save(&figure, path, (900, 560))?;
    }
    if args.stdout.json {
        outln!("{}", crate::json::to_string(&rows)?)?;
    } else {
        print_table(&rows)?;
        if let Some(path) = &args.out {
            outln!("plot written to {}", path.display())?;
        }
    }
    Ok(())
}

/// Prints the rows as an aligned text table.
fn print_table(rows: &[Row]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let with_measured = rows.iter().any(|r| r.measured.is_some());
    if with_measured {
        writeln!(
            out,
            "{:>8}  {:>12}  {:>14}",
            "distance", "bound", "measured"
        )?;
    } else {
        writeln!(out, "{:>8}  {:>12}", "distance", "bound")?;
    }
    for r in rows {
        match r.measured {
            Some(m) => writeln!(out, "{:>8}  {:>12.6}  {:>14.6}", r.distance, r.bound, m)?,
            None => writeln!(out, "{:>8}  {:>12.6}", r.distance, r.bound)?,
        }
    }
    Ok(())
}
