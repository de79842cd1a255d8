//! The training losses: masked-LM cross entropy over the labelled tokens, and sequence
//! classification cross entropy.

use candle_core::{Tensor, D};

use crate::autograd::cross_entropy::{cross_entropy as cross_entropy_fast, cross_entropy_slow};
use crate::cpu::tensor::all_f32_on_cpu;
use crate::error::{ModelError, Result};
use crate::mode::Mode;
use crate::plan::{Kernels, Plan};
use crate::tasks::{HeadModel, RoFormerForMaskedLM, RoFormerForSequenceClassification};

/// The label that marks a token as not predicted (PyTorch's `ignore_index`).
pub const IGNORE: i64 = -100;

/// A loss and the counts of its accuracy.
#[derive(Debug, Clone)]
pub struct LossOutput {
    /// The mean cross entropy, a differentiable scalar (in training mode).
    pub loss: Tensor,
    /// How many predictions it averages.
    pub count: usize,
    /// How many of them have the label as their top logit.
    pub correct: usize,
    /// The arg-max prediction of each counted item, in order.
    pub predictions: Vec<u32>,
}

/// Model inputs of one batch, row-major `[batch, seq]`.
#[derive(Debug, Clone, Copy)]
pub struct BatchInputs<'a> {
    /// Token ids.
    pub input_ids: &'a Tensor,
    /// Token types (`None`: all 0).
    pub token_type_ids: Option<&'a Tensor>,
    /// 1 for tokens, 0 for padding (`None`: all 1).
    pub attention_mask: Option<&'a Tensor>,
}

/// `-mean_i log softmax(logits_i)[target_i]` over rows `[n, classes]`, with the arg-max
/// accuracy counts.
///
/// # Errors
/// Candle errors only.
pub fn cross_entropy(logits: &Tensor, targets: &[u32]) -> Result<LossOutput> {
    cross_entropy_with(logits, targets, all_f32_on_cpu(&[logits]))
}

/// [`cross_entropy`], through the fused op when `fused` (f32 logits on the CPU; a
/// [`Kernels::Cpu`] plan), of candle's ops otherwise.
fn cross_entropy_with(logits: &Tensor, targets: &[u32], fused: bool) -> Result<LossOutput> {
    // The fused op computes the loss and its backward in one pass each, with the arg-max.
    let (loss, predictions) = if fused {
        cross_entropy_fast(logits, targets)?
    } else {
        cross_entropy_slow(logits, targets)?
    };
    let correct = predictions
        .iter()
        .zip(targets)
        .filter(|(p, t)| p == t)
        .count();
    Ok(LossOutput {
        loss,
        count: targets.len(),
        correct,
        predictions,
    })
}

/// The masked-LM loss of `model` on a batch: cross entropy of the MLM logits against
/// `labels` (`[batch * seq]`, the original id of each predicted token, [`IGNORE`] elsewhere),
/// averaged over the predicted tokens, as transformers' `RoFormerForMaskedLM(labels=...)`.
/// The head runs only on the predicted tokens' hidden states (same loss, less work).
///
/// # Errors
/// [`ModelError::Input`] when `labels` has the wrong length, an id out of the vocabulary, or
/// no predicted token; the errors of the forward pass.
pub fn mlm_loss(
    model: &RoFormerForMaskedLM,
    inputs: BatchInputs<'_>,
    labels: &[i64],
    mode: Mode<'_>,
) -> Result<LossOutput> {
    let roformer = model.roformer();
    let batch = roformer.validate(
        inputs.input_ids,
        inputs.token_type_ids,
        inputs.attention_mask,
        None,
    )?;
    if labels.len() != batch.batch * batch.seq {
        return Err(ModelError::Input(format!(
            "{} labels for {} tokens",
            labels.len(),
            batch.batch * batch.seq
        )));
    }
    let vocab = roformer.config().vocab_size;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (i, &l) in labels.iter().enumerate() {
        if l == IGNORE {
            continue;
        }
        if l < 0 || l as u64 >= vocab as u64 {
            return Err(ModelError::Input(format!(
                "label {l} of token {i} is outside the vocabulary (0..{vocab})"
            )));
        }
        rows.push(i as u32);
        targets.push(l as u32);
    }
    if rows.is_empty() {
        return Err(ModelError::Input(
            "the batch has no predicted token (every label is -100)".into(),
        ));
    }
    let plan = roformer.plan(mode);
    let hidden = roformer.forward_batch(&batch, plan)?; // [b, t, h]
    let h = hidden.dim(D::Minus1)?;
    let rows = Tensor::from_vec(rows, targets.len(), hidden.device())?;
    let picked = hidden
        .reshape((batch.batch * batch.seq, h))?
        .index_select(&rows, 0)?; // [n, h]
    let logits = model.head().forward(&picked, plan)?; // [n, vocab]
    cross_entropy_with(&logits, &targets, cpu_kernels(plan))
}

/// The sequence classification loss: cross entropy of the logits `[batch, num_labels]`
/// against one label per sequence, as `RoFormerForSequenceClassification(labels=...)` with
/// more than one label.
///
/// # Errors
/// [`ModelError::Input`] for a label count that is not the batch size or a label out of
/// range; the errors of the forward pass.
pub fn classification_loss(
    model: &RoFormerForSequenceClassification,
    inputs: BatchInputs<'_>,
    labels: &[u32],
    mode: Mode<'_>,
) -> Result<LossOutput> {
    let num_labels = model.roformer().config().num_labels;
    if let Some(l) = labels.iter().find(|&&l| l as usize >= num_labels) {
        return Err(ModelError::Input(format!(
            "label {l} is out of range: the model has {num_labels} labels"
        )));
    }
    let plan = model.roformer().plan(mode);
    let out = model.forward_mode(
        inputs.input_ids,
        inputs.token_type_ids,
        inputs.attention_mask,
        None,
        plan,
    )?;
    if out.logits.dim(0)? != labels.len() {
        return Err(ModelError::Input(format!(
            "{} labels for {} sequences",
            labels.len(),
            out.logits.dim(0)?
        )));
    }
    cross_entropy_with(&out.logits, labels, cpu_kernels(plan))
}

/// Whether `plan` runs the CPU layer's kernels.
fn cpu_kernels(plan: Plan<'_>) -> bool {
    matches!(plan.kernels(), Kernels::Cpu(_))
}
