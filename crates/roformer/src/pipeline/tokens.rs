//! Per-token outputs: the last hidden state of every token of each text (TEI's `/embed_all`),
//! and its SPLADE sparse vector over the vocabulary (TEI's `/embed_sparse`).
//!
//! SPLADE, with `z[i]` the masked-LM head's logits `[vocab]` at token `i` of `[CLS] text [SEP]`
//! (padding excluded): `w[v] = max_i log(1 + relu(z[i][v]))`. Since `log(1 + relu(x))` grows
//! with `x`, this is `log(1 + relu(max_i z[i][v]))`: the head runs on a block of tokens at a
//! time and keeps a running maximum, so memory is `[block, vocab]`, not `[tokens, vocab]`.
//! The answer lists the non-zero entries `(v, w[v])` by increasing `v`.

use candle_core::DType;
use rotary::finite::{first_non_finite, NonFinite};

use super::batch::Padded;
use super::error::PipelineError;
use crate::mode::Mode;
use crate::{Encoding, HeadModel, RoFormerForMaskedLM, RoFormerModel};

/// Tokens whose logits the SPLADE head computes at once (`[block, vocab]` f32 at a time).
const SPLADE_BLOCK: usize = 64;

/// The last hidden state of every token of each text of `batch` (padded with `pad_id`), in
/// batch order: per text `[len, hidden]`, `[CLS]` and `[SEP]` included, padding excluded.
///
/// # Errors
/// [`PipelineError::NonFinite`] naming the first text, token and dimension whose state is not
/// finite; model errors otherwise.
pub fn token_states(
    model: &RoFormerModel,
    batch: &[&Encoding],
    pad_id: u32,
) -> Result<Vec<Vec<Vec<f32>>>, PipelineError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let padded = Padded::new(batch, pad_id, model.device())?;
    let hidden = model.forward(&padded.ids, Some(&padded.types), padded.model_mask(), None)?; // [b, t, hidden]
    let mut out = Vec::with_capacity(batch.len());
    for (text, encoding) in batch.iter().enumerate() {
        let states = hidden
            .get(text)?
            .narrow(0, 0, encoding.len())?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?; // [len, hidden]
        for (token, row) in states.iter().enumerate() {
            if let Some(NonFinite { index, value }) = first_non_finite(row) {
                return Err(PipelineError::NonFinite {
                    text,
                    what: "hidden states",
                    token,
                    index,
                    value,
                });
            }
        }
        out.push(states);
    }
    Ok(out)
}

/// The SPLADE vector of each text of `batch` (padded with `pad_id`; see the module doc): per
/// text, the `(vocabulary id, weight)` of every non-zero weight, by increasing id.
///
/// # Errors
/// [`PipelineError::NonFinite`] when a token's logits are not finite; model errors otherwise.
pub fn splade(
    model: &RoFormerForMaskedLM,
    batch: &[&Encoding],
    pad_id: u32,
) -> Result<Vec<Vec<(u32, f32)>>, PipelineError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let encoder = model.roformer();
    let padded = Padded::new(batch, pad_id, encoder.device())?;
    let hidden = encoder.forward(&padded.ids, Some(&padded.types), padded.model_mask(), None)?; // [b, t, hidden]
    let plan = encoder.plan(Mode::Inference);
    let mut out = Vec::with_capacity(batch.len());
    for (text, encoding) in batch.iter().enumerate() {
        let states = hidden.get(text)?; // [t, hidden]
        let mut max: Option<Vec<f32>> = None;
        for start in (0..encoding.len()).step_by(SPLADE_BLOCK) {
            let rows = SPLADE_BLOCK.min(encoding.len() - start);
            let block = states.narrow(0, start, rows)?.unsqueeze(0)?; // [1, rows, hidden]
            let logits = model
                .head_forward(&block, plan)?
                .squeeze(0)?
                .to_dtype(DType::F32)?
                .to_vec2::<f32>()?; // [rows, vocab]
            for (i, row) in logits.into_iter().enumerate() {
                if let Some(NonFinite { index, value }) = first_non_finite(&row) {
                    return Err(PipelineError::NonFinite {
                        text,
                        what: "logits",
                        token: start + i,
                        index,
                        value,
                    });
                }
                match &mut max {
                    None => max = Some(row),
                    Some(m) => m.iter_mut().zip(&row).for_each(|(m, &z)| *m = m.max(z)),
                }
            }
        }
        out.push(sparse(&max.unwrap_or_default()));
    }
    Ok(out)
}

/// `(v, log(1 + relu(z[v])))` for every `v` where it is above 0.
fn sparse(max_logits: &[f32]) -> Vec<(u32, f32)> {
    max_logits
        .iter()
        .enumerate()
        .filter(|(_, &z)| z > 0.0)
        .map(|(v, &z)| (v as u32, z.ln_1p()))
        .collect()
}

/// The SPLADE weights as the formula states them, token by token, for the test: `w[v] = max_i
/// log(1 + relu(z[i][v]))`.
#[cfg(test)]
fn splade_slow(logits: &[Vec<f32>]) -> Vec<(u32, f32)> {
    let vocab = logits.first().map_or(0, Vec::len);
    (0..vocab)
        .map(|v| {
            let w = logits
                .iter()
                .map(|row| row[v].max(0.0).ln_1p())
                .fold(0f32, f32::max);
            (v as u32, w)
        })
        .filter(|&(_, w)| w != 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_maximum_equals_the_formula() {
        let logits: Vec<Vec<f32>> = vec![
            vec![-1.0, 0.5, 0.0, 3.0, -0.0],
            vec![2.0, -4.0, 0.0, 1.0, -2.0],
            vec![0.25, 0.75, -1.0, -3.0, -1.0],
        ];
        let mut max = logits[0].clone();
        for row in &logits[1..] {
            max.iter_mut().zip(row).for_each(|(m, &z)| *m = m.max(z));
        }
        let fast = sparse(&max);
        assert_eq!(fast, splade_slow(&logits));
        assert_eq!(
            fast.iter().map(|&(v, _)| v).collect::<Vec<_>>(),
            [0, 1, 3],
            "only the non-zero weights, by id"
        );
        assert_eq!(fast[2].1, 3f32.ln_1p());
    }
}
