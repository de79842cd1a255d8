//! Self-attention with rotary position embedding on q and k (and v when `rotary_value`).
//!
//! transformers' `RoFormerSelfAttention` + `RoFormerSelfOutput`:
//!
//! ```text
//! q, k, v = x Wq + bq, x Wk + bk, x Wv + bv          split into heads: [b, t, h, d]
//! q, k (, v) <- R_m q, R_m k (, R_m v)                interleaved pairs, through the rotary kernels
//! context = Dropout(softmax(q k^T / sqrt(d) + mask)) v     [b, h, t, d]
//! out = Norm(Dropout(context Wo + bo) + x)
//! ```
//!
//! Without rotary positions (BERT's absolute table, sinusoidal, none: positions, if any, were
//! added to the embeddings) q, k and v are not rotated: transformers' `BertSelfAttention`.
//! ALiBi and T5 positions arrive as a per-head bias beside the additive mask
//! (`ScoreMask`, [`crate::position_bias`]).
//! Dropout runs in training only ([`Mode::Train`]).
//!
//! The attention proper (scores and context from rotated q, k, v) is [`softmax_attention`],
//! kept apart from the projections so that other attention kinds can take its place.
//! With `attention_type: linear` in the config, [`crate::linear_attention`] takes it (eq. 19,
//! on unrotated q and k, which it rotates after the feature map).
//!
//! In training on the CPU (as the pass's [`Plan`] says), q, k and v come from one product of
//! the three weights stacked, and softmax attention runs as one fused op from those token-major
//! projections to the token-major context (rotation, scores, mask, softmax, dropout and
//! context per (sequence, head, tile of query rows), with its own backward; see
//! `autograd::attention`), and the dense layers as fused ops too (`dense`). That op reads
//! ALiBi's and T5's per-head bias beside the mask, and gives T5's table its gradient.

use candle_core::{Tensor, D};
use candle_nn::{Linear, VarBuilder};
use rotary::{rotate_tensor, Coefficients, Direction, Order};

use crate::activation::Activation;
use crate::autograd;
use crate::autograd::attention::{mask_fits, FusedAttention};
use crate::autograd::linear::{linear, linear_slow};
use crate::config::{AttentionType, RoFormerConfig};
use crate::linear_attention::{key_mask_from_additive, LinearAttention, Masking};
use crate::mode::Mode;
use crate::norm::Norm;
use crate::plan::Plan;
use crate::score_mask::ScoreMask;

/// A dense layer `x W^T + b` of the encoder: with a bias unless the config has
/// `use_bias: false` (RoFormer-V2).
///
/// # Errors
/// Candle errors from the var builder.
pub(crate) fn encoder_linear(
    in_dim: usize,
    out_dim: usize,
    cfg: &RoFormerConfig,
    vb: VarBuilder<'_>,
) -> candle_core::Result<Linear> {
    if cfg.use_bias {
        candle_nn::linear(in_dim, out_dim, vb)
    } else {
        candle_nn::linear_no_bias(in_dim, out_dim, vb)
    }
}

/// `act(layer(x))`: the fused dense op where the plan runs the fused training ops (one node
/// of the gradient graph, see `autograd::linear`), otherwise candle-nn's layer then the
/// activation.
///
/// # Errors
/// Shapes that do not fit the layer; candle errors.
pub(crate) fn dense(
    layer: &Linear,
    x: &Tensor,
    activation: Option<Activation>,
    plan: Plan<'_>,
) -> candle_core::Result<Tensor> {
    match plan.fused_training() {
        Some(precision) => linear(x, layer, activation, precision, None),
        None => linear_slow(x, layer, activation),
    }
}

/// `attention.self`: the q, k, v projections and the rotary embedding.
#[derive(Debug, Clone)]
pub struct SelfAttention {
    pub(crate) query: Linear,
    pub(crate) key: Linear,
    pub(crate) value: Linear,
    pub(crate) heads: usize,
    head_dim: usize,
    pub(crate) rotary_value: bool,
    pub(crate) attention_type: AttentionType,
    masking: Masking,
    dropout: f64,
}

