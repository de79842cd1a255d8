//! A batch of encodings as model inputs.

use candle_core::{Device, Tensor};

use crate::tokenizer::Encoding;

/// A batch as model inputs: `ids` and `types` `[b, t]` padded with `pad_id` (type 0), and the
/// attention mask `[b, t]` (f32, 1 for tokens, 0 for padding).
pub(crate) struct Padded {
    pub ids: Tensor,
    pub types: Tensor,
    pub mask: Tensor,
    /// Whether any text is shorter than `t`.
    pub padded: bool,
}

impl Padded {
    /// Pads `batch` (at least one encoding) to its longest encoding.
    pub(crate) fn new(
        batch: &[&Encoding],
        pad_id: u32,
        device: &Device,
    ) -> candle_core::Result<Padded> {
        let b = batch.len();
        let t = batch.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * t);
        let mut types = Vec::with_capacity(b * t);
        let mut mask = Vec::with_capacity(b * t);
        for e in batch {
            let missing = t - e.len();
            ids.extend_from_slice(&e.ids);
            ids.extend(std::iter::repeat_n(pad_id, missing));
            types.extend_from_slice(&e.type_ids);
            types.extend(std::iter::repeat_n(0, missing));
            mask.extend(e.attention_mask.iter().map(|&m| m as f32));
            mask.extend(std::iter::repeat_n(0f32, missing));
        }
        let padded = batch.iter().any(|e| e.len() < t);
        Ok(Padded {
            ids: Tensor::from_vec(ids, (b, t), device)?,
            types: Tensor::from_vec(types, (b, t), device)?,
            mask: Tensor::from_vec(mask, (b, t), device)?,
            padded,
        })
    }

    /// The attention mask to give the model: none when nothing is padded (the same result,
    /// without the masking work).
    pub(crate) fn model_mask(&self) -> Option<&Tensor> {
        self.padded.then_some(&self.mask)
    }
}
