//! The encoder: a stack of layers (attention, then feed-forward) sharing one rotary table.
//!
//! transformers' `RoFormerLayer` / `RoFormerEncoder`. A layer is
//!
//! ```text
//! a = Attention(x)                                  (see `attention`)
//! y = Norm(Dropout(act(a W1 + b1) W2 + b2) + a)     intermediate.dense, output.dense, output.LayerNorm
//! ```
//!
//! With ALiBi or T5 positions ([`crate::position_bias`]) the encoder computes the bias
//! `[1 or b, heads, t, t]` once per pass and hands every layer the mask and the bias
//! ([`ScoreMask`]; T5's table is shared by the layers, as in T5).
//!
//! Where the pass's [`Plan`] runs the fused encoder (inference on the CPU in f32) and the
//! attention is softmax, the stack runs as the fused passes of `fused`, whatever the positions
//! ([`Encoder::runs_fused`]); in training, and elsewhere, layer by layer, as written above, every op carrying gradients (in training on
//! the CPU in f32 through the fused training ops of `autograd`: a dense layer with its
//! activation, the attention, and dropout with the residual add and the layer norm are one
//! op each).

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Linear, VarBuilder};
use rotary::{Positions, Rope, ScaledRope};

use crate::activation::Activation;
use crate::attention::{dense, encoder_linear, Attention};
use crate::autograd::attention::{mask_fits, FusedAttention};
use crate::autograd::encoder_layer::{encoder_layer, EncoderLayer, LayerNormParts};
use crate::config::{AttentionType, PositionEmbeddingType, RoFormerConfig};
use crate::cpu::Precision;
use crate::error::{ModelError, Result};
use crate::fused::{self, LayerParts, PackedLayer};
use crate::norm::Norm;
use crate::plan::Plan;
use crate::position_bias::PositionBias;
use crate::rope_scaling::{rotary_table, RopeScaling};
use crate::score_mask::ScoreMask;

/// One encoder layer (`encoder.layer.{i}`).
#[derive(Debug, Clone)]
pub struct Layer {
    attention: Attention,
    intermediate: Linear,
    activation: Activation,
    output: Linear,
    norm: Norm,
    layer_norm_eps: f64,
    dropout: f64,
    /// The dropout of the attention probabilities.
    attention_dropout: f64,
    /// The dense weights packed for bf16 products (set by [`Encoder::set_precision`]).
    packed: Option<Arc<PackedLayer>>,
}

