//! The encoder: a stack of layers (attention, then feed-forward) sharing one rotary table.
//!
//! transformers' `RoFormerLayer` / `RoFormerEncoder`. A layer is
//!
//! ```text
//! a = Attention(x)                                  (see `attention`)
//! y = Norm(act(a W1 + b1) W2 + b2 + a)              intermediate.dense, output.dense, output.LayerNorm
//! ```
//!
//! On the CPU in f32 with softmax attention the stack runs as the fused passes of
//! `fused`; elsewhere layer by layer, op by op, as written above.

use candle_core::Tensor;
use candle_nn::{Linear, Module, VarBuilder};
use rotary::{Layout, Positions, Rope, DEFAULT_BASE};

use crate::activation::Activation;
use crate::attention::{encoder_linear, Attention};
use crate::config::{AttentionType, RoFormerConfig};
use crate::error::{ModelError, Result};
use crate::fused::{self, LayerParts};
use crate::norm::Norm;

/// One encoder layer (`encoder.layer.{i}`).
#[derive(Debug, Clone)]
pub struct Layer {
    attention: Attention,
    intermediate: Linear,
    activation: Activation,
    output: Linear,
    norm: Norm,
    layer_norm_eps: f64,
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
        })
    }

    /// Runs the layer on `x` (`[b, t, hidden]`).
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: &rotary::Coefficients,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let a = self.attention.forward(x, rope, mask)?;
        let inner = self.activation.forward(&self.intermediate.forward(&a)?)?;
        self.norm.forward(&(self.output.forward(&inner)? + a)?)
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
        })
    }
}

/// The layer stack and its rotary embedding: pair `i` of a head at position `m` rotates by
/// `m * 10000^(-2i / head_dim)` (interleaved pairs), the table transformers builds in
/// `RoFormerSinusoidalPositionalEmbedding`, computed here for any position.
#[derive(Debug)]
pub struct Encoder {
    layers: Vec<Layer>,
    rope: Rope,
}

impl Encoder {
    /// Loads `layer.{0..num_hidden_layers}` under `vb` (the `encoder` scope).
    ///
    /// # Errors
    /// Candle errors from the var builder, or the rotary configuration's (an odd head dim,
    /// which a validated config excludes).
    pub fn load(vb: VarBuilder<'_>, cfg: &RoFormerConfig) -> Result<Self> {
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("layer").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let d = cfg.head_dim();
        let rope = Rope::new(d, d, DEFAULT_BASE, Layout::Interleaved).map_err(|e| {
            ModelError::InvalidConfig {
                field: "num_attention_heads",
                reason: e.to_string(),
            }
        })?;
        Ok(Encoder { layers, rope })
    }

    /// The layers.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The rotary embedding of the layers.
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// Runs every layer on `x` (`[b, t, hidden]`) with the tokens at `positions` and an
    /// additive mask broadcastable to `[b, heads, t, t]`.
    ///
    /// # Errors
    /// Rotary errors for positions that do not fit the batch (as [`ModelError::Input`]), and
    /// candle errors.
    pub fn forward(
        &self,
        x: &Tensor,
        positions: Positions<'_>,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let coefficients = self
            .rope
            .coefficients(positions, b, t)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        if let Some(parts) = self
            .layers
            .iter()
            .map(Layer::fusable)
            .collect::<Option<Vec<_>>>()
        {
            if let Some(h) = fused::encoder_forward(&parts, x, coefficients.view(), mask)? {
                return Ok(h);
            }
        }
        self.forward_ops(x, &coefficients, mask)
    }

    /// The layers op by op, on any device and dtype: the reference of the fused path.
    pub(crate) fn forward_ops(
        &self,
        x: &Tensor,
        coefficients: &rotary::Coefficients,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h, coefficients, mask)?;
        }
        Ok(h)
    }
}