impl SelfAttention {
    /// Loads `query`, `key`, `value` (each `[hidden, hidden]` weight, bias `[hidden]`) under `vb`.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        Ok(SelfAttention {
            query: encoder_linear(h, h, cfg, vb.pp("query"))?,
            key: encoder_linear(h, h, cfg, vb.pp("key"))?,
            value: encoder_linear(h, h, cfg, vb.pp("value"))?,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
            rotary_value: cfg.rotary_value,
            attention_type: cfg.attention_type,
            masking: if cfg.is_decoder {
                Masking::Causal
            } else {
                Masking::Bidirectional
            },
            dropout: cfg.attention_probs_dropout_prob,
        })
    }

    /// Projects `x` (`[b, t, hidden]`) to heads `[b, t, h, d]` (token-major, contiguous).
    fn heads_of(&self, layer: &Linear, x: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        dense(layer, x, None, plan)?.reshape((b, t, self.heads, self.head_dim))
    }

    /// The fused training path (`autograd::attention`): softmax attention where the plan runs
    /// the fused training ops, with a mask (padding, causal) and a position bias of shapes it
    /// reads (`[1 or b, 1 or heads, 1 or t, t]` each; the bias's gradient reaches T5's table).
    /// q, k and v come from one product of the three weights stacked, `[3 hidden, hidden]`.
    /// `None` when it does not apply.
    fn forward_fused(
        &self,
        x: &Tensor,
        rope: Option<&Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Option<Tensor>> {
        let (b, t, _) = x.dims3()?;
        let Some(precision) = plan.fused_training() else {
            return Ok(None);
        };
        let fits = |m: Option<&Tensor>| m.is_none_or(|m| mask_fits(m, b, self.heads, t));
        if self.attention_type != AttentionType::Softmax || !fits(mask.mask()) || !fits(mask.bias())
        {
            return Ok(None);
        }
        let qkv = dense(&self.stacked_projections()?, x, None, plan)?;
        let spec = FusedAttention {
            heads: self.heads,
            mask: mask.mask().cloned(),
            rope: rope.cloned(),
            rotary_value: self.rotary_value,
            dropout: plan.mode().keep_mask(b * self.heads * t * t, self.dropout),
            precision,
        };
        autograd::attention::attention(&qkv, mask.bias(), spec).map(Some)
    }

    /// `query`, `key` and `value` as one layer: weights stacked `[Wq; Wk; Wv]` (`[3 hidden,
    /// hidden]`), biases `[bq; bk; bv]`, so that `x [Wq; Wk; Wv]^T = [q | k | v]`. The stacking
    /// is part of the graph: the gradients reach the three layers.
    fn stacked_projections(&self) -> candle_core::Result<Linear> {
        let layers = [&self.query, &self.key, &self.value];
        let weight = Tensor::cat(&layers.map(Linear::weight), 0)?;
        let bias = match layers.map(Linear::bias) {
            [Some(q), Some(k), Some(v)] => Some(Tensor::cat(&[q, k, v], 0)?),
            [None, None, None] => None,
            _ => {
                return Err(candle_core::Error::Msg(
                    "attention: query, key and value differ in having a bias".into(),
                ))
            }
        };
        Ok(Linear::new(weight, bias))
    }

    /// Rotates token-major heads `[b, t, h, d]` and returns them head-major `[b, h, t, d]`.
    fn rotate(x: &Tensor, rope: &Coefficients) -> candle_core::Result<Tensor> {
        rotate_tensor(x, rope.clone(), Order::TokenMajor, Direction::Forward)?
            .transpose(1, 2)?
            .contiguous()
    }

    /// Token-major heads `[b, t, h, d]` made head-major `[b, h, t, d]`, rotated when the
    /// positions are rotary (`rope` given).
    fn positioned(x: &Tensor, rope: Option<&Coefficients>) -> candle_core::Result<Tensor> {
        match rope {
            Some(rope) => Self::rotate(x, rope),
            None => x.transpose(1, 2)?.contiguous(),
        }
    }

    /// The context vectors `[b, t, hidden]` of `x` (`[b, t, hidden]`), with the tokens'
    /// rotary coefficients (`None` when positions are not rotary) and the mask and bias added
    /// to the scores.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: Option<&Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        if let Some(context) = self.forward_fused(x, rope, mask, plan)? {
            return Ok(context);
        }
        let mask = mask.sum()?;
        let (b, t, hidden) = x.dims3()?;
        let q = self.heads_of(&self.query, x, plan)?;
        let k = self.heads_of(&self.key, x, plan)?;
        let v = self.heads_of(&self.value, x, plan)?;
        let v = Self::positioned(&v, rope.filter(|_| self.rotary_value))?;
        let context = match self.attention_type {
            AttentionType::Softmax => attend(
                &Self::positioned(&q, rope)?,
                &Self::positioned(&k, rope)?,
                &v,
                mask,
                plan,
                self.dropout,
            )?,
            // Eq. 19 rotates phi(q), phi(k): it takes them unrotated, head-major. It has no
            // attention probabilities to drop.
            AttentionType::Linear => LinearAttention::default().forward(
                &q.transpose(1, 2)?.contiguous()?,
                &k.transpose(1, 2)?.contiguous()?,
                &v,
                rope,
                key_mask_from_additive(mask, b, t)?.as_ref(),
                self.masking,
            )?,
        }; // [b, h, t, d]
        context.transpose(1, 2)?.reshape((b, t, hidden))
    }
}

