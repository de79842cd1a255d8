//! A classifier's confusion on its dev examples, counted in memory that grows with the labels
//! (not with their square) and reported in a size bounded the same way.
//!
//! **What is reported** ([`Confusion`]):
//! - up to [`FULL_MATRIX_LABELS`] labels (100: at most 10 000 cells), the whole matrix
//!   `confusion[gold][predicted]`, as before;
//! - past it, a [`ConfusionSummary`]: per label the items of that gold label, the items
//!   predicted as it and those predicted right (precision, recall and F1 of every label follow
//!   from the three), and the largest off-diagonal cells, at most one per label, with the
//!   count of errors the list leaves out.
//!
//! **Size.** The summary holds at most `6 L + 2` numbers for `L` labels; written as JSON, a
//! number takes its digits and a separator, so a `metrics.jsonl` line with counts below a
//! million stays under about `40 L` bytes beyond its fixed fields (10 000 labels: under 400 KB,
//! where the 10 000 x 10 000 matrix took 109 MB), and the pretty-printed `best/eval.json`,
//! a number a line, under about `100 L` bytes.
//!
//! **Memory while counting** ([`ConfusionCounts`]): three counters per label, the dense matrix
//! only up to [`FULL_MATRIX_LABELS`] labels, and past it one entry per distinct (gold,
//! predicted) pair among the errors, which is at most the number of dev examples (each of
//! which is held in memory anyway, as its token ids); the `L x L` matrix is never built past
//! the limit.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The most labels whose confusion is reported as the whole matrix (`100 x 100` cells).
pub const FULL_MATRIX_LABELS: usize = 100;

/// The confusion of a classifier's predictions.
///
/// Written untagged: the matrix as an array of rows (the form of files written before the
/// summary existed, which still read), the summary as an object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Confusion {
    /// `matrix[gold][predicted]` counts the items of label `gold` predicted as `predicted`,
    /// labels in index order (up to [`FULL_MATRIX_LABELS`] labels).
    Matrix(Vec<Vec<usize>>),
    /// Per-label counts and the largest confusions (more labels).
    Summary(ConfusionSummary),
}

impl Confusion {
    /// The whole matrix, when this is one.
    pub fn into_matrix(self) -> Option<Vec<Vec<usize>>> {
        match self {
            Self::Matrix(m) => Some(m),
            Self::Summary(_) => None,
        }
    }
}

/// The confusion of more than [`FULL_MATRIX_LABELS`] labels: per-label counts (each vector
/// has one entry per label, in index order) and the largest off-diagonal cells.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConfusionSummary {
    /// The number of labels.
    pub labels: usize,
    /// Items of each gold label.
    pub gold: Vec<usize>,
    /// Items predicted as each label.
    pub predicted: Vec<usize>,
    /// Items of each label predicted right (the matrix's diagonal).
    pub correct: Vec<usize>,
    /// The largest off-diagonal cells as `[gold, predicted, count]`, the largest count first
    /// (ties in label order); at most one per label.
    pub top: Vec<[usize; 3]>,
    /// Errors in cells that `top` leaves out.
    pub unlisted_errors: usize,
}

/// Counts of (gold, predicted) pairs as predictions come, in memory bounded as the module's
/// doc says. A label at or past the label count is not counted in a cell (as a gold label it
/// still counts against the predicted label's precision, as a prediction against the gold
/// label's recall).
#[derive(Debug, Clone)]
pub struct ConfusionCounts {
    gold: Vec<usize>,
    predicted: Vec<usize>,
    correct: Vec<usize>,
    /// The dense matrix, row-major, up to [`FULL_MATRIX_LABELS`] labels.
    dense: Option<Vec<usize>>,
    /// Off-diagonal cells by (gold, predicted), past [`FULL_MATRIX_LABELS`] labels.
    errors: HashMap<(u32, u32), usize>,
    /// Items counted.
    items: usize,
    /// Items whose prediction equals their gold label.
    right: usize,
}

