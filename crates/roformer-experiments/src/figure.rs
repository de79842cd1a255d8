//! The experiments' figure: one line per arm (the mean over seeds) with a shaded band from the
//! smallest to the largest seed, on a linear, log2 or log10 x axis.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use roformer_runner::plot::{err, Figure, FAMILY};

/// A point of a series: x, and the mean, min and max over seeds.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// The x value (step, length, ...).
    pub x: f64,
    /// The mean over seeds.
    pub mean: f64,
    /// The smallest seed's value.
    pub min: f64,
    /// The largest seed's value.
    pub max: f64,
}

/// One arm's line.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's name.
    pub name: String,
    /// The points, by increasing x.
    pub points: Vec<Point>,
}

/// The scale of an x axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    /// x as it is (steps).
    Linear,
    /// `log2 x`, ticks at powers of two (lengths).
    Log2,
    /// `log10 x`, ticks labelled `3e-4` (learning rates).
    Log10,
}

/// Lines with min–max bands.
#[derive(Debug, Clone)]
pub struct BandFigure {
    /// The caption.
    pub title: String,
    /// The x axis's description.
    pub x_desc: String,
    /// The y axis's description.
    pub y_desc: String,
    /// The x axis's scale.
    pub x_scale: XScale,
    /// The lines.
    pub series: Vec<Series>,
    /// A horizontal reference line and its legend (e.g. chance accuracy).
    pub reference: Option<(f64, String)>,
    /// Where the legend goes (clear of the lines).
    pub legend: SeriesLabelPosition,
}

/// The colours of the arms, in order.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The chart the figure draws on: f64 on both axes.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

impl BandFigure {
    fn x_of(&self, x: f64) -> f64 {
        match self.x_scale {
            XScale::Linear => x,
            XScale::Log2 => x.log2(),
            XScale::Log10 => x.log10(),
        }
    }

    /// The x and y ranges of the points, the bands and the reference line, padded (the unit
    /// square when there is no point).
    fn ranges(&self) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for p in points() {
            x0 = x0.min(self.x_of(p.x));
            x1 = x1.max(self.x_of(p.x));
            y0 = y0.min(p.min);
            y1 = y1.max(p.max);
        }
        if let Some((r, _)) = &self.reference {
            y0 = y0.min(*r);
            y1 = y1.max(*r);
        }
        if !x0.is_finite() || !y0.is_finite() {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        let pad = ((y1 - y0) * 0.05).max(1e-6);
        // Room on the right for the last tick's label (plotters drops a label that would not fit).
        let x_pad = ((x1 - x0)
            * if self.x_scale == XScale::Linear {
                0.02
            } else {
                0.06
            })
        .max(1e-6);
        ((x0 - x_pad)..(x1 + x_pad), (y0 - pad)..(y1 + pad))
    }

    /// The axes: their descriptions, and on a log2 axis powers of two as tick labels, on a
    /// log10 axis the round values (`3e-4`, see [`log10_label`]).
    fn draw_mesh<DB: DrawingBackend>(&self, chart: &mut Chart<'_, DB>) -> anyhow::Result<()> {
        let scale = self.x_scale;
        chart
            .configure_mesh()
            .x_desc(self.x_desc.as_str())
            .y_desc(self.y_desc.as_str())
            .x_label_formatter(&|x| match scale {
                XScale::Linear => format!("{x:.0}"),
                // Powers of two only: 64, 128, ... (not 91 or 181).
                XScale::Log2 if (x - x.round()).abs() < 1e-9 => {
                    format!("{:.0}", 2f64.powf(x.round()))
                }
                XScale::Log2 => String::new(),
                XScale::Log10 => log10_label(*x),
            })
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(err)
    }

    /// The horizontal reference line across `x`, if any.
    fn draw_reference<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        x: &std::ops::Range<f64>,
    ) -> anyhow::Result<()> {
        let Some((r, name)) = &self.reference else {
            return Ok(());
        };
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(
                [(x.start, *r), (x.end, *r)],
                grey.stroke_width(1),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(1)));
        Ok(())
    }

    /// One arm: its min-max band, its line of means with a dot per point, its legend entry.
    fn draw_arm<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        s: &Series,
        colour: RGBColor,
    ) -> anyhow::Result<()> {
        let band: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (self.x_of(p.x), p.max))
            .chain(s.points.iter().rev().map(|p| (self.x_of(p.x), p.min)))
            .collect();
        if s.points.len() > 1 {
            let area = Polygon::new(band, colour.mix(0.18).filled());
            chart.draw_series(std::iter::once(area)).map_err(err)?;
        }
        let line: Vec<(f64, f64)> = s.points.iter().map(|p| (self.x_of(p.x), p.mean)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart
            .draw_series(line.into_iter().map(|p| Circle::new(p, 3, colour.filled())))
            .map_err(err)?;
        Ok(())
    }
}

/// The label of tick `x` on a log10 axis: `10^x` in one significant digit (`3e-4`) where that
/// digit is within 2 % of it, none elsewhere (a tick at 2.5e-3 is not labelled `3e-3`).
fn log10_label(x: f64) -> String {
    let v = 10f64.powf(x);
    let label = format!("{v:.0e}");
    match label.parse::<f64>() {
        Ok(r) if ((r - v) / v).abs() < 0.02 => label,
        _ => String::new(),
    }
}

impl Figure for BandFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let (x, y) = self.ranges();
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FAMILY, 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(x.clone(), y)
            .map_err(err)?;
        self.draw_mesh(&mut chart)?;
        self.draw_reference(&mut chart, &x)?;
        for (i, s) in self.series.iter().enumerate() {
            self.draw_arm(&mut chart, s, COLOURS[i % COLOURS.len()])?;
        }
        chart
            .configure_series_labels()
            .position(self.legend.clone())
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    }
}
