//! Sequence classification: the logits of a classifier checkpoint for each text (or pair), and
//! the label names of its config.

use candle_core::DType;
use rotary::finite::{first_non_finite, NonFinite};

use super::batch::Padded;
use super::error::PipelineError;
use crate::{Encoding, HeadModel, RoFormerConfig, RoFormerForSequenceClassification};

/// The logits `[num_labels]` of each text of `batch` (padded with `pad_id`), in batch order;
/// turn them into probabilities with [`softmax`](super::softmax).
///
/// # Errors
/// [`PipelineError::NonFinite`] when a text's logits are not finite (`token` 0: the head reads
/// the first token); model errors otherwise.
pub fn classify(
    model: &RoFormerForSequenceClassification,
    batch: &[&Encoding],
    pad_id: u32,
) -> Result<Vec<Vec<f32>>, PipelineError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let padded = Padded::new(batch, pad_id, model.roformer().device())?;
    let logits = model
        .forward(&padded.ids, Some(&padded.types), padded.model_mask(), None)?
        .logits
        .to_dtype(DType::F32)?
        .to_vec2::<f32>()?; // [b, num_labels]
    for (text, row) in logits.iter().enumerate() {
        if let Some(NonFinite { index, value }) = first_non_finite(row) {
            return Err(PipelineError::NonFinite {
                text,
                what: "logits",
                token: 0,
                index,
                value,
            });
        }
    }
    Ok(logits)
}

/// The name of each label `0..num_labels`: `id2label`'s, or `LABEL_i` where it has none (as
/// transformers names them).
pub fn labels(config: &RoFormerConfig) -> Vec<String> {
    (0..config.num_labels)
        .map(|i| {
            config
                .id2label
                .get(&i)
                .cloned()
                .unwrap_or_else(|| format!("LABEL_{i}"))
        })
        .collect()
}