impl Layer {
    /// Loads `attention.*`, `intermediate.dense`, `output.dense` and `output.LayerNorm` under
    /// `vb`.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> candle_core::Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Layer {
            attention: Attention::load(vb.pp("attention"), cfg)?,
            intermediate: encoder_linear(h, i, cfg, vb.pp("intermediate").pp("dense"))?,
            activation: cfg.hidden_act,
            output: encoder_linear(i, h, cfg, vb.pp("output").pp("dense"))?,
            norm: Norm::load(h, cfg, vb.pp("output").pp("LayerNorm"))?,
            layer_norm_eps: cfg.layer_norm_eps,
            dropout: cfg.hidden_dropout_prob,
            attention_dropout: cfg.attention_probs_dropout_prob,
            packed: None,
        })
    }

    /// Runs the layer on `x` (`[b, t, hidden]`), rotating by `rope` when positions are rotary.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: Option<&rotary::Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        match self.forward_fused(x, rope, mask, plan)? {
            Some(y) => Ok(y),
            None => self.forward_sublayers(x, rope, mask, plan),
        }
    }

    /// [`Layer::forward`] as its two sub-layers, op by op (each op fused where the plan runs
    /// the fused training ops): the path of every layer the whole-layer op does not take, and
    /// with candle's kernels its reference.
    fn forward_sublayers(
        &self,
        x: &Tensor,
        rope: Option<&rotary::Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let a = self.attention.forward(x, rope, mask, plan)?;
        let inner = dense(&self.intermediate, &a, Some(self.activation), plan)?;
        let out = dense(&self.output, &inner, None, plan)?;
        self.norm.forward_add(&out, &a, self.dropout, plan)
    }

    /// The layer as one training op with its own backward (`autograd::encoder_layer`) where
    /// the plan runs the fused training ops and the layer fits it: softmax attention, layer
    /// norms, the erf GELU, query, key and value all with or all without a bias, no position
    /// bias on the scores (ALiBi's and T5's take the op-by-op path) and a mask the fused
    /// attention reads. The dropout masks are drawn in the op-by-op path's order. `None`
    /// where it does not apply.
    fn forward_fused(
        &self,
        x: &Tensor,
        rope: Option<&rotary::Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> candle_core::Result<Option<Tensor>> {
        let sa = &self.attention.self_attention;
        let (b, t, hidden) = x.dims3()?;
        let (Some(precision), Some(attention_norm), Some(output_norm)) = (
            plan.fused_training(),
            layer_norm_parts(&self.attention.norm),
            layer_norm_parts(&self.norm),
        ) else {
            return Ok(None);
        };
        let biases = [&sa.query, &sa.key, &sa.value].map(|l| l.bias().is_some());
        let fits = sa.attention_type == AttentionType::Softmax
            && self.activation == Activation::Gelu
            && (biases == [true; 3] || biases == [false; 3])
            && mask.bias().is_none()
            && mask.mask().is_none_or(|m| mask_fits(m, b, sa.heads, t));
        if !fits {
            return Ok(None);
        }
        let mode = plan.mode();
        let spec = FusedAttention {
            heads: sa.heads,
            mask: mask.mask().cloned(),
            rope: rope.cloned(),
            rotary_value: sa.rotary_value,
            dropout: mode.keep_mask(b * sa.heads * t * t, self.attention_dropout),
            precision,
        };
        let tails = [(); 2].map(|_| mode.keep_mask(b * t * hidden, self.dropout));
        let parts = EncoderLayer {
            qkv: [&sa.query, &sa.key, &sa.value],
            attention_output: &self.attention.dense,
            attention_norm,
            intermediate: &self.intermediate,
            output: &self.output,
            output_norm,
        };
        encoder_layer(x, parts, spec, tails).map(Some)
    }

    /// The layer's weights for [`fused::encoder_forward`], for softmax attention.
    pub(crate) fn fusable(&self) -> Option<LayerParts<'_>> {
        let sa = &self.attention.self_attention;
        (sa.attention_type == AttentionType::Softmax).then_some(LayerParts {
            query: &sa.query,
            key: &sa.key,
            value: &sa.value,
            heads: sa.heads,
            rotary_value: sa.rotary_value,
            attention_dense: &self.attention.dense,
            attention_norm: &self.attention.norm,
            intermediate: &self.intermediate,
            activation: self.activation,
            output: &self.output,
            output_norm: &self.norm,
            layer_norm_eps: self.layer_norm_eps,
            packed: self.packed.as_deref(),
        })
    }
}

/// A layer norm's `(weight, bias, eps)`; `None` for an RMS norm.
fn layer_norm_parts(norm: &Norm) -> Option<LayerNormParts<'_>> {
    match norm {
        Norm::Layer { weight, bias, eps } => Some((weight, bias, *eps)),
        Norm::Rms { .. } => None,
    }
}

/// The layer stack and its rotary embedding: pair `i` of a head at position `m` rotates by
/// `m * 10000^(-2i / head_dim)` (interleaved pairs), the table transformers builds in
/// `RoFormerSinusoidalPositionalEmbedding`, computed here for any position, or rescaled at
/// inference for longer inputs ([`Encoder::set_rope_scaling`]). Without rotary positions there
/// is no rotation (`rope` is `None`); with ALiBi or T5 positions, the bias of the attention
/// scores (`bias`).
#[derive(Debug)]
pub struct Encoder {
    layers: Vec<Layer>,
    rope: Option<ScaledRope>,
    bias: Option<PositionBias>,
}

impl Encoder {
    /// Loads T5's `relative_attention_bias.weight` (`t5_relative` positions only) and
    /// `layer.{0..num_hidden_layers}` under `vb` (the `encoder` scope).
    ///
    /// # Errors
    /// Candle errors from the var builder, or the rotary configuration's (an odd head dim,
    /// which a validated config excludes).
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        let bias = PositionBias::load(vb.clone(), cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("layer").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let rope = match cfg.position_embedding_type {
            PositionEmbeddingType::Rotary => Some(rotary_table(cfg.head_dim(), None)?),
            _ => None,
        };
        Ok(Encoder { layers, rope, bias })
    }