/// Scaled dot-product attention over head-major `q`, `k`, `v` (`[b, h, t, d]`):
/// `Dropout(softmax(q k^T / sqrt(d) + mask)) v`, with `mask` additive and broadcastable to
/// `[b, h, t, t]` and dropout of probability `dropout` on the probabilities in training.
/// Returns `[b, h, t, d]`. In training the softmax is `autograd::softmax_last_dim`, which
/// carries gradients.
///
/// # Errors
/// Candle errors only.
pub fn softmax_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    mode: Mode<'_>,
    dropout: f64,
) -> candle_core::Result<Tensor> {
    attend(
        q,
        k,
        v,
        mask,
        Plan::new(mode, q.device(), q.dtype()),
        dropout,
    )
}

/// [`softmax_attention`] in a pass of plan `plan`.
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    plan: Plan<'_>,
    dropout: f64,
) -> candle_core::Result<Tensor> {
    let d = q.dim(D::Minus1)?;
    let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?; // [b, h, t, t]
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?,
        None => scores,
    };
    let probs = if plan.is_train() {
        plan.dropout(&autograd::softmax_last_dim(&scores)?, dropout)?
    } else {
        candle_nn::ops::softmax_last_dim(&scores)?
    };
    probs.matmul(v)
}

/// `attention`: self-attention then `output.dense`, residual and norm.
#[derive(Debug, Clone)]
pub struct Attention {
    pub(crate) self_attention: SelfAttention,
    pub(crate) dense: Linear,
    pub(crate) norm: Norm,
    dropout: f64,
}

impl Attention {
    /// Loads `self.*` and `output.dense`, `output.LayerNorm` under `vb`.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        Ok(Attention {
            self_attention: SelfAttention::load(vb.pp("self"), cfg)?,
            dense: encoder_linear(h, h, cfg, vb.pp("output").pp("dense"))?,
            norm: Norm::load(h, cfg, vb.pp("output").pp("LayerNorm"))?,
            dropout: cfg.hidden_dropout_prob,
        })
    }

    /// `Norm(Dropout(SelfAttention(x) Wo + bo) + x)`, `[b, t, hidden]` in and out.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: Option<&Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let context = self.self_attention.forward(x, rope, mask, plan)?;
        let projected = dense(&self.dense, &context, None, plan)?;
        self.norm.forward_add(&projected, x, self.dropout, plan)
    }
}
