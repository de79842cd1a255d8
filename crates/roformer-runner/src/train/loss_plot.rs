//! The loss curves of a run: training loss per step (and its moving average) and validation
//! loss at each evaluation, against the step.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::progress::History;
use crate::plot::{err, Figure, FAMILY};

/// Steps averaged by the smoothed training curve.
const WINDOW: usize = 20;

/// The figure of a run's [`History`].
pub struct LossFigure<'a> {
    /// The run's records.
    pub history: &'a History,
    /// The title.
    pub title: String,
}

impl Figure for LossFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let steps = &self.history.steps;
        let evals = &self.history.evals;
        let last = steps.last().map_or(1, |s| s.step).max(1) as f64;
        let values = steps
            .iter()
            .map(|s| s.loss)
            .chain(evals.iter().map(|e| e.loss))
            .filter(|v| v.is_finite());
        let (low, high) = values.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
        let low = if low.is_finite() {
            (low * 0.95).max(0.0)
        } else {
            0.0
        };
        let high = (high * 1.05).max(low + 1e-6);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FAMILY, 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..last, low..high)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss")
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .draw()
            .map_err(err)?;
        let light = RGBColor(150, 180, 230);
        chart
            .draw_series(LineSeries::new(
                steps.iter().map(|s| (s.step as f64, s.loss)),
                light.stroke_width(1),
            ))
            .map_err(err)?
            .label("training loss")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], light.stroke_width(2)));
        let smooth: Vec<(f64, f64)> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let from = i.saturating_sub(WINDOW - 1);
                let window = &steps[from..=i];
                let mean = window.iter().map(|w| w.loss).sum::<f64>() / window.len() as f64;
                (s.step as f64, mean)
            })
            .collect();
        chart
            .draw_series(LineSeries::new(smooth, BLUE.stroke_width(2)))
            .map_err(err)?
            .label(format!("training loss, mean of {WINDOW} steps"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        if !evals.is_empty() {
            let points: Vec<(f64, f64)> = evals.iter().map(|e| (e.step as f64, e.loss)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), RED.stroke_width(2)))
                .map_err(err)?
                .label("validation loss")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
            chart
                .draw_series(points.into_iter().map(|p| Circle::new(p, 3, RED.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    }
}
