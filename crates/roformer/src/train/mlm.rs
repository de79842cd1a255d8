//! Masked-LM pre-training as a [`Task`] of the training loop: corpus to masked batches, the
//! loss of a micro-batch, validation loss, masked-token accuracy and perplexity.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::autograd::param_grads::ParamGrads;
use crate::config::RoFormerConfig;
use crate::data::split::fnv1a64;
use crate::data::{
    make_blocks, read_corpus, split_alone, split_documents, text_hash, tokenize_documents,
    with_lines, with_simplified, Block, BlockMode, CorpusFormat, Document, Masker, MaskingOptions,
    MlmBatch, MlmBatches,
};
use crate::mode::{Dropout, Mode};
use crate::tasks::{HeadModel, RoFormerForMaskedLM};
use crate::tokenizer::RoFormerTokenizer;
use crate::train::checkpoint::model_files;
use crate::train::error::TrainError;
use crate::train::loss::{mlm_loss, BatchInputs, IGNORE};
use crate::train::params::Params;
use crate::train::run::{EvalMetrics, Evaluation, Task};

/// Where the text comes from and how it becomes blocks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MlmDataOptions {
    /// Corpus files or directories.
    pub corpus: Vec<PathBuf>,
    /// Their format (`None`: detected per file).
    #[serde(default)]
    pub format: Option<CorpusFormat>,
    /// Tokens per block, `[CLS]` and `[SEP]` included.
    pub seq_len: usize,
    /// Packed blocks or one document per block.
    pub packed: bool,
    /// Share of documents (by text hash) held out for validation.
    pub validation_fraction: f64,
    /// Rows per micro-batch.
    pub batch_size: usize,
    /// Seed of the block order and of the masks.
    pub seed: u64,
    /// Whole-word masking over jieba words.
    pub whole_word: bool,
    /// Most validation batches evaluated (0: all).
    pub max_eval_batches: usize,
    /// Also train (and validate) on the simplified copy of every document that has
    /// traditional characters ([`crate::data::with_simplified`]); a copy goes to its original's
    /// side of the split.
    #[serde(default)]
    pub also_simplified: bool,
    /// Also train (and validate) on the lines of this share of the documents, without their
    /// punctuation ([`crate::data::with_lines`]), after the simplified copies.
    #[serde(default)]
    pub line_share: f64,
    /// With packed blocks, the share of the documents (chosen by hash) trained one per block,
    /// padded, as a short text alone (see [`crate::data::split_alone`]).
    #[serde(default)]
    pub alone_share: f64,
}

impl Default for MlmDataOptions {
    /// No corpus (give at least one path), its format detected per file, packed blocks of 128
    /// tokens, 5 % of the documents held out, batches of 16, seed 0, single-token masks, at
    /// most 50 validation batches per evaluation, no added copies or lines.
    fn default() -> Self {
        Self {
            corpus: Vec::new(),
            format: None,
            seq_len: 128,
            packed: true,
            validation_fraction: 0.05,
            batch_size: 16,
            seed: 0,
            whole_word: false,
            max_eval_batches: 50,
            also_simplified: false,
            line_share: 0.0,
            alone_share: 0.0,
        }
    }
}

/// The batches of a corpus and what they hold.
#[derive(Debug)]
pub struct MlmData {
    /// Training batches, addressed by micro-batch index.
    pub train: MlmBatches,
    /// Validation batches (`None` when no document fell in the validation share).
    pub validation: Option<MlmBatches>,
    /// Documents read.
    pub documents: usize,
    /// Training and validation blocks.
    pub blocks: (usize, usize),
    /// Training tokens (blocks x seq_len).
    pub train_tokens: usize,
    /// The entropy (nats) of the training tokens' unigram distribution, special tokens left
    /// out: `H = -sum_w p(w) ln p(w)`, the loss of the best predictor that ignores context,
    /// the level masked-LM training must get below.
    pub unigram_entropy: f64,
    /// What each corpus path held, in the order given.
    pub sources: Vec<CorpusDigest>,
}

/// What one corpus path held when it was read: its documents and a hash of their texts, so
/// that a resumed run can tell the corpus changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorpusDigest {
    /// The path (a file or a directory) as given.
    pub path: PathBuf,
    /// Documents read from it.
    pub documents: usize,
    /// FNV-1a (64-bit) over the little-endian [`text_hash`] of each document's text, in order.
    pub hash: u64,
}

impl CorpusDigest {
    /// The digest of the documents read from `path`.
    pub fn of(path: &std::path::Path, documents: &[crate::data::Document]) -> Self {
        let hashes: Vec<u8> = documents
            .iter()
            .flat_map(|d| text_hash(&d.text).to_le_bytes())
            .collect();
        Self {
            path: path.to_path_buf(),
            documents: documents.len(),
            hash: fnv1a64(&hashes),
        }
    }
}

