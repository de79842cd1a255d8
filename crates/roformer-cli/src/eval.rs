//! `roformer eval mlm`: masked-character accuracy of a masked LM on the held-out documents of a
//! corpus, against a unigram-frequency baseline.
//!
//! The corpus is split as `train mlm` splits it (by a hash of each document's text, the same
//! `--validation` share; with `--also-simplified` each simplified copy on its original's side).
//! From the validation documents, `--max-docs` are drawn (seeded); each is encoded as
//! `[CLS] text [SEP]` (cut to `--seq-len` tokens), and every *character* token (a single
//! alphabetic character: a Chinese character, not punctuation, not `[UNK]`) is masked with
//! probability `--mask-prob` (at least one per document), all replaced by `[MASK]`. A masked
//! character counts as a top-k hit when it is among the model's k most likely tokens there.
//!
//! The baseline ignores context: it ranks characters by their count in the training documents
//! and predicts the same k most frequent ones at every mask.
//!
//! Logits that are not finite at a mask (weights that overflow f32) are an error naming the
//! document and the token: a NaN would otherwise rank as a plain miss.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, ensure};
use candle_core::{DType, Device, Tensor};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use roformer::data::{read_corpus, split_documents, tokenize_documents, with_simplified};
use roformer::{HeadModel, RoFormerForMaskedLM, RoFormerTokenizer};
use serde::Serialize;

use crate::{default_model, finite, json};

/// The evaluation commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Masked-character top-1 / top-5 accuracy on held-out documents, and a unigram baseline.
    Mlm(MlmArgs),
}

/// Arguments of `roformer eval mlm`.
#[derive(Debug, clap::Args)]
pub struct MlmArgs {
    /// Checkpoint directory with a masked-LM head [default: the built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// Corpus files or directories (format by extension, as `train mlm --format auto`).
    #[arg(long, num_args = 1.., required = true)]
    corpus: Vec<PathBuf>,
    /// Add simplified copies of the documents (as `train mlm --also-simplified`).
    #[arg(long)]
    also_simplified: bool,
    /// The validation share, as given to `train mlm`.
    #[arg(long, default_value_t = 0.05)]
    validation: f64,
    /// Held-out documents evaluated (drawn with --seed; 0: all).
    #[arg(long, default_value_t = 2000)]
    max_docs: usize,
    /// Share of the character tokens masked.
    #[arg(long, default_value_t = 0.15)]
    mask_prob: f64,
    /// Longest input, [CLS] and [SEP] included.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Documents per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Seed of the document draw and the masks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Hits out of masked characters.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Score {
    masked: usize,
    top1: usize,
    top5: usize,
}

impl Score {
    fn add(&mut self, rank: Option<usize>) {
        self.masked += 1;
        match rank {
            Some(0) => {
                self.top1 += 1;
                self.top5 += 1;
            }
            Some(r) if r < 5 => self.top5 += 1,
            _ => {}
        }
    }

    fn rates(&self) -> (f64, f64) {
        let n = self.masked.max(1) as f64;
        (self.top1 as f64 / n, self.top5 as f64 / n)
    }
}

/// The scores of the model and of the baseline over one set of documents.
#[derive(Debug, Default, Serialize)]
struct Part {
    documents: usize,
    model: Score,
    baseline: Score,
}

/// One document, encoded and masked.
struct Masked {
    ids: Vec<u32>,
    /// (position, original id)
    targets: Vec<(usize, u32)>,
    /// A simplified copy (not an original document).
    copy: bool,
    /// How errors name the document: its start.
    name: String,
}

/// Whether `token` is one alphabetic character (a Chinese character, not punctuation).
fn is_character(token: &str) -> bool {
    let mut chars = token.chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if c.is_alphabetic())
}

