//! Summaries over the seeds of an arm: mean, spread (min, max) and sample standard deviation.

use serde::Serialize;

/// The values of one quantity over seeds, and their summary.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Spread {
    /// One value per seed, in seed order (none dropped).
    pub values: Vec<f64>,
    /// `sum(v) / n`.
    pub mean: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// `sqrt(sum((v - mean)^2) / (n - 1))`, 0 for a single value.
    pub std: f64,
}

impl Spread {
    /// The summary of `values` (`None` when empty or when one is not finite).
    pub fn of(values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let std = if values.len() > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Some(Spread {
            values,
            mean,
            min,
            max,
            std,
        })
    }

    /// `mean ± std (min–max)` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!(
            "{:.d$} ± {:.d$} ({:.d$}–{:.d$})",
            self.mean,
            self.std,
            self.min,
            self.max,
            d = digits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_and_refuses_empty_or_non_finite_input() {
        let s = Spread::of(vec![1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max), (2.0, 1.0, 3.0));
        assert!((s.std - 1.0).abs() < 1e-12);
        assert_eq!(Spread::of(vec![5.0]).unwrap().std, 0.0);
        assert!(Spread::of(vec![]).is_none());
        assert!(Spread::of(vec![1.0, f64::NAN]).is_none());
        assert_eq!(s.show(1), "2.0 ± 1.0 (1.0–3.0)");
    }
}
