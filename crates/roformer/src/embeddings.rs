//! Token embeddings: transformers' `RoFormerEmbeddings` and `embeddings_project`.
//!
//! ```text
//! e = Norm(word[input_ids] + token_type[token_type_ids])      [b, t, embedding_size]
//! e = e Wp + bp          when embedding_size != hidden_size    [b, t, hidden_size]
//! ```
//!
//! There is no absolute position embedding: positions enter through the rotary embedding in
//! attention.

use candle_core::{Tensor, D};
use candle_nn::{Embedding, Linear, Module, VarBuilder};

use crate::config::RoFormerConfig;
use crate::norm::Norm;

/// The embedding block of the `roformer` scope.
#[derive(Debug, Clone)]
pub struct Embeddings {
    word: Embedding,
    token_type: Embedding,
    norm: Norm,
    project: Option<Linear>,
}

impl Embeddings {
    /// Loads `embeddings.word_embeddings` (`[vocab_size, embedding_size]`),
    /// `embeddings.token_type_embeddings` (`[type_vocab_size, embedding_size]`),
    /// `embeddings.LayerNorm` and, when `embedding_size != hidden_size`, `embeddings_project`
    /// (`[hidden_size, embedding_size]` weight with bias), all under `vb` (the `roformer`
    /// scope).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Self> {
        let e = cfg.embedding_size;
        let emb = vb.pp("embeddings");
        let project = if e != cfg.hidden_size {
            Some(candle_nn::linear(
                e,
                cfg.hidden_size,
                vb.pp("embeddings_project"),
            )?)
        } else {
            None
        };
        Ok(Embeddings {
            word: candle_nn::embedding(cfg.vocab_size, e, emb.pp("word_embeddings"))?,
            token_type: candle_nn::embedding(
                cfg.type_vocab_size,
                e,
                emb.pp("token_type_embeddings"),
            )?,
            norm: Norm::load(e, cfg, emb.pp("LayerNorm"))?,
            project,
        })
    }

    /// The word embedding matrix, `[vocab_size, embedding_size]` (the tied MLM decoder).
    pub fn word_embeddings(&self) -> &Tensor {
        self.word.embeddings()
    }

    /// Embeds validated `u32` ids `[b, t]` (type ids `None` means all 0) into `[b, t, hidden]`.
    ///
    /// # Errors
    /// Candle errors only (ids are checked by the caller).
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let words = self.word.forward(input_ids)?;
        let types = match token_type_ids {
            Some(t) => self.token_type.forward(t)?,
            None => {
                let e = self.token_type.embeddings().dim(D::Minus1)?;
                self.token_type
                    .embeddings()
                    .narrow(0, 0, 1)?
                    .reshape((1, 1, e))?
            }
        };
        let e = self.norm.forward(&words.broadcast_add(&types)?)?;
        match &self.project {
            Some(p) => p.forward(&e),
            None => Ok(e),
        }
    }
}
