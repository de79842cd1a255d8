//! Hits out of masks, for the model and the two baselines, and the rates reported.

use serde::Serialize;

/// Hits out of masked characters.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Score {
    pub masked: usize,
    pub top1: usize,
    pub top5: usize,
}

impl Score {
    /// Counts one mask whose target ranked `rank` (0-based; `None` at 5 or below).
    pub fn add(&mut self, rank: Option<usize>) {
        self.masked += 1;
        match rank {
            Some(0) => {
                self.top1 += 1;
                self.top5 += 1;
            }
            Some(r) if r < 5 => self.top5 += 1,
            _ => {}
        }
    }

    /// `(top-1, top-5)` hit rates (0 with no mask).
    pub fn rates(&self) -> (f64, f64) {
        let n = self.masked.max(1) as f64;
        (self.top1 as f64 / n, self.top5 as f64 / n)
    }

    fn plus(self, other: Self) -> Self {
        Self {
            masked: self.masked + other.masked,
            top1: self.top1 + other.top1,
            top5: self.top5 + other.top5,
        }
    }
}

/// The scores of the model and of both baselines over one set of texts.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Part {
    /// Texts (documents or couplets) evaluated.
    pub documents: usize,
    pub model: Score,
    pub unigram: Score,
    pub neighbour: Score,
}

impl Part {
    /// Both parts together.
    pub fn plus(self, other: Self) -> Self {
        Self {
            documents: self.documents + other.documents,
            model: self.model.plus(other.model),
            unigram: self.unigram.plus(other.unigram),
            neighbour: self.neighbour.plus(other.neighbour),
        }
    }
}

/// One row of the report (`baseline_*` is the unigram baseline, named before the neighbour
/// baseline existed).
#[derive(Debug, Serialize)]
pub(super) struct Rates {
    pub documents: usize,
    pub masked: usize,
    pub model_top1: f64,
    pub model_top5: f64,
    pub baseline_top1: f64,
    pub baseline_top5: f64,
    pub neighbour_top1: f64,
    pub neighbour_top5: f64,
    /// `model_top1 / neighbour_top1`; `None` (JSON `null`) when the neighbour has no hit.
    pub model_over_neighbour_top1: Option<f64>,
    /// `model_top5 / neighbour_top5`; `None` when the neighbour has no hit.
    pub model_over_neighbour_top5: Option<f64>,
}

impl From<&Part> for Rates {
    fn from(p: &Part) -> Self {
        let (model_top1, model_top5) = p.model.rates();
        let (baseline_top1, baseline_top5) = p.unigram.rates();
        let (neighbour_top1, neighbour_top5) = p.neighbour.rates();
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        Rates {
            documents: p.documents,
            masked: p.model.masked,
            model_top1,
            model_top5,
            baseline_top1,
            baseline_top5,
            neighbour_top1,
            neighbour_top5,
            model_over_neighbour_top1: ratio(model_top1, neighbour_top1),
            model_over_neighbour_top5: ratio(model_top5, neighbour_top5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_count_top1_and_top5() {
        let mut s = Score::default();
        for r in [Some(0), Some(3), None, Some(5)] {
            s.add(r);
        }
        assert_eq!((s.masked, s.top1, s.top5), (4, 1, 2));
        assert_eq!(s.rates(), (0.25, 0.5));
    }

    #[test]
    fn ratios_divide_the_model_by_the_neighbour_and_skip_zero() {
        let mut p = Part::default();
        for (m, n) in [
            (Some(0), Some(0)),
            (Some(0), Some(2)),
            (Some(1), None),
            (None, None),
        ] {
            p.model.add(m);
            p.neighbour.add(n);
            p.unigram.add(None);
        }
        let r = Rates::from(&p);
        // model: top1 2/4, top5 3/4; neighbour: top1 1/4, top5 2/4.
        assert_eq!(r.model_over_neighbour_top1, Some(2.0));
        assert_eq!(r.model_over_neighbour_top5, Some(1.5));
        assert_eq!(r.masked, 4);
        let none = Rates::from(&Part::default());
        assert_eq!(none.model_over_neighbour_top1, None);
    }
}
