//! `roformer analyze attention-2d`: the RoPE-only attention score from the centre patch of an
//! image grid to every patch, axial 2D RoPE (seed 003) against 1D RoPE on the flattened index.
//!
//! q = k = a random Gaussian vector carries no content, so the map shows what the rotation alone
//! does: `score(p) = <R_c q, R_p q> / |q|^2` (1 at the centre), averaged over `--samples`
//! vectors. Axial 2D RoPE rotates half of the pairs by the row and half by the column, so the
//! score depends on (row offset, column offset) symmetrically; 1D RoPE on `r * W + c` sees a
//! vertical neighbour as W tokens away and a patch at the end of the previous row as adjacent.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, ensure, Context};
use plotters::coord::Shift;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use rotary::analysis::attention_map::scores_against_row;
use rotary::nd::{NdPositions, NdRope};
use rotary::{inv_freqs, CosSin, Layout};
use serde::Serialize;

use super::limits::{at_most, MAX_SAMPLES, MAX_TABLE_ELEMENTS, MAX_WORK};
use crate::output::outln;
use crate::output::OutputArgs;
use crate::plot::{self, err, Figure, FAMILY};

/// Arguments of `roformer analyze attention-2d`.
///
/// Limits (see `analyze::limits`): at most 2^20 patches, d at most 65536, patches x d at most
/// 2^26, samples at most 2^16 and samples x patches x d at most 2^30.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "Print JSON (grid, centre and both maps as rows of scores) instead of text"
)))]
pub struct Args {
    /// Grid of patches as ROWSxCOLS (at most 2^20 patches).
    #[arg(long, default_value = "16x16", value_parser = parse_grid)]
    grid: (usize, usize),
    /// Rotated dimensions per head (a multiple of 4: axial 2D splits it in two halves of pairs;
    /// at most 65536, and patches x dim at most 2^26).
    #[arg(long, default_value_t = 64)]
    dim: usize,
    /// Frequency base of each schedule.
    #[arg(long, default_value_t = rotary::DEFAULT_BASE)]
    base: f64,
    /// Random vectors averaged over (at most 2^16; samples x patches x dim at most 2^30).
    #[arg(long, default_value_t = 32)]
    samples: usize,
    /// Seed of the random vectors.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the two heat maps to this file (.png or .svg).
    #[arg(long)]
    out: Option<PathBuf>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
}

fn parse_grid(s: &str) -> Result<(usize, usize), String> {
    let parse = |part: &str| {
        part.trim()
            .parse::<usize>()
            .map_err(|e| format!("{s:?}: {e}"))
    };
    match s.split_once(['x', 'X']) {
        Some((r, c)) => {
            let (r, c) = (parse(r)?, parse(c)?);
            if r == 0 || c == 0 {
                return Err(format!("{s:?}: the grid needs at least one row and column"));
            }
            Ok((r, c))
        }
        None => Err(format!("{s:?}: expected ROWSxCOLS, e.g. 16x16")),
    }
}

/// The output: both maps as `rows x cols` scores, row-major.
#[derive(Debug, Serialize)]
struct Maps {
    grid: [usize; 2],
    dim: usize,
    base: f64,
    samples: usize,
    /// The query patch `[row, col]`.
    centre: [usize; 2],
    /// Mean of `<R_c q, R_p q> / |q|^2` under axial 2D RoPE, `axial_2d[row][col]`.
    axial_2d: Vec<Vec<f64>>,
    /// The same under 1D RoPE on the flattened index `row * cols + col`.
    flat_1d: Vec<Vec<f64>>,
}

/// Mean normalised score of the `centre` row against every row of `table`.
fn mean_map(
    table: &CosSin,
    dim: usize,
    centre: usize,
    vectors: &[Vec<f32>],
) -> anyhow::Result<Vec<f64>> {
    let mut total = vec![0f64; table.rows()];
    for q in vectors {
        let norm: f64 = q.iter().map(|&x| f64::from(x).powi(2)).sum();
        ensure!(norm > 0.0, "a random vector came out zero");
        for (t, s) in total
            .iter_mut()
            .zip(scores_against_row(table, dim, q, q, centre)?)
        {
            *t += s / norm;
        }
    }
    Ok(total.iter().map(|t| t / vectors.len() as f64).collect())
}

fn compute(args: &Args) -> anyhow::Result<Maps> {
    let (rows, cols) = args.grid;
    if !args.dim.is_multiple_of(4) || args.dim == 0 {
        bail!(
            "--dim must be a positive multiple of 4 (two halves of pairs), got {}",
            args.dim
        );
    }
    ensure!(args.samples > 0, "--samples must be at least 1");
    let cells = rows
        .checked_mul(cols)
        .filter(|&n| n <= 1 << 20)
        .context("--grid: at most 2^20 patches")?;
    let rope = NdRope::axial_2d(args.dim, args.dim, args.base, Layout::Interleaved)?;
    let table = cells as u128 * args.dim as u128;
    at_most("patches x --dim", table, MAX_TABLE_ELEMENTS)?;
    at_most("--samples", args.samples as u128, MAX_SAMPLES as u128)?;
    at_most(
        "--samples x patches x --dim",
        args.samples as u128 * table,
        MAX_WORK,
    )?;
    let centre = [rows / 2, cols / 2];
    let centre_row = centre[0] * cols + centre[1];
    let axial = rope.table(&NdPositions::grid_2d(rows, cols)?)?;
    let theta = inv_freqs(args.dim, args.base)?;
    let flat = CosSin::from_positions(Layout::Interleaved, &theta, 1.0, cells, |r| r as f64)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let vectors: Vec<Vec<f32>> = (0..args.samples)
        .map(|_| (0..args.dim).map(|_| rng.sample(StandardNormal)).collect())
        .collect();
    let as_rows = |v: Vec<f64>| v.chunks(cols).map(<[f64]>::to_vec).collect();
    Ok(Maps {
        grid: [rows, cols],
        dim: args.dim,
        base: args.base,
        samples: args.samples,
        centre,
        axial_2d: as_rows(mean_map(&axial, args.dim, centre_row, &vectors)?),
        flat_1d: as_rows(mean_map(&flat, args.dim, centre_row, &vectors)?),
    })
}