/// Runs `roformer eval ...`.
///
/// # Errors
/// Bad arguments, unreadable corpora or models, a model without masked-LM head.
pub fn run(command: Command) -> anyhow::Result<()> {
    let Command::Mlm(args) = command;
    ensure!(
        (0.0..1.0).contains(&args.validation) && args.validation > 0.0,
        "--validation must be in (0, 1)"
    );
    ensure!(
        args.mask_prob > 0.0 && args.mask_prob <= 1.0,
        "--mask-prob must be in (0, 1]"
    );
    ensure!(args.seq_len >= 3, "--seq-len must be at least 3");
    ensure!(args.batch_size >= 1, "--batch-size must be at least 1");
    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let mask_id = tokenizer.mask_token_id()?;
    let dir = default_model::model_dir(args.model.as_deref())?;
    ensure!(
        dir.checkpoint.has_mlm_head(),
        "{} has no masked-LM head",
        default_model::describe(args.model.as_deref())
    );
    let model = dir
        .load::<RoFormerForMaskedLM>(DType::F32, &Device::Cpu)?
        .model;

    let mut documents = Vec::new();
    for path in &args.corpus {
        documents.extend(read_corpus(path, None)?);
    }
    let (mut train, validation) = split_documents(documents, args.validation);
    let originals = validation.len();
    let mut held_out = validation;
    if args.also_simplified {
        train = with_simplified(train);
        held_out = with_simplified(held_out);
    }
    if held_out.is_empty() {
        bail!("no document fell in the validation share");
    }
    let ranking = unigram_ranking(&tokenizer, &train);
    ensure!(
        !ranking.is_empty(),
        "the training documents have no character"
    );
    let baseline_rank: HashMap<u32, usize> = ranking
        .iter()
        .take(5)
        .enumerate()
        .map(|(r, &id)| (id, r))
        .collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut order: Vec<usize> = (0..held_out.len()).collect();
    order.shuffle(&mut rng);
    if args.max_docs > 0 {
        order.truncate(args.max_docs);
    }
    let mut masked = Vec::with_capacity(order.len());
    for &i in &order {
        let encoding = tokenizer.encode_truncated(&held_out[i].text, None, args.seq_len)?;
        let eligible: Vec<usize> = (0..encoding.len())
            .filter(|&p| is_character(&encoding.tokens[p]))
            .collect();
        if eligible.is_empty() {
            continue;
        }
        let mut chosen: Vec<usize> = eligible
            .iter()
            .copied()
            .filter(|_| rng.random::<f64>() < args.mask_prob)
            .collect();
        if chosen.is_empty() {
            chosen.push(eligible[rng.random_range(0..eligible.len())]);
        }
        let mut ids = encoding.ids.clone();
        let targets = chosen
            .iter()
            .map(|&p| {
                let original = ids[p];
                ids[p] = mask_id;
                (p, original)
            })
            .collect();
        let start: String = held_out[i].text.chars().take(20).collect();
        masked.push(Masked {
            ids,
            targets,
            copy: i >= originals,
            name: format!("the held-out document starting {start:?}"),
        });
    }

    let (mut traditional, mut simplified) = (Part::default(), Part::default());
    let pad = tokenizer.special_tokens().pad;
    for chunk in masked.chunks(args.batch_size) {
        let ranks = model_ranks(&model, chunk, pad)?;
        for (doc, doc_ranks) in chunk.iter().zip(ranks) {
            let part = if doc.copy {
                &mut simplified
            } else {
                &mut traditional
            };
            part.documents += 1;
            for (&(_, target), rank) in doc.targets.iter().zip(doc_ranks) {
                part.model.add(rank);
                part.baseline.add(baseline_rank.get(&target).copied());
            }
        }
    }
    let all = Part {
        documents: traditional.documents + simplified.documents,
        model: sum(traditional.model, simplified.model),
        baseline: sum(traditional.baseline, simplified.baseline),
    };
    report(&args, &tokenizer, &ranking, &all, &traditional, &simplified)
}

fn sum(a: Score, b: Score) -> Score {
    Score {
        masked: a.masked + b.masked,
        top1: a.top1 + b.top1,
        top5: a.top5 + b.top5,
    }
}

