//! The cheap baselines of `experiment long-docs`: what counting characters reaches on the
//! same examples, cut as a model at each max length sees them ([`seen_texts`]), so that an
//! arm's accuracy is read against the strongest cheap method and not only against chance.
//!
//! - **collection**: multinomial naive Bayes over characters, add-one smoothed and fitted on
//!   the training side: `ŷ = argmax_c log P(c) + Σ_t log((n_c(t) + 1) / (N_c + V))`, with
//!   `n_c(t)` the count of character `t` in class `c`'s documents, `N_c` their total and `V`
//!   the characters seen in training.
//! - **authorship**: the candidate whose character `n`-gram counts are nearer the anchor's by
//!   cosine, `cos(a, b) = a·b / (|a| |b|)` (a tie goes to the first); `n` is 1 or 2, whichever
//!   is more accurate on the training side.

use std::collections::{BTreeMap, HashMap};

use roformer::train::classify::macro_f1;
use serde::Serialize;

use super::data::{seen_texts, Dataset, Item};
use super::task::Task;

/// A baseline's dev result at one max length.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// The max length whose cut texts it read.
    pub length: usize,
    /// What it is, in words.
    pub method: String,
    /// Dev accuracy.
    pub accuracy: f64,
    /// Dev macro-F1.
    pub macro_f1: f64,
}

/// The task's baseline at each of `lengths`.
pub fn baselines(task: Task, dataset: &Dataset, lengths: &[usize]) -> Vec<Baseline> {
    lengths
        .iter()
        .map(|&length| match task {
            Task::Collection => naive_bayes(dataset, length),
            Task::Authorship => nearest_candidate(dataset, length),
        })
        .collect()
}

/// The accuracy and macro-F1 of `predicted` against the items' labels.
fn score(items: &[Item], predicted: &[u32], classes: usize) -> (f64, f64) {
    let gold: Vec<u32> = items.iter().map(|i| i.label as u32).collect();
    let right = gold.iter().zip(predicted).filter(|(g, p)| g == p).count();
    let accuracy = right as f64 / gold.len().max(1) as f64;
    (accuracy, macro_f1(&gold, predicted, classes))
}

/// The collection baseline (see the module doc).
fn naive_bayes(dataset: &Dataset, length: usize) -> Baseline {
    let classes = dataset.labels.len();
    let mut counts: Vec<HashMap<char, f64>> = vec![HashMap::new(); classes];
    let mut totals = vec![0.0; classes];
    let mut documents = vec![0.0; classes];
    for item in &dataset.train {
        documents[item.label] += 1.0;
        for c in seen_texts(item, length).concat().chars() {
            *counts[item.label].entry(c).or_insert(0.0) += 1.0;
            totals[item.label] += 1.0;
        }
    }
    let vocabulary = {
        let mut all: Vec<char> = counts.iter().flat_map(|m| m.keys().copied()).collect();
        all.sort_unstable();
        all.dedup();
        all.len() as f64
    };
    let train_size = dataset.train.len().max(1) as f64;
    let predicted: Vec<u32> = (dataset.dev.iter())
        .map(|item| {
            let text = seen_texts(item, length).concat();
            let log_posterior = |c: usize| {
                let prior = (documents[c] / train_size).max(f64::MIN_POSITIVE).ln();
                let denominator = totals[c] + vocabulary;
                prior
                    + text
                        .chars()
                        .map(|t| ((counts[c].get(&t).unwrap_or(&0.0) + 1.0) / denominator).ln())
                        .sum::<f64>()
            };
            argmax((0..classes).map(log_posterior)) as u32
        })
        .collect();
    let (accuracy, macro_f1) = score(&dataset.dev, &predicted, classes);
    Baseline {
        length,
        method: "character naive Bayes (add-one)".into(),
        accuracy,
        macro_f1,
    }
}

/// The index of the largest value (the first of equals; 0 when empty).
fn argmax(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, v) in values.enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// The character `n`-gram counts of `text` (ordered, so that the sums over them, and the
/// baseline, are the same in every run).
fn ngrams(text: &str, n: usize) -> BTreeMap<&str, f64> {
    let bounds: Vec<usize> = (text.char_indices().map(|(i, _)| i))
        .chain([text.len()])
        .collect();
    let mut counts = BTreeMap::new();
    for w in bounds.windows(n + 1) {
        *counts.entry(&text[w[0]..w[n]]).or_insert(0.0) += 1.0;
    }
    counts
}

