//! `--against-f32`: how far the bf16 model's predictions at the masks are from f32's.

use serde::Serialize;

use super::model::top1;

/// Agreement of two models' logits over the same masks.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Agreement {
    /// Masks compared.
    pub masks: usize,
    /// Masks where both models rank the same token first.
    pub same_top1: usize,
    /// `max |a_j - b_j|` over every logit of every mask.
    pub max_abs_logit_diff: f32,
}

impl Agreement {
    /// Adds one mask: `a` and `b` are the two models' logits there.
    pub fn add(&mut self, a: &[f32], b: &[f32]) {
        self.masks += 1;
        if top1(a) == top1(b) {
            self.same_top1 += 1;
        }
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        self.max_abs_logit_diff = self.max_abs_logit_diff.max(diff);
    }

    /// The report's numbers.
    pub fn summary(&self) -> AgreementSummary {
        AgreementSummary {
            masks: self.masks,
            same_top1: self.same_top1,
            same_top1_share: self.same_top1 as f64 / self.masks.max(1) as f64,
            max_abs_logit_diff: f64::from(self.max_abs_logit_diff),
        }
    }
}

/// The `against_f32` object of the JSON report.
#[derive(Debug, Serialize)]
pub(super) struct AgreementSummary {
    pub masks: usize,
    pub same_top1: usize,
    /// `same_top1 / masks`.
    pub same_top1_share: f64,
    pub max_abs_logit_diff: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_same_top1_and_the_largest_difference() {
        let mut a = Agreement::default();
        a.add(&[1.0, 2.0, 0.0], &[1.0, 2.5, 0.0]); // same top-1, diff 0.5
        a.add(&[3.0, 2.0, 0.0], &[1.0, 2.0, -0.25]); // top-1 0 vs 1, diff 2
        let s = a.summary();
        assert_eq!((s.masks, s.same_top1), (2, 1));
        assert_eq!(s.same_top1_share, 0.5);
        assert_eq!(s.max_abs_logit_diff, 2.0);
    }
}
