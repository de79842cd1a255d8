//! The plot: time and peak memory against length.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::cases::Kind;
use super::measure::Measurement;
use super::report::{Crossover, Record};
use crate::plot::{err, Figure, FAMILY};

/// Time and peak memory against length, log-log, one line per layer and masking.
pub(super) struct BenchFigure<'a> {
    pub(super) records: &'a [Record],
    pub(super) crossovers: &'a [Crossover],
    pub(super) heads: usize,
    pub(super) head_dim: usize,
}

/// A line of a panel: its legend, its (N, value) points and its colour.
type Line = (String, Vec<(f64, f64)>, RGBColor);

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

    /// One line per layer and masking: its legend, its (N, value) points and its colour.
    fn lines(&self, value: &dyn Fn(&Measurement) -> f64) -> Vec<Line> {
        let mut lines = Vec::new();
        for (i, c) in self.crossovers.iter().enumerate() {
            for kind in Kind::ALL {
                let points = self.series(kind, c.masking, value);
                let color = match (kind, i) {
                    (Kind::Softmax, 0) => RGBColor(31, 119, 180),
                    (Kind::Softmax, _) => RGBColor(23, 190, 207),
                    (Kind::Linear, 0) => RGBColor(214, 39, 40),
                    (Kind::Linear, _) => RGBColor(255, 127, 14),
                };
                lines.push((format!("{} ({})", kind.name(), c.masking), points, color));
            }
        }
        lines
    }

    fn panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        y_desc: &str,
        value: &dyn Fn(&Measurement) -> f64,
    ) -> anyhow::Result<()> {
        let lines = self.lines(value);
        let all: Vec<(f64, f64)> = lines.iter().flat_map(|l| l.1.iter().copied()).collect();
        let (x0, x1, y0, y1) = ranges(&all);
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
            let points: Vec<(f64, f64)> = points.into_iter().map(|(n, y)| (n.log2(), y)).collect();
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

/// The panel's ranges `(x0, x1, y0, y1)` over the points `(N, value)`: x is `log2(N)`, so that
/// lengths that double are evenly spaced (labelled by N itself), padded by 0.3; y is the
/// positive values' range widened 1.5x each way (for the log axis). Defaults without points.
fn ranges(all: &[(f64, f64)]) -> (f64, f64, f64, f64) {
    let xs = all.iter().map(|p| p.0.log2());
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
    (x0, x1, y0, y1)
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
