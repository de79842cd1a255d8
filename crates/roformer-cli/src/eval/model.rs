//! The model's side: its logits at the masks, and the rank of each target among them.

use anyhow::{bail, ensure};
use candle_core::{DType, Device, Tensor};
use roformer::{HeadModel, RoFormerForMaskedLM};
use rotary::finite::{first_non_finite, NonFinite};

use super::Masked;

/// The model's logits at every mask of the batch, in order (text by text, each text's
/// targets in order): one row of `vocab` logits per mask.
///
/// # Errors
/// A failed forward pass; logits that are not finite at a mask (named by text and token).
pub(super) fn mask_logits(
    model: &RoFormerForMaskedLM,
    batch: &[Masked],
    pad: u32,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let device = Device::Cpu;
    let t = batch.iter().map(|d| d.ids.len()).max().unwrap_or(0);
    let b = batch.len();
    let mut ids = Vec::with_capacity(b * t);
    let mut mask = Vec::with_capacity(b * t);
    let mut rows = Vec::new();
    for (i, d) in batch.iter().enumerate() {
        ids.extend_from_slice(&d.ids);
        ids.extend(std::iter::repeat_n(pad, t - d.ids.len()));
        mask.extend(std::iter::repeat_n(1f32, d.ids.len()));
        mask.extend(std::iter::repeat_n(0f32, t - d.ids.len()));
        rows.extend(d.targets.iter().map(|&(p, _)| (i * t + p) as u32));
    }
    let ids = Tensor::from_vec(ids, (b, t), &device)?;
    let mask = Tensor::from_vec(mask, (b, t), &device)?;
    let logits = model.forward(&ids, None, Some(&mask), None)?.logits; // [b, t, vocab]
    let vocab = logits.dim(2)?;
    let n_rows = rows.len();
    let picked = logits
        .reshape((b * t, vocab))?
        .index_select(&Tensor::from_vec(rows, n_rows, &device)?, 0)?
        .to_dtype(DType::F32)?
        .to_vec2::<f32>()?;
    ensure!(picked.len() == n_rows, "fewer logit rows than masks");
    let positions = batch
        .iter()
        .flat_map(|d| d.targets.iter().map(move |&(p, _)| (d, p)));
    for (row, (d, position)) in picked.iter().zip(positions) {
        if let Some(NonFinite { index: id, value }) = first_non_finite(row) {
            bail!(
                "{}: the model's logits at token {position} are not finite (id {id}: \
                 {value}): the checkpoint's weights overflow f32 on this text",
                d.name
            );
        }
    }
    Ok(picked)
}

/// The rank (0-based, when below 5) of `target` among `row`'s logits: how many tokens score
/// higher, ties broken towards lower ids.
pub(super) fn rank(row: &[f32], target: u32) -> Option<usize> {
    let score = row
        .get(target as usize)
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    let higher = row
        .iter()
        .enumerate()
        .filter(|&(j, &z)| z > score || (z == score && (j as u32) < target))
        .take(5)
        .count();
    (higher < 5).then_some(higher)
}

/// The best-scoring token of a row (the lowest id among equal best scores), `None` for an
/// empty row.
pub(super) fn top1(row: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (j, &z) in row.iter().enumerate() {
        if best.is_none_or(|(_, b)| z > b) {
            best = Some((j, z));
        }
    }
    best.map(|(j, _)| j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_counts_higher_scores_and_breaks_ties_towards_lower_ids() {
        let row = [0.5, 2.0, 1.0, 2.0, -1.0];
        assert_eq!(rank(&row, 1), Some(0));
        assert_eq!(rank(&row, 3), Some(1)); // tie with id 1, which is lower
        assert_eq!(rank(&row, 2), Some(2));
        assert_eq!(rank(&row, 4), Some(4));
        assert_eq!(rank(&[0.0; 8], 7), None); // seven ties below it
        assert_eq!(rank(&row, 99), None); // outside the vocabulary
    }

    #[test]
    fn top1_is_the_lowest_id_among_the_best() {
        assert_eq!(top1(&[0.5, 2.0, 1.0, 2.0]), Some(1));
        assert_eq!(top1(&[-3.0]), Some(0));
        assert_eq!(top1(&[]), None);
    }
}
