//! `layer.{i}.mlp`: transformers' `DINOv3ViTMLP` and `DINOv3ViTGatedMLP`.
//!
//! ```text
//! plain  y = down(act(up x))                       up [i, h], down [h, i]
//! gated  y = down(act(gate x) * up x)              gate, up [i, h], down [h, i] (SwiGLU with silu)
//! ```
//!
//! Biases as the config's `mlp_bias` says. The projections are dense layers of the pass's plan
//! (on the CPU one fused op each, the erf GELU inside it); at inference with bf16 products the
//! plain MLP's whole half, norm to residual, runs by row blocks ([`Mlp::half_by_rows`]).

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

use crate::activation::Activation;
use crate::cpu::tensor::Held;
use crate::fused::prenorm::mlp_half;
use crate::norm::Norm;
use crate::plan::Plan;
use crate::vision::config::{MlpKind, VisionConfig};
use crate::vision::ops::{dense, linear_layer, row_stages, Dense, HeldDense, HeldNorm};

/// The MLP of one block.
#[derive(Debug, Clone)]
pub struct Mlp {
    gate: Option<Dense>,
    up: Dense,
    down: Dense,
    activation: Activation,
}

impl Mlp {
    /// Reads `gate_proj` (gated only), `up_proj` and `down_proj` under `vb` (`layer.{i}.mlp`).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let (h, i, bias, std) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.biases.mlp,
            cfg.initializer_range,
        );
        let gate = match cfg.mlp {
            MlpKind::Gated => Some(linear_layer(h, i, bias, std, vb.pp("gate_proj"))?),
            MlpKind::Plain => None,
        };
        Ok(Mlp {
            gate,
            up: linear_layer(h, i, bias, std, vb.pp("up_proj"))?,
            down: linear_layer(i, h, bias, std, vb.pp("down_proj"))?,
            activation: cfg.hidden_act,
        })
    }

    /// `(up, down)` of a plain MLP with the erf GELU (the kind [`crate::autograd::mlp_branch`]
    /// fuses), none for the gated MLP or another activation.
    pub(crate) fn plain_gelu(&self) -> Option<(&Dense, &Dense)> {
        (self.gate.is_none() && self.activation == Activation::Gelu)
            .then_some((&self.up, &self.down))
    }

    /// The block's MLP half `h + lambda down(gelu(up(norm(h))))` (`h` `[b, t, hidden]`,
    /// `lambda` `[hidden]`) as the row stage [`mlp_half`], where the plan has [`row_stages`],
    /// `norm` is a layer norm and the MLP is plain with the erf GELU; `None` elsewhere (and
    /// where a tensor is not contiguous f32), the block's ops then run.
    ///
    /// # Errors
    /// Shapes that do not fit; candle errors.
    pub(crate) fn half_by_rows(
        &self,
        h: &Tensor,
        norm: &Norm,
        lambda: &Tensor,
        plan: Plan<'_>,
    ) -> candle_core::Result<Option<Tensor>> {
        let (Some((up, down)), Some(norm), true) =
            (self.plain_gelu(), HeldNorm::new(norm), row_stages(plan))
        else {
            return Ok(None);
        };
        let (up, down) = (HeldDense::new(up)?, HeldDense::new(down)?);
        let h = h.contiguous()?;
        let (held_h, held_lambda) = (Held::new(&h), Held::new(lambda));
        let (Some(hs), Some(norm), Some(up), Some(down), Some(lambda)) = (
            held_h.f32s(),
            norm.view(),
            up.view(),
            down.view(),
            held_lambda.f32s(),
        ) else {
            return Ok(None);
        };
        let y = mlp_half(hs, norm, (up, down), lambda)?;
        Tensor::from_vec(y, h.shape(), &Device::Cpu).map(Some)
    }

    /// `y` of `x`, both `[b, t, hidden]`.
    ///
    /// # Errors
    /// Shapes that do not fit; candle errors.
    pub fn forward(&self, x: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        let inner = match &self.gate {
            Some(gate) => {
                let gated = dense(gate, x, Some(self.activation), plan)?;
                (gated * dense(&self.up, x, None, plan)?)?
            }
            None => dense(&self.up, x, Some(self.activation), plan)?,
        }; // [b, t, intermediate]
        dense(&self.down, &inner, None, plan)
    }
}
