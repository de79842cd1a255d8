//! The model's side: ranks of the masked characters among its logits.

use anyhow::bail;
use candle_core::{DType, Device, Tensor};
use roformer::{HeadModel, RoFormerForMaskedLM};

use super::Masked;
use crate::finite;

/// For each text of the batch and each of its targets, the rank (0-based, when below 5) of
/// the target among the model's logits at its position (ties broken towards lower ids).
///
/// # Errors
/// A failed forward pass; logits that are not finite at a mask (named by text and token).
pub(super) fn ranks(
    model: &RoFormerForMaskedLM,
    batch: &[Masked],
    pad: u32,
) -> anyhow::Result<Vec<Vec<Option<usize>>>> {
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
    let mut picked = picked.into_iter();
    let mut out = Vec::with_capacity(b);
    for d in batch {
        let mut ranks = Vec::with_capacity(d.targets.len());
        for &(position, target) in &d.targets {
            let Some(row) = picked.next() else {
                bail!("fewer logit rows than masks");
            };
            if let Some((id, value)) = finite::first_non_finite(&row) {
                bail!(
                    "{}: the model's logits at token {position} are not finite (id {id}: \
                     {value}): the checkpoint's weights overflow f32 on this text",
                    d.name
                );
            }
            let score = row
                .get(target as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY);
            // Rank = how many tokens score higher (ties broken towards lower ids).
            let higher = row
                .iter()
                .enumerate()
                .filter(|&(j, &z)| z > score || (z == score && (j as u32) < target))
                .take(5)
                .count();
            ranks.push((higher < 5).then_some(higher));
        }
        out.push(ranks);
    }
    Ok(out)
}