/// Character ids by descending count in `documents` (ties: lower id first).
fn unigram_ranking(
    tokenizer: &RoFormerTokenizer,
    documents: &[roformer::data::Document],
) -> Vec<u32> {
    let mut counts: HashMap<u32, u64> = HashMap::new();
    for doc in tokenize_documents(tokenizer, documents) {
        for id in doc.ids {
            *counts.entry(id).or_default() += 1;
        }
    }
    let mut ranked: Vec<(u32, u64)> = counts
        .into_iter()
        .filter(|&(id, _)| tokenizer.id_to_token(id).is_some_and(is_character))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.into_iter().map(|(id, _)| id).collect()
}

/// For each document of the batch and each of its targets, the rank (0-based, when below 5)
/// of the target among the model's logits at its position.
fn model_ranks(
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

#[derive(Serialize)]
struct Rates {
    documents: usize,
    masked: usize,
    model_top1: f64,
    model_top5: f64,
    baseline_top1: f64,
    baseline_top5: f64,
}

impl From<&Part> for Rates {
    fn from(p: &Part) -> Self {
        let (model_top1, model_top5) = p.model.rates();
        let (baseline_top1, baseline_top5) = p.baseline.rates();
        Rates {
            documents: p.documents,
            masked: p.model.masked,
            model_top1,
            model_top5,
            baseline_top1,
            baseline_top5,
        }
    }
}

/// The `--json` object.
#[derive(Serialize)]
struct Summary<'a> {
    model: &'a str,
    corpus: &'a [PathBuf],
    also_simplified: bool,
    validation: f64,
    mask_prob: f64,
    seq_len: usize,
    seed: u64,
    baseline_top5_chars: &'a [&'a str],
    all: &'a Rates,
    original: &'a Rates,
    simplified_copies: &'a Rates,
}

fn report(
    args: &MlmArgs,
    tokenizer: &RoFormerTokenizer,
    ranking: &[u32],
    all: &Part,
    traditional: &Part,
    simplified: &Part,
) -> anyhow::Result<()> {
    let baseline_chars: Vec<&str> = ranking
        .iter()
        .take(5)
        .filter_map(|&id| tokenizer.id_to_token(id))
        .collect();
    let model_name = default_model::describe(args.model.as_deref());
    let mut out = std::io::stdout().lock();
    let (all_r, trad_r, simp_r) = (
        Rates::from(all),
        Rates::from(traditional),
        Rates::from(simplified),
    );
    if args.json {
        let summary = Summary {
            model: &model_name,
            corpus: &args.corpus,
            also_simplified: args.also_simplified,
            validation: args.validation,
            mask_prob: args.mask_prob,
            seq_len: args.seq_len,
            seed: args.seed,
            baseline_top5_chars: &baseline_chars,
            all: &all_r,
            original: &trad_r,
            simplified_copies: &simp_r,
        };
        writeln!(out, "{}", json::to_string(&summary)?)?;
    } else {
        writeln!(
            out,
            "model {model_name}; baseline predicts {}",
            baseline_chars.join(" ")
        )?;
        writeln!(
            out,
            "{:<18} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10}",
            "documents", "docs", "masked", "model@1", "model@5", "unigram@1", "unigram@5"
        )?;
        for (name, r) in [
            ("all", &all_r),
            ("original", &trad_r),
            ("simplified copies", &simp_r),
        ] {
            writeln!(
                out,
                "{name:<18} {:>6} {:>8} {:>10.4} {:>10.4} {:>10.4} {:>10.4}",
                r.documents, r.masked, r.model_top1, r.model_top5, r.baseline_top1, r.baseline_top5
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_are_single_letters() {
        assert!(is_character("月"));
        assert!(is_character("a"));
        assert!(!is_character("，"));
        assert!(!is_character("。"));
        assert!(!is_character("[UNK]"));
        assert!(!is_character("##a"));
        assert!(!is_character(""));
    }

    #[test]
    fn scores_count_top1_and_top5() {
        let mut s = Score::default();
        for r in [Some(0), Some(3), None, Some(5)] {
            s.add(r);
        }
        assert_eq!((s.masked, s.top1, s.top5), (4, 1, 2));
        assert_eq!(s.rates(), (0.25, 0.5));
    }
}
