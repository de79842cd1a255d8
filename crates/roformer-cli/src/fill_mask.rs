//! `roformer fill-mask`: the most likely tokens behind each mask token of a text.
//!
//! The text is encoded as `[CLS] text [SEP]` by the checkpoint's tokenizer, run through
//! [`RoFormerForMaskedLM`], and at each mask position the logits `z` over the vocabulary become
//! probabilities `p_i = exp(z_i - max z) / sum_j exp(z_j - max z)` (in f64, so no exponential
//! overflows); the `k` highest are printed, each with its `sequence`: the text with that mask
//! replaced by the candidate token (a `##` continuation without its `##`), every other mask
//! left as written, as transformers' fill-mask pipeline shows it (there decoded from the ids,
//! here cut from the text, so spacing and case stay the user's).
//!
//! A text longer than `--max-length` is cut (see [`truncation`]); a mask token that the cut
//! would drop is an error, not a silently missing prediction. Logits that are not finite
//! (weights that overflow f32 on the text) are an error naming the mask's token.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, ensure};
use candle_core::{DType, Device, Tensor};
use roformer::{HeadModel, RoFormerForMaskedLM};

use crate::precision::PrecisionArg;
use crate::truncation::{self, Cut, Limit};
use crate::{default_model, finite, json};
use serde::Serialize;

/// Arguments of `roformer fill-mask`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint directory: config.json, model.safetensors (or pytorch_model.bin) with a
    /// masked-LM head, vocab.txt and, if present, tokenizer_config.json [default: the
    /// built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// How many tokens to list per mask.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Cut the text to at most N tokens, [CLS] and [SEP] included, and say so on stderr
    /// [default: the checkpoint's max_position_embeddings]. 0 keeps every token: rotary
    /// positions have no length limit, but the cost grows with the square of the length. A
    /// mask token past the cut is an error.
    #[arg(long, value_name = "N", value_parser = truncation::parse)]
    max_length: Option<u32>,
    /// One JSON object on one line: {"text", "masks": [{"position", "predictions": [{"id",
    /// "token", "probability", "sequence"}]}], "truncated": null or {"tokens", "kept"}};
    /// position is the token index in [CLS] text [SEP], sequence the text with that mask
    /// filled by the token.
    #[arg(long)]
    json: bool,
    /// The text, with one or more mask tokens written as the tokenizer's mask token
    /// (usually [MASK]).
    #[arg(value_name = "TEXT")]
    text: String,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// One candidate token for a mask.
#[derive(Debug, Serialize)]
struct Prediction {
    id: u32,
    /// `None` for an id that has no token in vocab.txt (a vocabulary smaller than the model's).
    token: Option<String>,
    probability: f64,
    /// The text with this mask replaced by `token` (other masks kept); `None` with `token`.
    sequence: Option<String>,
}

/// The candidates for the mask at token index `position`, most likely first.
#[derive(Debug, Serialize)]
struct Mask {
    position: usize,
    predictions: Vec<Prediction>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    text: &'a str,
    masks: Vec<Mask>,
    /// What `--max-length` cut, if anything.
    truncated: Option<Cut>,
}

/// Predicts the tokens behind each mask of the text and prints them.
pub fn run(args: Args) -> anyhow::Result<()> {
    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let mask_id = tokenizer.mask_token_id()?;
    let dir = default_model::model_dir(args.model.as_deref())?;
    let limit = Limit::new(args.max_length, dir.config.max_position_embeddings);
    let limited = tokenizer.encode_limited(&args.text, limit.tokens())?;
    let was_cut = limited.was_cut();
    let whole_masks = if was_cut {
        tokenizer
            .encode(&args.text)
            .ids
            .iter()
            .filter(|&&id| id == mask_id)
            .count()
    } else {
        0
    };
    let encoding = limited.encoding;
    let positions: Vec<usize> = (0..encoding.len())
        .filter(|&i| encoding.ids[i] == mask_id)
        .collect();
    if positions.is_empty() && whole_masks == 0 {
        bail!(
            "the text has no mask token: write {} where a token should be predicted",
            tokenizer.config().mask_token
        );
    }
    if positions.len() < whole_masks {
        bail!(
            "{} of the text's {whole_masks} mask tokens lie past its first {} tokens, where \
             the text of {} tokens is cut ({limit}): pass a larger --max-length, or 0 to keep \
             every token",
            whole_masks - positions.len(),
            encoding.len(),
            limited.untruncated_len,
        );
    }
    let truncated = was_cut.then_some(Cut {
        tokens: limited.untruncated_len,
        kept: encoding.len(),
    });
    if let Some(cut) = truncated {
        truncation::note(&[("the text".to_owned(), cut)], 1, limit);
    }

    ensure!(
        dir.checkpoint.has_mlm_head(),
        "{} has no masked-LM head (no cls.predictions.* tensors): fill-mask needs a checkpoint \
         saved from RoFormerForMaskedLM",
        dir.checkpoint.path().display()
    );
    let mut model = dir
        .load::<RoFormerForMaskedLM>(DType::F32, &Device::Cpu)?
        .model;
    model.set_precision(args.precision.resolve())?;
    let ids = Tensor::from_slice(&encoding.ids, (1, encoding.len()), &Device::Cpu)?;
    let logits = model.forward(&ids, None, None, None)?.logits.squeeze(0)?; // [seq, vocab]

    let mut masks = Vec::with_capacity(positions.len());
    for position in positions {
        let span = encoding.offsets[position];
        let row: Vec<f32> = logits.get(position)?.to_dtype(DType::F32)?.to_vec1()?;
        if let Some((id, value)) = finite::first_non_finite(&row) {
            bail!(
                "the model's logits at token {position} (a mask) are not finite (id {id}: \
                 {value}): the checkpoint's weights overflow f32 on this text"
            );
        }
        let predictions = top_k(&softmax(&row), args.top_k as usize)
            .into_iter()
            .map(|(id, probability)| {
                let token = tokenizer.id_to_token(id);
                Prediction {
                    id,
                    token: token.map(str::to_owned),
                    probability,
                    sequence: token.map(|t| fill(&args.text, span, t)),
                }
            })
            .collect();
        masks.push(Mask {
            position,
            predictions,
        });
    }
    let report = Report {
        text: &args.text,
        masks,
        truncated,
    };

    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", json::to_string(&report)?)?;
    } else {
        print_table(&mut out, &report)?;
    }
    out.flush()?;
    Ok(())
}

