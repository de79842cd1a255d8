//! Fill-mask: the most likely tokens behind each mask token of a text.
//!
//! Each text runs through the encoder as `[CLS] text [SEP]`; the masked-LM head runs only on
//! the hidden states of the mask tokens (one `[masks, hidden]` product instead of one per
//! token), and each mask's logits `z` over the vocabulary become probabilities by
//! [`softmax`](super::softmax) (in f64); the `k` highest are kept, ties broken by the lower id.

use candle_core::{DType, Tensor};
use rotary::finite::{first_non_finite, NonFinite};

use super::batch::Padded;
use super::error::PipelineError;
use super::scores;
use crate::mode::Mode;
use crate::{Encoding, HeadModel, RoFormerForMaskedLM};

/// One candidate token for a mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The token's id.
    pub id: u32,
    /// Its probability.
    pub score: f64,
}

/// The candidates for the mask at token index `position` of `[CLS] text [SEP]`, most likely
/// first.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskCandidates {
    /// The mask's token index.
    pub position: usize,
    /// At most `top_k` candidates, by descending probability.
    pub candidates: Vec<Candidate>,
}

/// The `top_k` candidates of every mask token (id `mask_id`) of every text of `batch`, padded
/// with `pad_id`: one list per text, one entry per mask in text order (empty for a text
/// without a mask).
///
/// # Errors
/// [`PipelineError::NonFinite`] when a mask's logits are not finite; model errors otherwise.
pub fn fill_mask(
    model: &RoFormerForMaskedLM,
    batch: &[&Encoding],
    mask_id: u32,
    pad_id: u32,
    top_k: usize,
) -> Result<Vec<Vec<MaskCandidates>>, PipelineError> {
    let positions: Vec<Vec<usize>> = batch
        .iter()
        .map(|e| (0..e.len()).filter(|&i| e.ids[i] == mask_id).collect())
        .collect();
    let masks: usize = positions.iter().map(Vec::len).sum();
    if masks == 0 {
        return Ok(vec![Vec::new(); batch.len()]);
    }
    let device = model.roformer().device();
    let padded = Padded::new(batch, pad_id, device)?;
    let hidden =
        model
            .roformer()
            .forward(&padded.ids, Some(&padded.types), padded.model_mask(), None)?; // [b, t, hidden]
    let (b, t, h) = hidden.dims3()?;
    let rows: Vec<u32> = positions
        .iter()
        .enumerate()
        .flat_map(|(i, ps)| ps.iter().map(move |&p| (i * t + p) as u32))
        .collect();
    let rows = Tensor::from_vec(rows, masks, device)?;
    let picked = hidden.reshape((b * t, h))?.index_select(&rows, 0)?; // [masks, hidden]
    let logits = model
        .head_forward(
            &picked.unsqueeze(0)?,
            model.roformer().plan(Mode::Inference),
        )?
        .squeeze(0)?
        .to_dtype(DType::F32)?
        .to_vec2::<f32>()?; // [masks, vocab]
    let mut logits = logits.into_iter();
    let mut out = Vec::with_capacity(batch.len());
    for (text, ps) in positions.iter().enumerate() {
        let mut per_text = Vec::with_capacity(ps.len());
        for &position in ps {
            let row = logits.next().unwrap_or_default();
            if let Some(NonFinite { index, value }) = first_non_finite(&row) {
                return Err(PipelineError::NonFinite {
                    text,
                    what: "logits",
                    token: position,
                    index,
                    value,
                });
            }
            let candidates = scores::top_k(&scores::softmax(&row), top_k)
                .into_iter()
                .map(|(id, score)| Candidate { id, score })
                .collect();
            per_text.push(MaskCandidates {
                position,
                candidates,
            });
        }
        out.push(per_text);
    }
    Ok(out)
}

/// `text` with its chars `start..end` (a mask's offsets, in chars as
/// [`Encoding::offsets`]) replaced by `token`, whose `##` (a WordPiece continuation) is
/// dropped: decoding glues a continuation to what precedes it. Offsets past the text clamp to
/// its end.
pub fn fill(text: &str, (start, end): (usize, usize), token: &str) -> String {
    let byte = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(b, _)| b)
    };
    let (start, end) = (byte(start), byte(end).max(byte(start)));
    let piece = token.strip_prefix("##").unwrap_or(token);
    [&text[..start], piece, &text[end..]].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_the_char_range_of_one_mask() {
        let text = "今天[MASK]气，在[MASK]京";
        assert_eq!(fill(text, (2, 8), "天"), "今天天气，在[MASK]京");
        assert_eq!(fill(text, (11, 17), "北"), "今天[MASK]气，在北京");
        assert_eq!(fill(text, (11, 17), "##ing"), "今天[MASK]气，在ing京");
        assert_eq!(fill("[MASK]", (0, 6), "月"), "月");
        // Out-of-range or reversed offsets never panic.
        assert_eq!(fill("ab", (5, 9), "x"), "abx");
        assert_eq!(fill("ab", (1, 0), "x"), "axb");
    }
}