/// `-sum p ln p` of the non-special tokens of `blocks`.
fn unigram_entropy(blocks: &[crate::data::Block], masker: &Masker) -> f64 {
    let mut counts = std::collections::HashMap::<u32, u64>::new();
    for b in blocks {
        for &id in &b.input_ids[..b.len.min(b.input_ids.len())] {
            if masker.is_maskable(id) {
                *counts.entry(id).or_default() += 1;
            }
        }
    }
    let total: u64 = counts.values().sum();
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum()
}

/// Reads, splits, tokenises (on all cores), blocks and masks a corpus.
///
/// # Errors
/// [`TrainError::Data`] for unreadable or empty corpora and tokenizer problems (no `[MASK]`
/// token); [`TrainError::NoTrainingBlock`] for a corpus too short for one training block.
pub fn prepare_mlm_data(
    tokenizer: &RoFormerTokenizer,
    options: &MlmDataOptions,
) -> Result<MlmData, TrainError> {
    let (documents, sources) = read_sources(options)?;
    let count = documents.len();
    let (train_docs, validation_docs) = split_and_augment(documents, options);
    let train_docs_count = train_docs.len();
    let train_blocks = blocks_of(tokenizer, options, train_docs)?;
    if train_blocks.is_empty() {
        return Err(TrainError::NoTrainingBlock {
            seq_len: options.seq_len,
            documents: count,
            train: train_docs_count,
            validation: options.validation_fraction,
        });
    }
    let validation_blocks = blocks_of(tokenizer, options, validation_docs)?;
    let blocks = (train_blocks.len(), validation_blocks.len());
    let masking = MaskingOptions {
        whole_word: options.whole_word,
        ..MaskingOptions::default()
    };
    let masker = Masker::new(masking, tokenizer)?;
    let entropy = unigram_entropy(&train_blocks, &masker);
    let batches =
        |blocks, masker| MlmBatches::new(blocks, options.batch_size, options.seed, masker);
    let train = batches(train_blocks, masker)?;
    let validation = if validation_blocks.is_empty() {
        None
    } else {
        Some(batches(
            validation_blocks,
            Masker::new(masking, tokenizer)?,
        )?)
    };
    Ok(MlmData {
        sources,
        train_tokens: blocks.0 * options.seq_len,
        train,
        validation,
        documents: count,
        blocks,
        unigram_entropy: entropy,
    })
}

/// The documents of every corpus path, in order, and what each path held.
fn read_sources(
    options: &MlmDataOptions,
) -> Result<(Vec<Document>, Vec<CorpusDigest>), TrainError> {
    let mut documents = Vec::new();
    let mut sources = Vec::with_capacity(options.corpus.len());
    for path in &options.corpus {
        let read = read_corpus(path, options.format.as_ref())?;
        sources.push(CorpusDigest::of(path, &read));
        documents.extend(read);
    }
    Ok((documents, sources))
}

/// The training and validation documents: split by hash, then each side with its simplified
/// copies and its lines as documents when asked.
fn split_and_augment(
    documents: Vec<Document>,
    options: &MlmDataOptions,
) -> (Vec<Document>, Vec<Document>) {
    let (mut train, mut validation) = split_documents(documents, options.validation_fraction);
    if options.also_simplified {
        train = with_simplified(train);
        validation = with_simplified(validation);
    }
    if options.line_share > 0.0 {
        train = with_lines(train, options.line_share);
        validation = with_lines(validation, options.line_share);
    }
    (train, validation)
}

/// The blocks of `docs`: packed (with the alone share one per block) or one per block.
fn blocks_of(
    tokenizer: &RoFormerTokenizer,
    options: &MlmDataOptions,
    docs: Vec<Document>,
) -> Result<Vec<Block>, TrainError> {
    let mode = if options.packed {
        BlockMode::Packed
    } else {
        BlockMode::LineByLine
    };
    let (alone, rest) = if mode == BlockMode::Packed && options.alone_share > 0.0 {
        split_alone(docs, options.alone_share)
    } else {
        (Vec::new(), docs)
    };
    let specials = tokenizer.special_tokens();
    let tokenized = tokenize_documents(tokenizer, &rest);
    let mut blocks = make_blocks(&tokenized, mode, options.seq_len, specials)?;
    let alone = tokenize_documents(tokenizer, &alone);
    blocks.extend(make_blocks(
        &alone,
        BlockMode::LineByLine,
        options.seq_len,
        specials,
    )?);
    Ok(blocks)
}

/// The tensors of a batch on `device`.
pub(crate) fn batch_tensors(
    b: &MlmBatch,
    device: &Device,
) -> Result<(Tensor, Tensor, Tensor), TrainError> {
    let shape = (b.batch, b.seq);
    Ok((
        Tensor::from_slice(&b.input_ids, shape, device)?,
        Tensor::from_slice(&b.token_type_ids, shape, device)?,
        Tensor::from_slice(&b.attention_mask, shape, device)?,
    ))
}