/// `softmax(z)_i = exp(z_i - m) / sum_j exp(z_j - m)` with `m = max z`, in f64: every exponent
/// is at most 0, so nothing overflows and the largest term is exactly 1.
fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&z| f64::from(z))
        .fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|&z| (f64::from(z) - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// The `k` largest probabilities with their ids, largest first (ties: lower id first).
fn top_k(probs: &[f64], k: usize) -> Vec<(u32, f64)> {
    let mut ranked: Vec<(u32, f64)> = probs
        .iter()
        .enumerate()
        .map(|(i, &p)| (i as u32, p))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(k);
    ranked
}

/// `text` with its chars `start..end` (a mask's offsets) replaced by `token`, whose `##` (a
/// WordPiece continuation) is dropped: decoding glues a continuation to what precedes it.
fn fill(text: &str, (start, end): (usize, usize), token: &str) -> String {
    let byte = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(b, _)| b)
    };
    let (start, end) = (byte(start), byte(end));
    let piece = token.strip_prefix("##").unwrap_or(token);
    [&text[..start], piece, &text[end..]].concat()
}

/// Columns `s` takes in a terminal, roughly: 2 for a wide (CJK, full-width) char, else 1.
fn width(s: &str) -> usize {
    s.chars()
        .map(|c| if (c as u32) < 0x1100 { 1 } else { 2 })
        .sum()
}

/// One block per mask: rank, probability, token and the filled text.
fn print_table(out: &mut impl Write, report: &Report<'_>) -> anyhow::Result<()> {
    const NO_TOKEN: &str = "(no token in vocab.txt)";
    let n = report.masks.len();
    for (i, mask) in report.masks.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "mask {} of {n} (token {}):", i + 1, mask.position)?;
        let column = mask
            .predictions
            .iter()
            .map(|p| width(p.token.as_deref().unwrap_or(NO_TOKEN)))
            .max()
            .unwrap_or(0);
        for (rank, p) in mask.predictions.iter().enumerate() {
            let token = p.token.as_deref().unwrap_or(NO_TOKEN);
            let pad = " ".repeat(column - width(token));
            let sequence = p.sequence.as_deref().unwrap_or("-");
            writeln!(
                out,
                "{:>4}  {:.6}  {token}{pad}  {sequence}",
                rank + 1,
                p.probability,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_is_stable_and_normalised() {
        // exp(1000) overflows f64; shifted by the max it does not.
        let p = softmax(&[1000.0, 999.0, -1000.0]);
        let e = (-1f64).exp();
        assert!((p[0] - 1.0 / (1.0 + e)).abs() < 1e-15);
        assert!((p[1] - e / (1.0 + e)).abs() < 1e-15);
        assert!(p[2] >= 0.0 && p[2] < 1e-300);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    }

    #[test]
    fn fill_replaces_the_char_range_of_one_mask() {
        let text = "今天[MASK]气，在[MASK]京";
        assert_eq!(fill(text, (2, 8), "天"), "今天天气，在[MASK]京");
        assert_eq!(fill(text, (11, 17), "北"), "今天[MASK]气，在北京");
        assert_eq!(fill(text, (11, 17), "##ing"), "今天[MASK]气，在ing京");
        assert_eq!(fill("[MASK]", (0, 6), "月"), "月");
    }

    #[test]
    fn widths_count_wide_chars_twice() {
        assert_eq!(width("月"), 2);
        assert_eq!(width("[UNK]"), 5);
        assert_eq!(width("##月a"), 5);
    }

    #[test]
    fn top_k_sorts_descending_and_breaks_ties_by_id() {
        let ranked = top_k(&[0.1, 0.3, 0.3, 0.05, 0.25], 3);
        assert_eq!(ranked, vec![(1, 0.3), (2, 0.3), (4, 0.25)]);
        assert_eq!(top_k(&[0.5, 0.5], 10).len(), 2);
    }
}