/// Two heat maps on one colour scale, and the scale.
struct HeatFigure<'a> {
    maps: &'a Maps,
}

impl HeatFigure<'_> {
    fn range(&self) -> (f64, f64) {
        let all = self
            .maps
            .axial_2d
            .iter()
            .chain(&self.maps.flat_1d)
            .flatten();
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
        if hi - lo > 1e-12 {
            (lo, hi)
        } else {
            (lo, lo + 1.0)
        }
    }

    fn panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        map: &[Vec<f64>],
        (lo, hi): (f64, f64),
    ) -> anyhow::Result<()> {
        let [rows, cols] = self.maps.grid;
        let (h, w) = (rows as f64, cols as f64);
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FAMILY, 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..w, 0.0..h)
            .map_err(err)?;
        // Row 0 at the top, as an image: y = rows - row.
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("column")
            .y_desc("row")
            .x_labels(cols.min(9))
            .y_labels(rows.min(9))
            .x_label_formatter(&|x| format!("{}", x.floor()))
            .y_label_formatter(&|y| format!("{}", (h - y).floor()))
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 14))
            .draw()
            .map_err(err)?;
        let cells = map.iter().enumerate().flat_map(|(r, row)| {
            row.iter().enumerate().map(move |(c, &v)| {
                let (x, y) = (c as f64, h - r as f64);
                let color = ViridisRGB::get_color_normalized(v, lo, hi);
                Rectangle::new([(x, y - 1.0), (x + 1.0, y)], color.filled())
            })
        });
        chart.draw_series(cells).map_err(err)?;
        let [cr, cc] = self.maps.centre;
        let (x, y) = (cc as f64, h - cr as f64);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x, y - 1.0), (x + 1.0, y)],
                RED.stroke_width(2),
            )))
            .map_err(err)?;
        Ok(())
    }

    fn colour_bar<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        (lo, hi): (f64, f64),
    ) -> anyhow::Result<()> {
        let mut chart = ChartBuilder::on(area)
            .margin_top(45)
            .margin_bottom(50)
            .margin_left(20)
            .margin_right(10)
            .right_y_label_area_size(50)
            .build_cartesian_2d(0.0..1.0, lo..hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(6)
            .y_label_formatter(&|v| format!("{v:.2}"))
            .label_style((FAMILY, 12))
            .draw()
            .map_err(err)?;
        let steps = 100;
        let bands = (0..steps).map(|i| {
            let a = lo + (hi - lo) * i as f64 / steps as f64;
            let b = lo + (hi - lo) * (i + 1) as f64 / steps as f64;
            let color = ViridisRGB::get_color_normalized(0.5 * (a + b), lo, hi);
            Rectangle::new([(0.0, a), (1.0, b)], color.filled())
        });
        chart.draw_series(bands).map_err(err)?;
        Ok(())
    }
}

impl Figure for HeatFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let m = self.maps;
        let title = format!(
            "RoPE-only score <R_c q, R_p q> / |q|^2 from the centre patch (red), d = {}, mean of {}",
            m.dim, m.samples
        );
        let root = root.titled(&title, (FAMILY, 20)).map_err(err)?;
        let width = root.dim_in_pixel().0;
        let (maps, bar) = root.split_horizontally(width - 110);
        let (left, right) = maps.split_horizontally((width - 110) / 2);
        let range = self.range();
        self.panel(&left, "axial 2D RoPE (row, column)", &m.axial_2d, range)?;
        self.panel(
            &right,
            &format!(
                "1D RoPE on the flattened index row * {} + column",
                m.grid[1]
            ),
            &m.flat_1d,
            range,
        )?;
        self.colour_bar(&bar, range)
    }
}

/// Prints both maps as text.
fn print_maps(maps: &Maps) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let [r, c] = maps.centre;
    writeln!(
        out,
        "mean <R_c q, R_p q> / |q|^2 over {} random q, d = {}, base = {}, centre patch ({r}, {c})",
        maps.samples, maps.dim, maps.base
    )?;
    for (name, map) in [
        ("axial 2D RoPE", &maps.axial_2d),
        ("1D RoPE on the flattened index", &maps.flat_1d),
    ] {
        writeln!(out, "\n{name}:")?;
        for row in map {
            let cells: Vec<String> = row.iter().map(|v| format!("{v:6.3}")).collect();
            writeln!(out, "{}", cells.join(" "))?;
        }
    }
    Ok(())
}

/// Runs `roformer analyze attention-2d`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.out {
        plot::Format::from_path(path)?;
    }
    let maps = compute(&args)?;
    if let Some(path) = &args.out {
        plot::save(&HeatFigure { maps: &maps }, path, (1280, 600))?;
    }
    if args.stdout.json {
        outln!("{}", crate::json::to_string(&maps)?)?;
    } else {
        print_maps(&maps)?;
        if let Some(path) = &args.out {
            outln!("plot written to {}", path.display())?;
        }
    }
    Ok(())
}
