//! The encoder with a task head, as transformers' `RoFormerFor*` (and, with absolute
//! positions, `BertFor*`) classes: encoder tensors under `roformer.` (`bert.`), head tensors at
//! the top level.

use candle_core::Tensor;
use candle_nn::{Linear, Module, VarBuilder};

use crate::config::RoFormerConfig;
use crate::error::Result;
use crate::heads::{ClassificationHead, MlmHead};
use crate::mode::{Dropout, Mode};
use crate::model::{Architecture, RoFormerModel};
use crate::plan::Plan;
use crate::shapes::ModelKind;

/// What a head model returns.
#[derive(Debug, Clone)]
pub struct HeadOutput {
    /// The encoder's last hidden states, `[batch, seq, hidden]`.
    pub last_hidden_state: Tensor,
    /// The head's logits: `[batch, seq, vocab]` (masked LM), `[batch, num_labels]` (sequence
    /// classification) or `[batch, seq, num_labels]` (token classification).
    pub logits: Tensor,
}

/// An encoder with a head mapping its last hidden states to logits. The forward passes are
/// provided: inference ([`HeadModel::forward`]) and training ([`HeadModel::forward_train`]).
pub trait HeadModel: Architecture {
    /// The encoder.
    fn roformer(&self) -> &RoFormerModel;

    /// The head's logits from the last hidden states `[batch, seq, hidden]`.
    ///
    /// # Errors
    /// Candle errors only.
    fn head_forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor>;

    /// The Hugging Face class name of the model, e.g. `RoFormerForMaskedLM` (`BertFor...` with
    /// absolute positions): what `config.json`'s `architectures` names.
    fn architecture_name(&self) -> String;

    /// Runs the encoder (inputs as in [`RoFormerModel::forward`]) and the head at inference.
    ///
    /// # Errors
    /// As [`RoFormerModel::forward`].
    fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
    ) -> Result<HeadOutput> {
        self.forward_mode(
            input_ids,
            token_type_ids,
            attention_mask,
            position_ids,
            self.roformer().plan(Mode::Inference),
        )
    }

    /// The same in training mode: every op differentiable, dropout drawn from `dropout`.
    ///
    /// # Errors
    /// As [`RoFormerModel::forward`].
    fn forward_train(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
        dropout: &Dropout,
    ) -> Result<HeadOutput> {
        self.forward_mode(
            input_ids,
            token_type_ids,
            attention_mask,
            position_ids,
            self.roformer().plan(Mode::Train {
                dropout,
                precision: crate::cpu::Precision::F32,
            }),
        )
    }

    /// Encoder and head in a pass of plan `plan` ([`RoFormerModel::plan`]).
    ///
    /// # Errors
    /// As [`RoFormerModel::forward`].
    fn forward_mode(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
        plan: Plan<'_>,
    ) -> Result<HeadOutput> {
        let batch =
            self.roformer()
                .validate(input_ids, token_type_ids, attention_mask, position_ids)?;
        let last_hidden_state = self.roformer().forward_batch(&batch, plan)?;
        let logits = self.head_forward(&last_hidden_state, plan)?;
        Ok(HeadOutput {
            last_hidden_state,
            logits,
        })
    }
}

/// The class name for `cfg`'s position type: `Bert{task}` or `RoFormer{task}`.
fn class_name(cfg: &RoFormerConfig, task: &str) -> String {
    let family = if cfg.base_prefix() == "bert" {
        "Bert"
    } else {
        "RoFormer"
    };
    format!("{family}{task}")
}

/// `RoFormerForMaskedLM`: the encoder and the `cls.predictions` head (`MlmHead`).
#[derive(Debug)]
pub struct RoFormerForMaskedLM {
    roformer: RoFormerModel,
    head: MlmHead,
}

