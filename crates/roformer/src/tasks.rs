//! The encoder with a task head, as transformers' `RoFormerFor*` classes (encoder tensors under
//! `roformer.`, head tensors at the top level).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Linear, Module, VarBuilder};

use crate::config::RoFormerConfig;
use crate::error::Result;
use crate::heads::{ClassificationHead, MlmHead};
use crate::model::{load_from_dir, Architecture, RoFormerModel};
use crate::weights::BASE_PREFIX;

/// What a head model returns.
#[derive(Debug, Clone)]
pub struct HeadOutput {
    /// The encoder's last hidden states, `[batch, seq, hidden]`.
    pub last_hidden_state: Tensor,
    /// The head's logits: `[batch, seq, vocab]` (masked LM), `[batch, num_labels]` (sequence
    /// classification) or `[batch, seq, num_labels]` (token classification).
    pub logits: Tensor,
}

/// Defines `load_from_dir`, `roformer()` and `forward` for a head model whose head maps the
/// last hidden states to logits with `$head.forward`.
macro_rules! head_model {
    ($name:ident) => {
        impl $name {
            /// Loads `config.json` and the checkpoint of a model directory.
            ///
            /// # Errors
            /// As [`crate::ModelDir::open`] and [`crate::ModelDir::load`].
            pub fn load_from_dir(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
                load_from_dir(dir, device, dtype)
            }

            /// The encoder.
            pub fn roformer(&self) -> &RoFormerModel {
                &self.roformer
            }

            /// Runs the encoder (inputs as in [`RoFormerModel::forward`]) and the head.
            ///
            /// # Errors
            /// As [`RoFormerModel::forward`].
            pub fn forward(
                &self,
                input_ids: &Tensor,
                token_type_ids: Option<&Tensor>,
                attention_mask: Option<&Tensor>,
                position_ids: Option<&Tensor>,
            ) -> Result<HeadOutput> {
                let batch = self.roformer.validate(
                    input_ids,
                    token_type_ids,
                    attention_mask,
                    position_ids,
                )?;
                let last_hidden_state = self.roformer.forward_batch(&batch)?;
                let logits = self.head.forward(&last_hidden_state)?;
                Ok(HeadOutput {
                    last_hidden_state,
                    logits,
                })
            }
        }

        impl Architecture for $name {
            fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
                $name::load(vb, cfg)
            }
        }
    };
}

/// `RoFormerForMaskedLM`: the encoder and the `cls.predictions` head ([`MlmHead`]).
#[derive(Debug)]
pub struct RoFormerForMaskedLM {
    roformer: RoFormerModel,
    head: MlmHead,
}

impl RoFormerForMaskedLM {
    /// Loads `roformer.*` and `cls.predictions.*` from `vb` (the checkpoint's top level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`] and [`MlmHead::load`].
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        let roformer = RoFormerModel::load(vb.pp(BASE_PREFIX), cfg)?;
        let head = MlmHead::load(
            vb.pp("cls").pp("predictions"),
            cfg,
            roformer.word_embeddings(),
        )?;
        Ok(RoFormerForMaskedLM { roformer, head })
    }
}

head_model!(RoFormerForMaskedLM);

/// `RoFormerForSequenceClassification`: the encoder and the `classifier` head
/// ([`ClassificationHead`]) on the first token.
#[derive(Debug)]
pub struct RoFormerForSequenceClassification {
    roformer: RoFormerModel,
    head: ClassificationHead,
}

impl RoFormerForSequenceClassification {
    /// Loads `roformer.*` and `classifier.*` from `vb` (the checkpoint's top level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`] and [`ClassificationHead::load`].
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        Ok(RoFormerForSequenceClassification {
            roformer: RoFormerModel::load(vb.pp(BASE_PREFIX), cfg)?,
            head: ClassificationHead::load(vb.pp("classifier"), cfg)?,
        })
    }
}

head_model!(RoFormerForSequenceClassification);

/// `RoFormerForTokenClassification`: the encoder and a per-token linear `classifier`
/// (`[num_labels, hidden]` weight with bias): `logits = h W^T + b`.
#[derive(Debug)]
pub struct RoFormerForTokenClassification {
    roformer: RoFormerModel,
    head: Linear,
}

impl RoFormerForTokenClassification {
    /// Loads `roformer.*` and `classifier.*` from `vb` (the checkpoint's top level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`], and var builder errors.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        Ok(RoFormerForTokenClassification {
            roformer: RoFormerModel::load(vb.pp(BASE_PREFIX), cfg)?,
            head: candle_nn::linear(cfg.hidden_size, cfg.num_labels, vb.pp("classifier"))?,
        })
    }
}

head_model!(RoFormerForTokenClassification);
