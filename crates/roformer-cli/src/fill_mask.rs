//! `roformer fill-mask`: the most likely tokens behind each mask token of a text.
//!
//! The text is encoded as `[CLS] text [SEP]` by the checkpoint's tokenizer, run through the
//! library's [`roformer::pipeline::MaskedLm`], and at each mask position the logits `z`
//! over the vocabulary become probabilities `p_i = exp(z_i - max z) / sum_j exp(z_j - max z)`
//! (in f64, so no exponential overflows); the `k` highest are printed, each with its
//! `sequence`: the text with that mask replaced by the candidate token (a `##` continuation
//! without its `##`), every other mask left as written, as transformers' fill-mask pipeline shows it (there decoded from the ids,
//! here cut from the text, so spacing and case stay the user's).
//!
//! A text longer than `--max-length` is cut (see [`truncation`]); a mask token that the cut
//! would drop is an error, not a silently missing prediction. Logits that are not finite
//! (weights that overflow f32 on the text) are an error naming the mask's token.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use roformer::pipeline::FilledMask;
use roformer::{Encoding, RoFormerTokenizer};

use crate::output::OutputArgs;
use crate::precision::PrecisionArg;
use crate::truncation::{self, Cut, Limit};
use crate::{default_model, json};
use serde::Serialize;

/// Arguments of `roformer fill-mask`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object on one line: {\"text\", \"masks\": [{\"position\", \"predictions\": \
     [{\"id\", \"token\", \"probability\", \"sequence\"}]}], \"truncated\": null or \
     {\"tokens\", \"kept\"}}; position is the token index in [CLS] text [SEP], sequence the \
     text with that mask filled by the token"
)))]
pub struct Args {
    /// Checkpoint directory: config.json, model.safetensors (or pytorch_model.bin) with a
    /// masked-LM head, vocab.txt and, if present, tokenizer_config.json [default: the
    /// built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// How many tokens to list per mask.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Cut the text to at most N tokens, `[CLS]` and `[SEP]` included, and say so on stderr
    /// [default: the checkpoint's max_position_embeddings]. 0 keeps every token: rotary
    /// positions have no length limit, but the cost grows with the square of the length. A
    /// mask token past the cut is an error.
    #[arg(long, value_name = "N", value_parser = truncation::parse)]
    max_length: Option<u32>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// The text, with one or more mask tokens written as the tokenizer's mask token
    /// (usually `[MASK]`).
    #[arg(value_name = "TEXT")]
    text: String,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    text: &'a str,
    masks: Vec<FilledMask>,
    /// What `--max-length` cut, if anything.
    truncated: Option<Cut>,
}

/// Predicts the tokens behind each mask of the text and prints them.
pub fn run(args: Args) -> anyhow::Result<()> {
    let lm = default_model::masked_lm(args.model.as_deref(), args.precision.resolve())?;
    let tokenizer = lm.tokenizer();
    let mask_id = tokenizer.mask_token_id()?;
    let limit = Limit::new(args.max_length, lm.config().max_position_embeddings);
    let (encoding, truncated) = encode_with_masks(tokenizer, &args.text, mask_id, limit)?;
    let report = Report {
        text: &args.text,
        masks: lm.fill_encoding(&args.text, &encoding, args.top_k as usize)?,
        truncated,
    };

    let mut out = std::io::stdout().lock();
    if args.stdout.json {
        writeln!(out, "{}", json::to_string(&report)?)?;
    } else {
        print_table(&mut out, &report)?;
    }
    out.flush()?;
    Ok(())
}

/// The encoding of `text`, cut to `limit`, and what was cut; refused when the text has no
/// mask, or when a mask lies past the cut.
///
/// # Errors
/// Either refusal, and tokenizer errors.
fn encode_with_masks(
    tokenizer: &RoFormerTokenizer,
    text: &str,
    mask_id: u32,
    limit: Limit,
) -> anyhow::Result<(Encoding, Option<Cut>)> {
    let limited = tokenizer.encode_limited(text, limit.tokens())?;
    let was_cut = limited.was_cut();
    let whole_masks = if was_cut {
        tokenizer
            .encode(text)
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

    Ok((encoding, truncated))
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
    fn widths_count_wide_chars_twice() {
        assert_eq!(width("月"), 2);
        assert_eq!(width("[UNK]"), 5);
        assert_eq!(width("##月a"), 5);
    }
}