impl ConfusionCounts {
    /// No counts yet, over `labels` labels.
    pub fn new(labels: usize) -> Self {
        Self {
            gold: vec![0; labels],
            predicted: vec![0; labels],
            correct: vec![0; labels],
            dense: (labels <= FULL_MATRIX_LABELS).then(|| vec![0; labels * labels]),
            errors: HashMap::new(),
            items: 0,
            right: 0,
        }
    }

    /// The number of labels.
    pub fn labels(&self) -> usize {
        self.gold.len()
    }

    /// Counts one item of label `gold` predicted as `predicted`.
    pub fn add(&mut self, gold: u32, predicted: u32) {
        let labels = self.labels();
        let (g, p) = (gold as usize, predicted as usize);
        self.items += 1;
        self.right += usize::from(g == p);
        if g < labels {
            self.gold[g] += 1;
        }
        if p < labels {
            self.predicted[p] += 1;
        }
        if g >= labels || p >= labels {
            return;
        }
        if g == p {
            self.correct[g] += 1;
        }
        match &mut self.dense {
            Some(cells) => cells[g * labels + p] += 1,
            None if g != p => *self.errors.entry((gold, predicted)).or_insert(0) += 1,
            None => {}
        }
    }

    /// Items counted.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Items whose prediction equals their gold label.
    pub fn right(&self) -> usize {
        self.right
    }

    /// Per label `l`: the items of gold label `l` predicted right, and the items of gold label
    /// `l` (their ratio is the label's recall, its accuracy).
    pub fn per_label(&self) -> Vec<(usize, usize)> {
        self.correct
            .iter()
            .copied()
            .zip(self.gold.iter().copied())
            .collect()
    }

    /// Macro-averaged F1: the mean over labels of `2 tp / (2 tp + fp + fn)`, leaving out a
    /// label absent from both gold and predictions (as scikit-learn's
    /// `f1_score(average="macro")` over the labels present).
    pub fn macro_f1(&self) -> f64 {
        let (mut sum, mut present) = (0.0, 0usize);
        for ((&gold, &predicted), &tp) in self.gold.iter().zip(&self.predicted).zip(&self.correct) {
            // fp = predicted - tp, fn = gold - tp.
            let (fp, fnn) = (predicted - tp, gold - tp);
            if tp + fp + fnn == 0 {
                continue;
            }
            sum += 2.0 * tp as f64 / (2 * tp + fp + fnn) as f64;
            present += 1;
        }
        if present == 0 {
            0.0
        } else {
            sum / present as f64
        }
    }