/// Masked-LM pre-training of a model on trainable variables.
pub struct MlmTask<'a> {
    /// The model.
    pub model: &'a RoFormerForMaskedLM,
    /// Its variables.
    pub params: &'a Params,
    /// The batches.
    pub data: &'a MlmData,
    /// Most validation batches evaluated (0: all).
    pub max_eval_batches: usize,
    /// Files saved beside the model (`vocab.txt`, `tokenizer_config.json`).
    pub tokenizer_files: Vec<(String, Vec<u8>)>,
    /// The precision of the training products (validation runs the f32 inference path).
    pub precision: crate::cpu::Precision,
}

impl MlmTask<'_> {
    fn config(&self) -> &RoFormerConfig {
        self.model.roformer().config()
    }
}

impl Task for MlmTask<'_> {
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &Dropout,
        _grads: &ParamGrads,
    ) -> Result<(Tensor, usize), TrainError> {
        let b = self.data.train.batch(index);
        let (ids, types, mask) = batch_tensors(&b, self.model.roformer().device())?;
        let out = mlm_loss(
            self.model,
            BatchInputs {
                input_ids: &ids,
                token_type_ids: Some(&types),
                attention_mask: Some(&mask),
            },
            &b.labels,
            Mode::Train {
                dropout,
                precision: self.precision,
            },
        )?;
        Ok((out.loss, b.batch * b.seq))
    }

    fn evaluate(&self, step: u64, stop: &AtomicBool) -> Result<Evaluation, TrainError> {
        let Some(validation) = &self.data.validation else {
            return Ok(Evaluation::NoData);
        };
        let limit = if self.max_eval_batches == 0 {
            usize::MAX
        } else {
            self.max_eval_batches
        };
        let (mut loss_sum, mut count, mut correct) = (0.0, 0, 0);
        for b in validation.eval_batches().take(limit) {
            if stop.load(Ordering::Relaxed) {
                return Ok(Evaluation::Stopped);
            }
            if b.labels.iter().all(|&l| l == IGNORE) {
                continue;
            }
            let (ids, types, mask) = batch_tensors(&b, self.model.roformer().device())?;
            let out = mlm_loss(
                self.model,
                BatchInputs {
                    input_ids: &ids,
                    token_type_ids: Some(&types),
                    attention_mask: Some(&mask),
                },
                &b.labels,
                Mode::Inference,
            )?;
            loss_sum += f64::from(out.loss.to_scalar::<f32>()?) * out.count as f64;
            count += out.count;
            correct += out.correct;
        }
        if count == 0 {
            return Ok(Evaluation::NoData);
        }
        let loss = loss_sum / count as f64;
        Ok(Evaluation::Done(EvalMetrics {
            step,
            loss,
            accuracy: correct as f64 / count as f64,
            perplexity: loss.exp(),
            macro_f1: None,
            confusion: None,
            count,
        }))
    }

    fn model_files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
        let mut files = model_files(self.config(), &self.model.architecture_name(), self.params)?;
        files.extend(self.tokenizer_files.iter().cloned());
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{build_vocab, is_validation, read_corpus, VocabOptions};

    #[test]
    fn simplified_copies_double_both_sides_of_the_split() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/poetry");
        let docs = with_simplified(read_corpus(&dir, None).unwrap());
        let options = VocabOptions::new(3000);
        let built = build_vocab(&docs, &options).unwrap();
        let tokenizer = RoFormerTokenizer::new(built.vocab(), options.config.clone()).unwrap();
        let data = |also_simplified, line_share| {
            prepare_mlm_data(
                &tokenizer,
                &MlmDataOptions {
                    corpus: vec![dir.clone()],
                    format: None,
                    seq_len: 32,
                    packed: true,
                    validation_fraction: 0.3,
                    batch_size: 4,
                    seed: 0,
                    whole_word: false,
                    max_eval_batches: 0,
                    also_simplified,
                    line_share,
                    alone_share: 0.0,
                },
            )
            .unwrap()
        };
        let (one, both) = (data(false, 0.0), data(true, 0.0));
        assert_eq!(one.documents, both.documents);
        assert!(
            both.blocks.0 > one.blocks.0 * 3 / 2,
            "{:?} {:?}",
            one.blocks,
            both.blocks
        );
        assert!(
            both.blocks.1 > one.blocks.1,
            "{:?} {:?}",
            one.blocks,
            both.blocks
        );
        // Lines as documents: more blocks on both sides; the documents read stay the same.
        let lines = data(false, 1.0);
        assert_eq!(lines.documents, one.documents);
        assert!(lines.blocks.0 > one.blocks.0 && lines.blocks.1 > one.blocks.1);
        // The copy of a held-out poem is held out too, though its own hash may say otherwise.
        let originals = read_corpus(&dir, None).unwrap();
        let (_, held_out) = split_documents(originals, 0.3);
        let copies = with_simplified(held_out.clone());
        assert!(copies.len() > held_out.len());
        assert!(copies[held_out.len()..]
            .iter()
            .any(|c| !is_validation(&c.text, 0.3)));
    }
}
