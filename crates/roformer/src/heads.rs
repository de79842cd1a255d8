//! Task heads on top of the last hidden states: masked LM, sequence and token classification.

use candle_core::Tensor;
use candle_nn::{Linear, VarBuilder};

use crate::activation::Activation;
use crate::attention::dense as dense_op;
use crate::config::{NormType, RoFormerConfig};
use crate::error::{ModelError, Result};
use crate::norm::Norm;
use crate::plan::Plan;

/// The masked-LM head `cls.predictions`.
///
/// RoFormer (transformers' `RoFormerLMPredictionHead`):
/// `logits = LayerNorm(act(h Wt + bt)) Wd^T + bias` with `Wt: [embedding, hidden]`,
/// `Wd: [vocab, embedding]`. RoFormer-V2 (`norm_type: rms_norm`, JunnYu's
/// `RoFormerV2LMPredictionHead`): `logits = h Wd^T`, no transform and no bias.
#[derive(Debug, Clone)]
pub struct MlmHead {
    transform: Option<(Linear, Activation, Norm)>,
    decoder: Linear,
}

impl MlmHead {
    /// Loads `cls.predictions.*` from `vb` (the `cls.predictions` scope). The decoder weight is
    /// `word_embeddings` when `tie_word_embeddings` (as transformers ties it, whatever the file
    /// holds), `decoder.weight` otherwise; the bias is `bias`, or `decoder.bias` when only that
    /// is stored.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for a V2 head with `embedding_size != hidden_size` (its
    /// decoder reads hidden states directly), and var builder errors.
    pub fn load(
        vb: VarBuilder<'_>,
        cfg: &RoFormerConfig,
        word_embeddings: &Tensor,
    ) -> Result<Self> {
        let (v, e, h) = (cfg.vocab_size, cfg.embedding_size, cfg.hidden_size);
        let weight = if cfg.tie_word_embeddings {
            word_embeddings.clone()
        } else {
            vb.get((v, e), "decoder.weight")?
        };
        let (transform, bias) = match cfg.norm_type {
            NormType::LayerNorm => {
                let t = vb.pp("transform");
                let dense = candle_nn::linear(h, e, t.pp("dense"))?;
                let norm = Norm::layer_norm(e, cfg.layer_norm_eps, t.pp("LayerNorm"))?;
                let bias_name = if !vb.contains_tensor("bias") && vb.contains_tensor("decoder.bias")
                {
                    "decoder.bias"
                } else {
                    "bias"
                };
                (
                    Some((dense, cfg.hidden_act, norm)),
                    Some(vb.get(v, bias_name)?),
                )
            }
            NormType::RmsNorm => {
                if e != h {
                    return Err(ModelError::InvalidConfig {
                        field: "embedding_size",
                        reason: format!(
                            "a RoFormer-V2 MLM head needs embedding_size == hidden_size, got {e} and {h}"
                        ),
                    });
                }
                (None, None)
            }
        };
        Ok(MlmHead {
            transform,
            decoder: Linear::new(weight, bias),
        })
    }

    /// Logits `[..., vocab]` from hidden states `[..., hidden]` (`[b, t, hidden]`, or the
    /// `[n, hidden]` rows of the masked tokens only). The head has no dropout.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        let x = match &self.transform {
            Some((layer, act, norm)) => {
                norm.forward(&dense_op(layer, hidden, Some(*act), plan)?, plan)?
            }
            None => hidden.clone(),
        };
        dense_op(&self.decoder, &x, None, plan)
    }
}

/// A sequence classification head on the first (`[CLS]`) token `h0`, with dropout `p`
/// (`hidden_dropout_prob`) in training.
#[derive(Debug, Clone)]
pub enum ClassificationHead {
    /// transformers' `RoFormerClassificationHead` (`classifier.dense`, `classifier.out_proj`):
    /// `logits = Dropout(act(Dropout(h0) W1 + b1)) W2 + b2`, with the config's `hidden_act`.
    RoFormer {
        /// `classifier.dense`, `[hidden, hidden]`.
        dense: Linear,
        /// The config's `hidden_act`.
        activation: Activation,
        /// `classifier.out_proj`, `[num_labels, hidden]`.
        out_proj: Linear,
        /// The dropout probability.
        dropout: f64,
    },
    /// BERT's pooler and classifier (`bert.pooler.dense`, `classifier`), as
    /// `BertForSequenceClassification`: `logits = Dropout(tanh(h0 Wp + bp)) Wc + bc`.
    Bert {
        /// `bert.pooler.dense`, `[hidden, hidden]`.
        pooler: Linear,
        /// `classifier`, `[num_labels, hidden]`.
        classifier: Linear,
        /// The dropout probability.
        dropout: f64,
    },
}

impl ClassificationHead {
    /// Loads the head from `vb` (the checkpoint's top level): `classifier.dense` and
    /// `classifier.out_proj` for RoFormer, `bert.pooler.dense` and `classifier` when positions
    /// are absolute (BERT).
    ///
    /// # Errors
    /// Var builder errors.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        let (h, n) = (cfg.hidden_size, cfg.num_labels);
        let dropout = cfg.hidden_dropout_prob;
        if cfg.base_prefix() == "bert" {
            return Ok(ClassificationHead::Bert {
                pooler: candle_nn::linear(h, h, vb.pp("bert").pp("pooler").pp("dense"))?,
                classifier: candle_nn::linear(h, n, vb.pp("classifier"))?,
                dropout,
            });
        }
        let vb = vb.pp("classifier");
        Ok(ClassificationHead::RoFormer {
            dense: candle_nn::linear(h, h, vb.pp("dense"))?,
            activation: cfg.hidden_act,
            out_proj: candle_nn::linear(h, n, vb.pp("out_proj"))?,
            dropout,
        })
    }

    /// Logits `[b, num_labels]` from hidden states `[b, t, hidden]`.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(&self, hidden: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        let first = hidden.narrow(1, 0, 1)?.squeeze(1)?;
        match self {
            ClassificationHead::RoFormer {
                dense,
                activation,
                out_proj,
                dropout,
            } => {
                let x = dense_op(
                    dense,
                    &plan.dropout(&first, *dropout)?,
                    Some(*activation),
                    plan,
                )?;
                dense_op(out_proj, &plan.dropout(&x, *dropout)?, None, plan)
            }
            ClassificationHead::Bert {
                pooler,
                classifier,
                dropout,
            } => {
                let pooled = dense_op(pooler, &first, None, plan)?.tanh()?;
                dense_op(classifier, &plan.dropout(&pooled, *dropout)?, None, plan)
            }
        }
    }
}
