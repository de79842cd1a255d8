//! The front door of the text pipelines: [`MaskedLm`], a masked LM with its tokenizer, fills
//! the masks of a text in one call, each prediction with its token and the text it fills in,
//! and embeds texts.
//!
//! ```no_run
//! use roformer::pipeline::MaskedLm;
//! use roformer::Precision;
//!
//! let lm = MaskedLm::from_dir("path/to/checkpoint", Precision::F32)?;
//! for mask in lm.fill_mask("The capital of France is [MASK].", 3)? {
//!     for p in &mask.predictions {
//!         println!("{:.3} {:?} {:?}", p.probability, p.token, p.sequence);
//!     }
//! }
//! # Ok::<(), roformer::pipeline::PipelineError>(())
//! ```

use std::path::Path;

use candle_core::Device;
use serde::Serialize;

use super::embed::{embed, Pooling};
use super::error::PipelineError;
use super::fill_mask::{fill, fill_mask, MaskCandidates};
use crate::config::RoFormerConfig;
use crate::cpu::Precision;
use crate::model::ModelDir;
use crate::tasks::{HeadModel, RoFormerForMaskedLM};
use crate::tokenizer::{Encoding, RoFormerTokenizer};

/// One candidate token for a mask, as a reader wants it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The token's id.
    pub id: u32,
    /// The token (`None` for an id past the vocabulary, when `vocab.txt` is smaller than the
    /// model's vocabulary).
    pub token: Option<String>,
    /// Its probability, `softmax(z)_id` over the mask's logits `z` (in f64).
    pub probability: f64,
    /// The text with this mask replaced by the token (a `##` continuation without its `##`),
    /// every other mask left as written; `None` with `token`.
    pub sequence: Option<String>,
}

/// The predictions for one mask of a text, most likely first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilledMask {
    /// The mask's token index in `[CLS] text [SEP]`.
    pub position: usize,
    /// At most `top_k` predictions, by descending probability.
    pub predictions: Vec<Prediction>,
}

/// A masked LM (a checkpoint saved from `RoFormerForMaskedLM`) on the CPU, with its tokenizer.
pub struct MaskedLm {
    model: RoFormerForMaskedLM,
    tokenizer: RoFormerTokenizer,
}

impl MaskedLm {
    /// The model and tokenizer of a Hugging Face RoFormer directory (`config.json`, the
    /// weights, `vocab.txt`, optionally `tokenizer_config.json`), its products in `precision`.
    ///
    /// # Errors
    /// [`PipelineError::Model`] for a directory that does not load,
    /// [`PipelineError::Tokenizer`] for its tokenizer files, [`PipelineError::NoMaskedLmHead`]
    /// for a checkpoint without the masked-LM head.
    pub fn from_dir(dir: impl AsRef<Path>, precision: Precision) -> Result<Self, PipelineError> {
        let dir = dir.as_ref();
        let tokenizer = RoFormerTokenizer::from_dir(dir)?;
        Self::new(&ModelDir::open(dir)?, tokenizer, precision)
    }

    /// The masked LM of `dir` (a directory, or a model in memory) with `tokenizer`, its
    /// products in `precision`.
    ///
    /// # Errors
    /// [`PipelineError::NoMaskedLmHead`] for a checkpoint without the masked-LM head, and the
    /// load's errors.
    pub fn new(
        dir: &ModelDir,
        tokenizer: RoFormerTokenizer,
        precision: Precision,
    ) -> Result<Self, PipelineError> {
        if !dir.checkpoint.has_mlm_head() {
            return Err(PipelineError::NoMaskedLmHead {
                checkpoint: dir.checkpoint.path().to_path_buf(),
            });
        }
        let model = dir
            .load::<RoFormerForMaskedLM>(&Device::Cpu, precision)?
            .model;
        Ok(Self { model, tokenizer })
    }

    /// The model.
    pub fn model(&self) -> &RoFormerForMaskedLM {
        &self.model
    }

    /// The model's config (`max_position_embeddings`, the vocabulary's size, ...).
    pub fn config(&self) -> &RoFormerConfig {
        self.model.roformer().config()
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &RoFormerTokenizer {
        &self.tokenizer
    }

    /// One vector per text: the encoder's last hidden states of `[CLS] text [SEP]` pooled by
    /// `pooling` (see [`Pooling`]) and L2-normalised, `v / |v|`.
    ///
    /// # Errors
    /// [`PipelineError::NonFinite`] for a text whose hidden states are not finite, model
    /// errors otherwise.
    pub fn embed(&self, texts: &[&str], pooling: Pooling) -> Result<Vec<Vec<f32>>, PipelineError> {
        let encodings: Vec<Encoding> = texts.iter().map(|t| self.tokenizer.encode(t)).collect();
        let batch: Vec<&Encoding> = encodings.iter().collect();
        let pad_id = self.tokenizer.special_tokens().pad;
        let vectors = embed(self.model.roformer(), &batch, pooling, true, pad_id)?;
        (vectors.into_iter().enumerate())
            .map(|(text, v)| {
                v.map_err(|e| PipelineError::NonFinite {
                    text,
                    what: "hidden states",
                    token: e.token,
                    index: e.dim,
                    value: e.value,
                })
            })
            .collect()
    }

    /// The `top_k` most likely tokens behind each mask token of `text` (encoded whole as
    /// `[CLS] text [SEP]`), one [`FilledMask`] per mask in text order.
    ///
    /// # Errors
    /// [`PipelineError::NoMask`] for a text without a mask token, and those of
    /// [`Self::fill_encoding`].
    pub fn fill_mask(&self, text: &str, top_k: usize) -> Result<Vec<FilledMask>, PipelineError> {
        let encoding = self.tokenizer.encode(text);
        let mask_id = self.tokenizer.mask_token_id()?;
        if !encoding.ids.contains(&mask_id) {
            return Err(PipelineError::NoMask {
                mask_token: self.tokenizer.config().mask_token.clone(),
            });
        }
        self.fill_encoding(text, &encoding, top_k)
    }

    /// [`Self::fill_mask`] over an encoding of `text` that the caller made (cut to a length,
    /// say); the sequences are cut from `text` by the encoding's offsets, so that its spacing
    /// and case stay the caller's. A text without a mask gives no [`FilledMask`].
    ///
    /// # Errors
    /// [`PipelineError::Tokenizer`] for a vocabulary without a mask token,
    /// [`PipelineError::NonFinite`] for logits that are not finite, model errors otherwise.
    pub fn fill_encoding(
        &self,
        text: &str,
        encoding: &Encoding,
        top_k: usize,
    ) -> Result<Vec<FilledMask>, PipelineError> {
        let mask_id = self.tokenizer.mask_token_id()?;
        let pad_id = self.tokenizer.special_tokens().pad;
        let found = fill_mask(&self.model, &[encoding], mask_id, pad_id, top_k)?;
        let filled = |mask: MaskCandidates| {
            let span = encoding.offsets[mask.position];
            let predictions = (mask.candidates.into_iter())
                .map(|c| {
                    let token = self.tokenizer.id_to_token(c.id);
                    Prediction {
                        id: c.id,
                        token: token.map(str::to_owned),
                        probability: c.score,
                        sequence: token.map(|t| fill(text, span, t)),
                    }
                })
                .collect();
            FilledMask {
                position: mask.position,
                predictions,
            }
        };
        Ok(found.into_iter().flatten().map(filled).collect())
    }
}
