//! Sequence classification fine-tuning as a [`Task`]: JSON-lines examples (a text or a text
//! pair and a label), batches shuffled per epoch, accuracy and macro-F1 on the dev set, and
//! the best model kept.
//!
//! An example is one JSON object per line: `{"text": "...", "label": "name"}`, with an
//! optional `"text_pair"` for pair tasks. A label is a name from the label list; a number
//! (`"label": 1`) is the label named `"1"`, never an index into a list of names.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::autograd::param_grads::ParamGrads;
use crate::mode::{Dropout, Mode};
use crate::tasks::{HeadModel, RoFormerForSequenceClassification};
use crate::tokenizer::RoFormerTokenizer;
use crate::train::checkpoint::{model_files, write_dir_atomically};
use crate::train::confusion::ConfusionCounts;
use crate::train::error::TrainError;
use crate::train::loss::{classification_loss, BatchInputs};
use crate::train::params::Params;
use crate::train::run::{EvalMetrics, Evaluation, Task};

/// One labelled example, tokenised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// `[CLS] text [SEP] (pair [SEP])`, truncated.
    pub ids: Vec<u32>,
    /// 0 for the first segment, 1 for the pair.
    pub type_ids: Vec<u32>,
    /// The label's index.
    pub label: u32,
}

/// A line of a JSON-lines example file.
#[derive(Debug, Deserialize)]
struct RawExample {
    text: String,
    #[serde(default)]
    text_pair: Option<String>,
    label: serde_json::Value,
}