    /// Sets the precision of the fused inference path's matrix products: [`Precision::Bf16`]
    /// packs every layer's dense weights once as bf16 (on a CPU with a native bf16 dot
    /// product; elsewhere it stays f32), [`Precision::F32`] drops them. Training passes are
    /// unaffected (their precision is [`crate::Mode::Train`]'s).
    ///
    /// # Errors
    /// A weight that cannot be read as f32.
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        for layer in &mut self.layers {
            layer.packed = match (precision.effective(), layer.fusable()) {
                (Precision::Bf16, Some(parts)) => Some(Arc::new(PackedLayer::new(&parts)?)),
                _ => None,
            };
        }
        Ok(())
    }

    /// The layers.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The rotary embedding of the layers (`None` when positions are not rotary); under a
    /// dynamic NTK scaling, the one of passes up to the training length.
    pub fn rope(&self) -> Option<&Rope> {
        self.rope.as_ref().map(ScaledRope::rope)
    }

    /// The rotary embedding with its scaling, the table of each pass length (`None` when
    /// positions are not rotary).
    pub fn rotary(&self) -> Option<&ScaledRope> {
        self.rope.as_ref()
    }

    /// Rescales the rotary frequencies for inputs longer than the training length (see
    /// [`crate::rope_scaling`] for the formulas): every later pass, fused or op by op, at
    /// inference or in training, rotates with them at the same positions. `None` restores the
    /// paper's frequencies.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when positions are not rotary, for a factor below 1 or
    /// not finite, or a training length of 0.
    pub fn set_rope_scaling(&mut self, scaling: Option<RopeScaling>) -> Result<()> {
        let Some(table) = &self.rope else {
            return Err(ModelError::InvalidConfig {
                field: "position_embedding_type",
                reason: "a RoPE scaling needs rotary positions".into(),
            });
        };
        self.rope = Some(rotary_table(table.rope().head_dim(), scaling.as_ref())?);
        Ok(())
    }

    /// The bias of the attention scores (`None` unless positions are ALiBi or T5).
    pub fn position_bias(&self) -> Option<&PositionBias> {
        self.bias.as_ref()
    }

    /// Whether a pass of `plan` runs the fused inference encoder (`crate::fused`): where the
    /// plan allows it, whatever the positions (a position bias enters as a per-head mask). The
    /// layers must still be softmax attention and the tensors and mask of shapes the fused path
    /// takes; otherwise the pass runs op by op (`Encoder::forward_ops`).
    pub fn runs_fused(&self, plan: Plan<'_>) -> bool {
        plan.fused_encoder()
    }

    /// What every layer adds to its scores: `mask` (broadcastable to `[b, heads, t, t]`) and
    /// the position bias `[1 or b, heads, t, t]`, if any, of `b` sequences of `t` tokens at
    /// `positions`.
    ///
    /// # Errors
    /// The errors of [`PositionBias::bias`].
    fn score_mask<'m>(
        &self,
        mask: Option<&'m Tensor>,
        positions: Positions<'_>,
        x: &Tensor,
    ) -> Result<ScoreMask<'m>> {
        let bias = match &self.bias {
            Some(bias) => {
                let (b, t, _) = x.dims3()?;
                Some(bias.bias(positions, b, t, x.dtype(), x.device())?)
            }
            None => None,
        };
        Ok(ScoreMask::new(mask, bias))
    }

    /// Runs every layer on `x` (`[b, t, hidden]`) with the tokens at `positions` and an
    /// additive mask broadcastable to `[b, heads, t, t]` (plus the position bias, if any). The
    /// fused CPU path runs where [`Encoder::runs_fused`] says and the layers and mask fit it.
    ///
    /// # Errors
    /// Rotary and position bias errors for positions that do not fit the batch (as
    /// [`ModelError::Input`]), and candle errors.
    pub fn forward(
        &self,
        x: &Tensor,
        positions: Positions<'_>,
        mask: Option<&Tensor>,
        plan: Plan<'_>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let coefficients = match &self.rope {
            Some(rope) => {
                let input = |e: rotary::RopeError| ModelError::Input(e.to_string());
                let pass = rope.for_pass(positions, b, t).map_err(input)?;
                Some(pass.coefficients(positions, b, t).map_err(input)?)
            }
            None => None,
        };
        let mask = self.score_mask(mask, positions, x)?;
        if self.runs_fused(plan) {
            if let Some(parts) = self
                .layers
                .iter()
                .map(Layer::fusable)
                .collect::<Option<Vec<_>>>()
            {
                let rope = coefficients.as_ref().map(|c| c.view());
                if let Some(h) = fused::encoder_forward(&parts, x, rope, mask.sum()?)? {
                    return Ok(h);
                }
            }
        }
        self.forward_ops(x, coefficients.as_ref(), &mask, plan)
    }

    /// The layers op by op, on any device and dtype: the reference of the fused path, and the
    /// training path.
    pub(crate) fn forward_ops(
        &self,
        x: &Tensor,
        coefficients: Option<&rotary::Coefficients>,
        mask: &ScoreMask<'_>,
        plan: Plan<'_>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h, coefficients, mask, plan)?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests;