impl RoFormerForMaskedLM {
    /// Loads `roformer.*` (`bert.*`) and `cls.predictions.*` from `vb` (the checkpoint's top
    /// level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`] and `MlmHead::load`.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        let roformer = RoFormerModel::load(vb.pp(cfg.base_prefix()), cfg)?;
        let head = MlmHead::load(
            vb.pp("cls").pp("predictions"),
            cfg,
            roformer.word_embeddings(),
        )?;
        Ok(RoFormerForMaskedLM { roformer, head })
    }

    /// The masked-LM head.
    pub fn head(&self) -> &MlmHead {
        &self.head
    }
}

impl HeadModel for RoFormerForMaskedLM {
    fn roformer(&self) -> &RoFormerModel {
        &self.roformer
    }

    fn head_forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        self.head.forward(hidden, plan)
    }

    fn architecture_name(&self) -> String {
        class_name(self.roformer.config(), "ForMaskedLM")
    }
}

impl Architecture for RoFormerForMaskedLM {
    const KIND: ModelKind = ModelKind::MaskedLm;

    fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        RoFormerForMaskedLM::load(vb, cfg)
    }

    fn roformer_mut(&mut self) -> &mut RoFormerModel {
        &mut self.roformer
    }
}

/// `RoFormerForSequenceClassification` (`BertForSequenceClassification` with absolute
/// positions): the encoder and a `ClassificationHead` on the first token.
#[derive(Debug)]
pub struct RoFormerForSequenceClassification {
    roformer: RoFormerModel,
    head: ClassificationHead,
}

impl RoFormerForSequenceClassification {
    /// Loads the encoder and the head's tensors from `vb` (the checkpoint's top level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`] and `ClassificationHead::load`.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        Ok(RoFormerForSequenceClassification {
            roformer: RoFormerModel::load(vb.pp(cfg.base_prefix()), cfg)?,
            head: ClassificationHead::load(vb, cfg)?,
        })
    }
}

impl HeadModel for RoFormerForSequenceClassification {
    fn roformer(&self) -> &RoFormerModel {
        &self.roformer
    }

    fn head_forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        self.head.forward(hidden, plan)
    }

    fn architecture_name(&self) -> String {
        class_name(self.roformer.config(), "ForSequenceClassification")
    }
}

impl Architecture for RoFormerForSequenceClassification {
    const KIND: ModelKind = ModelKind::SequenceClassification;

    fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        RoFormerForSequenceClassification::load(vb, cfg)
    }

    fn roformer_mut(&mut self) -> &mut RoFormerModel {
        &mut self.roformer
    }
}

/// `RoFormerForTokenClassification`: the encoder and a per-token linear `classifier`
/// (`[num_labels, hidden]` weight with bias): `logits = Dropout(h) W^T + b`.
#[derive(Debug)]
pub struct RoFormerForTokenClassification {
    roformer: RoFormerModel,
    head: Linear,
    dropout: f64,
}

impl RoFormerForTokenClassification {
    /// Loads the encoder and `classifier.*` from `vb` (the checkpoint's top level).
    ///
    /// # Errors
    /// As [`RoFormerModel::load`], and var builder errors.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        Ok(RoFormerForTokenClassification {
            roformer: RoFormerModel::load(vb.pp(cfg.base_prefix()), cfg)?,
            head: candle_nn::linear(cfg.hidden_size, cfg.num_labels, vb.pp("classifier"))?,
            dropout: cfg.hidden_dropout_prob,
        })
    }
}

impl HeadModel for RoFormerForTokenClassification {
    fn roformer(&self) -> &RoFormerModel {
        &self.roformer
    }

    fn head_forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        self.head.forward(&plan.dropout(hidden, self.dropout)?)
    }

    fn architecture_name(&self) -> String {
        class_name(self.roformer.config(), "ForTokenClassification")
    }
}

impl Architecture for RoFormerForTokenClassification {
    const KIND: ModelKind = ModelKind::TokenClassification;

    fn load_root(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        RoFormerForTokenClassification::load(vb, cfg)
    }

    fn roformer_mut(&mut self) -> &mut RoFormerModel {
        &mut self.roformer
    }
}