/// The labels of a file's examples (for a label list not given explicitly): names in order of
/// first appearance, or, when every label is a whole number, the numbers in ascending order
/// (written as names: `"0"`, `"1"`, ...), so that a number is the name of its class.
///
/// # Errors
/// As [`read_examples`], and a file that mixes names and numbers (the number would silently
/// become a class of its own), naming the first line of the other kind.
pub fn labels_of(path: &Path) -> Result<Vec<String>, TrainError> {
    let mut labels: Vec<String> = Vec::new();
    let mut numbers: Vec<u64> = Vec::new();
    let mut first: Option<(usize, &'static str)> = None;
    for (line, raw) in raw_examples(path)? {
        let kind = match &raw.label {
            serde_json::Value::String(s) => {
                if !labels.contains(s) {
                    labels.push(s.clone());
                }
                "a name"
            }
            serde_json::Value::Number(n) => {
                let Some(n) = n.as_u64() else {
                    return Err(bad_line(
                        path,
                        line,
                        format!("label {n} is neither a name nor a whole number ≥ 0"),
                    ));
                };
                if !numbers.contains(&n) {
                    numbers.push(n);
                }
                "a number"
            }
            other => {
                return Err(bad_line(
                    path,
                    line,
                    format!("label {other} is neither a name nor a number"),
                ))
            }
        };
        match first {
            None => first = Some((line, kind)),
            Some((at, was)) if was != kind => {
                return Err(bad_line(
                    path,
                    line,
                    format!(
                        "label {} is {kind}, but the label on line {at} is {was}: write every \
                         label as a name or every label as a number, or give the label list",
                        raw.label
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if labels.is_empty() {
        numbers.sort_unstable();
        labels = numbers.iter().map(u64::to_string).collect();
    }
    Ok(labels)
}

/// The index of an example's label in `labels`: a name, or a number written as its name
/// (`1` is the label `"1"`; a number is never read as an index into names).
fn label_index(label: &serde_json::Value, labels: &[String]) -> Result<usize, String> {
    let name = match label {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("label {other} is neither a name nor a number")),
    };
    if let Some(i) = labels.iter().position(|l| *l == name) {
        return Ok(i);
    }
    let numbers_only = labels.iter().all(|l| l.parse::<u64>().is_ok());
    Err(if label.is_number() && !numbers_only {
        format!(
            "label {label} is a number, but the labels are names {labels:?}: write the label's \
             name (a number is a label's name, never an index)"
        )
    } else {
        format!("label {label} is not one of {labels:?}")
    })
}

fn bad_line(path: &Path, line: usize, reason: String) -> TrainError {
    TrainError::Examples {
        path: path.to_path_buf(),
        line,
        reason,
    }
}

fn raw_examples(path: &Path) -> Result<Vec<(usize, RawExample)>, TrainError> {
    let text = crate::memory::read_input_text(path).map_err(|source| TrainError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let raw: RawExample =
            serde_json::from_str(line).map_err(|e| bad_line(path, i + 1, e.to_string()))?;
        out.push((i + 1, raw));
    }
    if out.is_empty() {
        return Err(bad_line(path, 0, "no example in the file".into()));
    }
    Ok(out)
}

/// Reads and tokenises the examples of a JSON-lines file, each cut to `max_length` tokens.
///
/// # Errors
/// [`TrainError::Io`] for an unreadable file, [`TrainError::Examples`] naming the line of a
/// malformed example or an unknown label, or for a file without examples.
pub fn read_examples(
    path: &Path,
    tokenizer: &RoFormerTokenizer,
    labels: &[String],
    max_length: usize,
) -> Result<Vec<Example>, TrainError> {
    let mut out = Vec::new();
    for (line, raw) in raw_examples(path)? {
        let label =
            label_index(&raw.label, labels).map_err(|reason| bad_line(path, line, reason))?;
        let encoding = tokenizer
            .encode_truncated(&raw.text, raw.text_pair.as_deref(), max_length)
            .map_err(|e| bad_line(path, line, e.to_string()))?;
        out.push(Example {
            ids: encoding.ids,
            type_ids: encoding.type_ids,
            label: label as u32,
        });
    }
    Ok(out)
}

/// Input tensors `[b, longest]` of `examples`, right-padded with `pad`, and their labels.
fn batch_of(
    examples: &[&Example],
    pad: u32,
    device: &Device,
) -> Result<(Tensor, Tensor, Tensor, Vec<u32>), TrainError> {
    let longest = examples
        .iter()
        .map(|e| e.ids.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let (mut ids, mut types, mut mask) = (Vec::new(), Vec::new(), Vec::new());
    for e in examples {
        let n = e.ids.len();
        ids.extend(
            e.ids
                .iter()
                .copied()
                .chain(std::iter::repeat_n(pad, longest - n)),
        );
        types.extend(
            e.type_ids
                .iter()
                .copied()
                .chain(std::iter::repeat_n(0, longest - n)),
        );
        mask.extend((0..longest).map(|i| u32::from(i < n)));
    }
    let shape = (examples.len(), longest);
    Ok((
        Tensor::from_vec(ids, shape, device)?,
        Tensor::from_vec(types, shape, device)?,
        Tensor::from_vec(mask, shape, device)?,
        examples.iter().map(|e| e.label).collect(),
    ))
}

/// Macro-averaged F1 over `classes` labels: the mean over labels of
/// `2 tp / (2 tp + fp + fn)`, leaving out a label absent from both gold and predictions (as
/// scikit-learn's `f1_score(average="macro")` over the labels present). One pass over the
/// pairs ([`ConfusionCounts`]).
pub fn macro_f1(gold: &[u32], predicted: &[u32], classes: usize) -> f64 {
    let mut counts = ConfusionCounts::new(classes);
    for (&g, &p) in gold.iter().zip(predicted) {
        counts.add(g, p);
    }
    counts.macro_f1()
}

/// The settings of a fine-tuning run that its checkpoints record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifyOptions {
    /// Training examples file.
    pub train: PathBuf,
    /// Dev examples file.
    pub eval: Option<PathBuf>,
    /// The labels in index order.
    pub labels: Vec<String>,
    /// Most tokens per example.
    pub max_length: usize,
    /// Examples per micro-batch.
    pub batch_size: usize,
    /// Seed of the example order.
    pub seed: u64,
}

impl Default for ClassifyOptions {
    /// No examples file and no labels (give both; [`labels_of`] reads the labels of an
    /// examples file), no dev examples, at most 128 tokens an example, batches of 16, seed 0.
    fn default() -> Self {
        Self {
            train: PathBuf::new(),
            eval: None,
            labels: Vec::new(),
            max_length: 128,
            batch_size: 16,
            seed: 0,
        }
    }
}

/// The file of the best model's directory that holds its dev metrics.
pub const BEST_EVAL: &str = "eval.json";

/// The (macro-F1, accuracy) of the best model kept in `dir`, if any: where a resumed run
/// starts comparing.
pub fn best_score(dir: &Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(dir.join(BEST_EVAL)).ok()?;
    let m: EvalMetrics = serde_json::from_str(&text).ok()?;
    Some((m.macro_f1.unwrap_or(0.0), m.accuracy))
}

/// Fine-tuning a sequence classifier on trainable variables.
pub struct ClassifyTask<'a> {
    /// The model.
    pub model: &'a RoFormerForSequenceClassification,
    /// Its variables.
    pub params: &'a Params,
    /// Training examples.
    pub train: Vec<Example>,
    /// Dev examples.
    pub eval: Vec<Example>,
    /// The settings.
    pub options: ClassifyOptions,
    /// The pad id.
    pub pad: u32,
    /// Files saved beside the model.
    pub tokenizer_files: Vec<(String, Vec<u8>)>,
    /// The precision of the training products (evaluation runs the f32 inference path).
    pub precision: crate::cpu::Precision,
    /// Where the best model goes (`None`: not kept).
    pub best_dir: Option<PathBuf>,
    /// The best dev macro-F1 so far (then accuracy).
    pub best: Option<(f64, f64)>,
}

impl ClassifyTask<'_> {
    /// The examples of micro-batch `index`: sample `j` is the global sample
    /// `g = index * B + j`, in epoch `g / n` at place `g % n` of that epoch's order (as the MLM
    /// batches).
    fn micro_batch(&self, index: u64) -> Vec<&Example> {
        let n = self.train.len() as u64;
        let b = self.options.batch_size as u64;
        let mut current: Option<(u64, Vec<usize>)> = None;
        let mut out = Vec::with_capacity(self.options.batch_size);
        for j in 0..b {
            let global = index * b + j;
            let (epoch, place) = (global / n, (global % n) as usize);
            if current.as_ref().is_none_or(|(e, _)| *e != epoch) {
                current = Some((epoch, self.epoch_order(epoch)));
            }
            if let Some((_, order)) = &current {
                out.push(&self.train[order[place]]);
            }
        }
        out
    }

    /// The example order of `epoch`: `0..n` shuffled by ChaCha8 seeded with the run's seed, on
    /// the stream `epoch`.
    fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.train.len()).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(self.options.seed);
        rng.set_stream(epoch);
        order.shuffle(&mut rng);
        order
    }
}

impl Task for ClassifyTask<'_> {
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &Dropout,
        _grads: &ParamGrads,
    ) -> Result<(Tensor, usize), TrainError> {
        let examples = self.micro_batch(index);
        let (ids, types, mask, labels) =
            batch_of(&examples, self.pad, self.model.roformer().device())?;
        let tokens = ids.elem_count();
        let out = classification_loss(
            self.model,
            BatchInputs {
                input_ids: &ids,
                token_type_ids: Some(&types),
                attention_mask: Some(&mask),
            },
            &labels,
            Mode::Train {
                dropout,
                precision: self.precision,
            },
        )?;
        Ok((out.loss, tokens))
    }

    /// Accuracy, macro-F1 and the confusion over the dev examples, counted batch by batch in
    /// memory that grows with the labels, not their square
    /// ([`ConfusionCounts`]).
    fn evaluate(&self, step: u64, stop: &AtomicBool) -> Result<Evaluation, TrainError> {
        if self.eval.is_empty() {
            return Ok(Evaluation::NoData);
        }
        let mut counts = ConfusionCounts::new(self.options.labels.len());
        let mut loss_sum = 0.0;
        for chunk in self.eval.chunks(self.options.batch_size.max(1)) {
            if stop.load(Ordering::Relaxed) {
                return Ok(Evaluation::Stopped);
            }
            let refs: Vec<&Example> = chunk.iter().collect();
            let (ids, types, mask, labels) =
                batch_of(&refs, self.pad, self.model.roformer().device())?;
            let out = classification_loss(
                self.model,
                BatchInputs {
                    input_ids: &ids,
                    token_type_ids: Some(&types),
                    attention_mask: Some(&mask),
                },
                &labels,
                Mode::Inference,
            )?;
            loss_sum += f64::from(out.loss.to_scalar::<f32>()?) * out.count as f64;
            for (&g, &p) in labels.iter().zip(&out.predictions) {
                counts.add(g, p);
            }
        }
        let count = counts.items();
        let loss = loss_sum / count as f64;
        Ok(Evaluation::Done(EvalMetrics {
            step,
            loss,
            accuracy: counts.right() as f64 / count as f64,
            perplexity: loss.exp(),
            macro_f1: Some(counts.macro_f1()),
            confusion: Some(counts.report()),
            count,
        }))
    }

    fn model_files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
        let mut files = model_files(
            self.model.roformer().config(),
            &self.model.architecture_name(),
            self.params,
        )?;
        files.extend(self.tokenizer_files.iter().cloned());
        Ok(files)
    }

    fn after_eval(&mut self, metrics: &EvalMetrics) -> Result<(), TrainError> {
        let score = (metrics.macro_f1.unwrap_or(0.0), metrics.accuracy);
        if self.best.is_some_and(|best| best >= score) {
            return Ok(());
        }
        self.best = Some(score);
        if let Some(dir) = &self.best_dir {
            let mut files = self.model_files()?;
            let eval =
                serde_json::to_vec_pretty(metrics).map_err(|e| TrainError::Save(e.to_string()))?;
            files.push((BEST_EVAL.into(), eval));
            write_dir_atomically(dir, &files)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod label_tests {
    use test_support::Scratch;

    use super::*;

    /// `dir/name.jsonl`: one line `{"text": "a", "label": l}` for each of `labels`.
    fn file(dir: &Scratch, name: &str, labels: &[&str]) -> PathBuf {
        let text: String = labels
            .iter()
            .map(|l| format!("{{\"text\": \"a\", \"label\": {l}}}\n"))
            .collect();
        dir.write(&format!("{name}.jsonl"), text)
    }

    #[test]
    fn inferred_labels_are_names_in_order_or_numbers_ascending_never_a_mix() {
        let dir = Scratch::new("roformer-labels", "inferred");
        let names = file(&dir, "names", &["\"pos\"", "\"neg\"", "\"pos\""]);
        assert_eq!(labels_of(&names).unwrap(), ["pos", "neg"]);
        let numbers = file(&dir, "numbers", &["2", "0", "2"]);
        assert_eq!(labels_of(&numbers).unwrap(), ["0", "2"]);
        let mixed = file(&dir, "mixed", &["\"pos\"", "\"neg\"", "1"]);
        let err = labels_of(&mixed).unwrap_err().to_string();
        assert!(
            err.contains(":3:") && err.contains("line 1 is a name"),
            "{err}"
        );
        let negative = file(&dir, "negative", &["-1"]);
        assert!(labels_of(&negative).is_err());
    }

    #[test]
    fn a_number_is_a_label_name_never_an_index_into_names() {
        let names = ["pos".to_string(), "neg".to_string()];
        let value = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert_eq!(label_index(&value("\"neg\""), &names), Ok(1));
        let err = label_index(&value("1"), &names).unwrap_err();
        assert!(
            err.contains("is a number, but the labels are names"),
            "{err}"
        );
        // Numbers as names: "1" is the class named 1, wherever it stands in the list.
        let numbers = ["1".to_string(), "0".to_string()];
        assert_eq!(label_index(&value("1"), &numbers), Ok(0));
        assert_eq!(label_index(&value("\"0\""), &numbers), Ok(1));
        assert!(label_index(&value("2"), &numbers)
            .unwrap_err()
            .contains("not one of"));
        assert!(label_index(&value("null"), &numbers).is_err());
    }
}