    /// The report: the whole matrix up to [`FULL_MATRIX_LABELS`] labels, else the summary.
    pub fn report(&self) -> Confusion {
        let labels = self.labels();
        if let Some(cells) = &self.dense {
            let rows = cells.chunks(labels.max(1)).map(<[usize]>::to_vec);
            return Confusion::Matrix(rows.take(labels).collect());
        }
        let mut cells: Vec<[usize; 3]> = self
            .errors
            .iter()
            .map(|(&(g, p), &count)| [g as usize, p as usize, count])
            .collect();
        let order = |a: &[usize; 3], b: &[usize; 3]| b[2].cmp(&a[2]).then(a.cmp(b));
        if cells.len() > labels {
            cells.select_nth_unstable_by(labels, order);
            cells.truncate(labels);
        }
        cells.sort_unstable_by(order);
        let errors: usize = self.errors.values().sum();
        let listed: usize = cells.iter().map(|c| c[2]).sum();
        Confusion::Summary(ConfusionSummary {
            labels,
            gold: self.gold.clone(),
            predicted: self.predicted.clone(),
            correct: self.correct.clone(),
            top: cells,
            unlisted_errors: errors - listed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_counts_gold_against_predicted_up_to_its_limit() {
        let mut counts = ConfusionCounts::new(3);
        for (g, p) in [(0, 0), (0, 1), (1, 1), (2, 1), (2, 2), (2, 5)] {
            counts.add(g, p);
        }
        let m = vec![vec![1, 1, 0], vec![0, 1, 0], vec![0, 1, 1]];
        assert_eq!(counts.report(), Confusion::Matrix(m));
        assert_eq!((counts.items(), counts.right()), (6, 3));
        assert_eq!(
            ConfusionCounts::new(2).report(),
            Confusion::Matrix(vec![vec![0, 0], vec![0, 0]])
        );
    }

    /// The old quadratic macro-F1, as the reference.
    fn macro_f1_slow(gold: &[u32], predicted: &[u32], classes: usize) -> f64 {
        let mut f1s = Vec::new();
        for c in 0..classes as u32 {
            let pairs = || gold.iter().zip(predicted);
            let tp = pairs().filter(|(g, p)| **g == c && **p == c).count();
            let fp = pairs().filter(|(g, p)| **g != c && **p == c).count();
            let fnn = pairs().filter(|(g, p)| **g == c && **p != c).count();
            if tp + fp + fnn > 0 {
                f1s.push(2.0 * tp as f64 / (2 * tp + fp + fnn) as f64);
            }
        }
        if f1s.is_empty() {
            0.0
        } else {
            f1s.iter().sum::<f64>() / f1s.len() as f64
        }
    }

    #[test]
    fn macro_f1_from_counts_equals_the_pairwise_definition() {
        let gold = [0u32, 0, 1, 2, 2, 2, 3, 7, 1];
        let predicted = [0u32, 1, 1, 1, 2, 9, 3, 3, 0];
        for labels in [4, 8, 10, 200] {
            let mut counts = ConfusionCounts::new(labels);
            for (&g, &p) in gold.iter().zip(&predicted) {
                counts.add(g, p);
            }
            let slow = macro_f1_slow(&gold, &predicted, labels);
            assert_eq!(counts.macro_f1().to_bits(), slow.to_bits(), "{labels}");
        }
        assert_eq!(ConfusionCounts::new(3).macro_f1(), 0.0);
    }

    #[test]
    fn past_the_limit_a_summary_lists_at_most_one_confusion_per_label() {
        let labels = FULL_MATRIX_LABELS + 1;
        let mut counts = ConfusionCounts::new(labels);
        // Every label confused with its successor once, label 5 with 6 three times more,
        // label 0 always right.
        for g in 1..labels as u32 {
            counts.add(g, (g + 1) % labels as u32);
        }
        for _ in 0..3 {
            counts.add(5, 6);
        }
        for _ in 0..4 {
            counts.add(0, 0);
        }
        // Each label also confused with its predecessor: 2 L cells, only L listed.
        for g in 1..labels as u32 {
            counts.add(g, g - 1);
        }
        let Confusion::Summary(s) = counts.report() else {
            panic!("a summary past {FULL_MATRIX_LABELS} labels");
        };
        assert_eq!(s.labels, labels);
        assert_eq!(s.top.len(), labels);
        assert_eq!(s.top[0], [5, 6, 4]);
        // Ties in label order after the largest.
        assert_eq!(s.top[1], [1, 0, 1]);
        assert_eq!(s.top[2], [1, 2, 1]);
        let errors = 2 * (labels - 1) + 3;
        let listed: usize = s.top.iter().map(|c| c[2]).sum();
        assert_eq!(listed + s.unlisted_errors, errors);
        assert_eq!(s.correct[0], 4);
        assert_eq!(s.gold[5], 5);
        assert_eq!(s.predicted[6], 5);
        // The summary reads back; so does an old file's matrix.
        let text = serde_json::to_string(&Confusion::Summary(s.clone())).unwrap();
        assert_eq!(
            serde_json::from_str::<Confusion>(&text).unwrap(),
            Confusion::Summary(s)
        );
        let old: Confusion = serde_json::from_str("[[1, 0], [2, 3]]").unwrap();
        assert_eq!(old.into_matrix(), Some(vec![vec![1, 0], vec![2, 3]]));
    }

    #[test]
    fn ten_thousand_labels_write_a_summary_linear_in_the_labels() {
        let labels = 10_000;
        let mut counts = ConfusionCounts::new(labels);
        for i in 0..50_000u32 {
            counts.add(i % labels as u32, (i * 7 + 3) % labels as u32);
        }
        let text = serde_json::to_string(&counts.report()).unwrap();
        assert!(text.len() < 40 * labels, "{} bytes", text.len());
        let pretty = serde_json::to_string_pretty(&counts.report()).unwrap();
        assert!(pretty.len() < 100 * labels, "{} bytes", pretty.len());
    }
}