/// `a·b / (|a| |b|)`, 0 when either is empty.
fn cosine(a: &BTreeMap<&str, f64>, b: &BTreeMap<&str, f64>) -> f64 {
    let dot: f64 = a.iter().map(|(k, v)| v * b.get(k).unwrap_or(&0.0)).sum();
    let norm = |m: &BTreeMap<&str, f64>| m.values().map(|v| v * v).sum::<f64>().sqrt();
    let denominator = norm(a) * norm(b);
    if denominator > 0.0 {
        dot / denominator
    } else {
        0.0
    }
}

/// The candidate (0: first, 1: second) nearer the anchor by `n`-gram cosine.
fn nearer(item: &Item, length: usize, n: usize) -> u32 {
    let texts = seen_texts(item, length);
    let grams: Vec<BTreeMap<&str, f64>> = texts.iter().map(|t| ngrams(t, n)).collect();
    match grams.as_slice() {
        [anchor, first, second] => u32::from(cosine(anchor, second) > cosine(anchor, first)),
        _ => 0,
    }
}

/// The authorship baseline (see the module doc).
fn nearest_candidate(dataset: &Dataset, length: usize) -> Baseline {
    let classes = dataset.labels.len();
    let predict = |items: &[Item], n: usize| -> Vec<u32> {
        items.iter().map(|i| nearer(i, length, n)).collect()
    };
    let train_accuracy = |n: usize| score(&dataset.train, &predict(&dataset.train, n), classes).0;
    let n = if train_accuracy(2) > train_accuracy(1) {
        2
    } else {
        1
    };
    let (accuracy, macro_f1) = score(&dataset.dev, &predict(&dataset.dev, n), classes);
    Baseline {
        length,
        method: format!("nearer candidate by character {n}-gram cosine"),
        accuracy,
        macro_f1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(segments: &[&str], label: usize) -> Item {
        Item {
            segments: segments.iter().map(|s| s.to_string()).collect(),
            poets: vec![String::new(); segments.len()],
            collection: String::new(),
            label,
        }
    }

    #[test]
    fn ngrams_count_characters_not_bytes() {
        let g = ngrams("明月明月", 2);
        assert_eq!(g.get("明月"), Some(&2.0));
        assert_eq!(g.get("月明"), Some(&1.0));
        assert_eq!(g.len(), 2);
        assert!(ngrams("月", 2).is_empty());
    }

    #[test]
    fn cosine_is_one_for_proportional_counts_and_zero_for_disjoint() {
        let (a, b, c) = (ngrams("ab", 1), ngrams("aabb", 1), ngrams("cd", 1));
        assert!((cosine(&a, &b) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&a, &c), 0.0);
        assert_eq!(cosine(&a, &BTreeMap::new()), 0.0);
    }

    #[test]
    fn naive_bayes_learns_characters_that_tell_the_classes_apart() {
        let dataset = Dataset {
            labels: vec!["x".into(), "y".into()],
            train: vec![
                item(&["山山水"], 0),
                item(&["花花月"], 1),
                item(&["山水水"], 0),
            ],
            dev: vec![item(&["水山"], 0), item(&["月花"], 1), item(&["花"], 1)],
        };
        let b = naive_bayes(&dataset, 128);
        assert_eq!(b.accuracy, 1.0);
        assert_eq!(b.macro_f1, 1.0);
    }

    #[test]
    fn naive_bayes_reads_only_what_the_length_shows() {
        // Past the first two characters the dev document is the other class's.
        let dataset = Dataset {
            labels: vec!["x".into(), "y".into()],
            train: vec![item(&["山山"], 0), item(&["花花"], 1)],
            dev: vec![item(&["山山花花花花花花"], 0)],
        };
        assert_eq!(naive_bayes(&dataset, 4).accuracy, 1.0);
        assert_eq!(naive_bayes(&dataset, 16).accuracy, 0.0);
    }

    #[test]
    fn nearest_candidate_picks_the_candidate_sharing_the_anchors_characters() {
        let dataset = Dataset {
            labels: vec!["first".into(), "second".into()],
            train: vec![
                item(&["山水", "山水", "花月"], 0),
                item(&["花月", "山水", "花月"], 1),
            ],
            dev: vec![
                item(&["江河", "风雨", "江河"], 1),
                item(&["风雨", "风雨", "江河"], 0),
            ],
        };
        let b = nearest_candidate(&dataset, 512);
        assert_eq!(b.accuracy, 1.0);
        // A wrong-way dev set scores 0: the baseline is not a constant.
        let mut flipped = dataset.clone();
        for i in &mut flipped.dev {
            i.label = 1 - i.label;
        }
        assert_eq!(nearest_candidate(&flipped, 512).accuracy, 0.0);
    }
}
