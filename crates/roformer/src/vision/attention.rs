//! `layer.{i}.attention`: transformers' `DINOv3ViTAttention`, the attention of a block.
//!
//! ```text
//! q, k, v = x Wq (+ bq), x Wk (+ bk), x Wv (+ bv)     [b, t, hidden] -> heads [b, t, heads, d]
//! q, k <- R_p q, R_p k                                patch tokens only (prefix rows: angle 0)
//! context = Dropout(softmax(q k^T / sqrt(d))) v       [b, heads, t, d]
//! out = context Wo (+ bo)                             [b, t, hidden]
//! ```
//!
//! Each bias is the config's choice (`query_bias`, `key_bias`, `value_bias`, `proj_bias`).
//! Where the plan has the CPU kernels, q, k and v come from one product of the three weights
//! stacked (a missing bias is a zero block of the stacked one) and the attention runs as the
//! encoder's fused op (`autograd::attention`), which rotates q and k with the pass's per-token
//! table itself; RoPE-Mixed turns them first (its frequencies are per head and learned).
//! At inference with bf16 products the whole half, norm to residual, runs as the row stages
//! of `fused::prenorm` ([`VisionAttention::half_by_rows`]) where the rotation is fixed or none.
//! Elsewhere every step is a candle op: the projections, the rotation
//! ([`crate::vision::rope`]'s reference) and [`crate::attention::softmax_attention`].

use std::sync::OnceLock;

use candle_core::{Device, Tensor};
use candle_nn::{Init, Linear, VarBuilder};
use rotary::Coefficients;

use crate::attention::softmax_attention;
use crate::autograd::attention::{attention, FusedAttention};
use crate::cpu::tensor::Held;
use crate::cpu::Precision;
use crate::fused::prenorm::{attention_half, Heads};
use crate::norm::Norm;
use crate::plan::Plan;
use crate::vision::config::{PositionKind, VisionConfig};
use crate::vision::ops::{dense, fused, linear_layer, row_stages, Dense, HeldDense, HeldNorm};
use crate::vision::rope::{rotate_heads, PassRotation};

/// The attention of one block.
#[derive(Debug, Clone)]
pub struct VisionAttention {
    q_proj: Dense,
    k_proj: Dense,
    v_proj: Dense,
    o_proj: Dense,
    heads: usize,
    head_dim: usize,
    dropout: f64,
    /// RoPE-Mixed's learned frequencies `[heads, 2, d/2]` (`rope_freqs`), for that kind only.
    freqs: Option<Tensor>,
    /// The three projections stacked, built once when no weight of theirs is a variable.
    stacked_fixed: OnceLock<Dense>,
}

impl VisionAttention {
    /// Reads `q_proj`, `k_proj`, `v_proj`, `o_proj` (weights `[hidden, hidden]`, biases
    /// `[hidden]` as the config says) and, for `rope_mixed`, `rope_freqs` `[heads, 2, d/2]`
    /// under `vb` (`layer.{i}.attention`). A builder that creates tensors (a `VarMap`) makes
    /// the frequencies zeros: see [`crate::vision::init`] for their initial values.
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let (h, std, b) = (cfg.hidden_size, cfg.initializer_range, cfg.biases);
        let (heads, head_dim) = (cfg.num_attention_heads, cfg.head_dim());
        let freqs = match cfg.position {
            PositionKind::RopeMixed => {
                Some(vb.get_with_hints((heads, 2, head_dim / 2), "rope_freqs", Init::Const(0.0))?)
            }
            _ => None,
        };
        Ok(VisionAttention {
            q_proj: linear_layer(h, h, b.query, std, vb.pp("q_proj"))?,
            k_proj: linear_layer(h, h, b.key, std, vb.pp("k_proj"))?,
            v_proj: linear_layer(h, h, b.value, std, vb.pp("v_proj"))?,
            o_proj: linear_layer(h, h, b.proj, std, vb.pp("o_proj"))?,
            heads,
            head_dim,
            dropout: cfg.attention_dropout,
            freqs,
            stacked_fixed: OnceLock::new(),
        })
    }

    /// `o_proj(context)`, `[b, t, hidden]`, of `x` (`[b, t, hidden]`, the normed hidden
    /// states) with the pass's rotation.
    ///
    /// # Errors
    /// Shapes that do not fit; a learned rotation without frequencies; candle errors.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let context = match fused(plan) {
            Some(precision) => self.context_fused(x, rotation, plan, precision)?,
            None => self.context_ops(x, rotation, plan)?,
        };
        dense(&self.o_proj, &context, None, plan)
    }

    /// The four projections (`q`, `k`, `v`, `o`) and the fused attention's spec for sequences
    /// of `t` tokens in `b` samples, for the block's attention half as one op
    /// ([`crate::autograd::attention_branch`]): where the rotation is a fixed table or none
    /// (RoPE-Mixed turns q and k by learned frequencies first, in candle's graph: `None`).
    /// Draws the attention's dropout mask, as [`VisionAttention::forward`] would.
    pub(crate) fn fused_parts(
        &self,
        (b, t): (usize, usize),
        rotation: &PassRotation,
        plan: Plan<'_>,
        precision: Precision,
    ) -> Option<([&Linear; 4], FusedAttention)> {
        let rope = match rotation {
            PassRotation::Fixed { table, .. } => Some(table.clone()),
            PassRotation::None => None,
            PassRotation::Mixed { .. } => return None,
        };
        let spec = self.spec((b, t), rope, plan, precision);
        let layers = [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj].map(Dense::layer);
        Some((layers, spec))
    }

    /// The learned frequencies, required by a `Mixed` rotation.
    fn freqs(&self) -> candle_core::Result<&Tensor> {
        self.freqs.as_ref().ok_or_else(|| {
            candle_core::Error::Msg("attention: a learned rotation without rope_freqs".into())
        })
    }

    /// The context `[b, t, hidden]` through the fused attention op.
    fn context_fused(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
        precision: Precision,
    ) -> candle_core::Result<Tensor> {
        let qkv = dense(&self.stacked()?, x, None, plan)?; // [b, t, 3 hidden]
        self.attend(&qkv, rotation, plan, precision)
    }

    /// The context `[b, t, hidden]` of the stacked projections `qkv` (`[b, t, 3 hidden]`)
    /// through the fused attention op, which turns q and k by a fixed table itself
    /// (RoPE-Mixed's learned rotation turns them first).
    fn attend(
        &self,
        qkv: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
        precision: Precision,
    ) -> candle_core::Result<Tensor> {
        let (b, t, _) = qkv.dims3()?;
        let (qkv, rope) = match rotation {
            PassRotation::Fixed { table, .. } => (qkv.clone(), Some(table.clone())),
            PassRotation::Mixed { positions } => (self.turn_stacked(qkv, positions)?, None),
            PassRotation::None => (qkv.clone(), None),
        };
        attention(&qkv, None, self.spec((b, t), rope, plan, precision))
    }

    /// The fused attention's spec for `b` sequences of `t` tokens with the rotary table
    /// `rope`, drawing the attention's dropout mask from the plan.
    fn spec(
        &self,
        (b, t): (usize, usize),
        rope: Option<Coefficients>,
        plan: Plan<'_>,
        precision: Precision,
    ) -> FusedAttention {
        FusedAttention {
            heads: self.heads,
            mask: None,
            rope,
            rotary_value: false,
            dropout: plan.mode().keep_mask(b * self.heads * t * t, self.dropout),
            precision,
        }
    }

    /// The block's attention half `x + lambda o_proj(context(norm(x)))` (`x` `[b, t, hidden]`,
    /// `lambda` `[hidden]`) as the row stages of [`attention_half`] (the stacked q/k/v, the
    /// attention, the output projection), where the plan has [`row_stages`], `norm` is a layer
    /// norm, the head dim is even and the rotation is a fixed table or none; `None` elsewhere
    /// (and where a tensor is not contiguous f32), the block's ops then run.
    ///
    /// # Errors
    /// Shapes that do not fit; candle errors.
    pub(crate) fn half_by_rows(
        &self,
        x: &Tensor,
        norm: &Norm,
        lambda: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Option<Tensor>> {
        let rope = match rotation {
            PassRotation::Fixed { table, .. } => Some(table.view()),
            PassRotation::None => None,
            PassRotation::Mixed { .. } => return Ok(None),
        };
        let (Some(norm), true, true) = (
            HeldNorm::new(norm),
            self.head_dim.is_multiple_of(2),
            row_stages(plan),
        ) else {
            return Ok(None);
        };
        let stacked = self.stacked()?;
        let (qkv, out) = (HeldDense::new(&stacked)?, HeldDense::new(&self.o_proj)?);
        let x = x.contiguous()?;
        let (b, t, _) = x.dims3()?;
        let (held_x, held_lambda) = (Held::new(&x), Held::new(lambda));
        let (Some(xs), Some(norm), Some(qkv), Some(out), Some(lambda)) = (
            held_x.f32s(),
            norm.view(),
            qkv.view(),
            out.view(),
            held_lambda.f32s(),
        ) else {
            return Ok(None);
        };
        let dims = Heads {
            b,
            t,
            heads: self.heads,
            d: self.head_dim,
        };
        let y = attention_half(xs, dims, norm, (qkv, out), rope, lambda)?;
        Tensor::from_vec(y, x.shape(), &Device::Cpu).map(Some)
    }

    /// `[q | k | v]` (`[b, t, 3 hidden]`) with q and k turned by the learned frequencies.
    fn turn_stacked(&self, qkv: &Tensor, positions: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, width) = qkv.dims3()?;
        let h = width / 3;
        let turn = |i: usize| -> candle_core::Result<Tensor> {
            let heads = qkv
                .narrow(2, i * h, h)?
                .reshape((b, t, self.heads, self.head_dim))?
                .transpose(1, 2)?; // [b, heads, t, d]
            let turned = rotate_heads(&heads.contiguous()?, positions, self.freqs()?)?;
            turned.transpose(1, 2)?.reshape((b, t, h))
        };
        Tensor::cat(&[turn(0)?, turn(1)?, qkv.narrow(2, 2 * h, h)?], 2)
    }

    /// The context `[b, t, hidden]` op by op, on any device and dtype: the reference.
    fn context_ops(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let heads_of = |layer: &Dense| -> candle_core::Result<Tensor> {
            dense(layer, x, None, plan)?
                .reshape((b, t, self.heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous() // [b, heads, t, d]
        };
        let (q, k, v) = (
            heads_of(&self.q_proj)?,
            heads_of(&self.k_proj)?,
            heads_of(&self.v_proj)?,
        );
        let (q, k) = match rotation {
            PassRotation::Fixed {
                positions, omega, ..
            } => (
                rotate_heads(&q, positions, omega)?,
                rotate_heads(&k, positions, omega)?,
            ),
            PassRotation::Mixed { positions } => (
                rotate_heads(&q, positions, self.freqs()?)?,
                rotate_heads(&k, positions, self.freqs()?)?,
            ),
            PassRotation::None => (q, k),
        };
        let context = softmax_attention(&q, &k, &v, None, plan.mode(), self.dropout)?;
        context.transpose(1, 2)?.reshape((b, t, h)) // [b, t, hidden]
    }

    /// `q_proj`, `k_proj` and `v_proj` as one layer: weights `[Wq; Wk; Wv]` (`[3 hidden,
    /// hidden]`) and, when any has a bias, biases `[bq; bk; bv]` with zeros for the missing
    /// ones. The stacking is part of the graph: the gradients reach the three layers. Where
    /// none of them is a variable (a model loaded for inference) the layer is built once and
    /// kept, with its packed weight.
    fn stacked(&self) -> candle_core::Result<Dense> {
        let layers = [&self.q_proj, &self.k_proj, &self.v_proj].map(Dense::layer);
        let fixed = layers
            .iter()
            .all(|l| !l.weight().track_op() && !l.bias().is_some_and(Tensor::track_op));
        if let Some(kept) = self.stacked_fixed.get().filter(|_| fixed) {
            return Ok(kept.clone());
        }
        let weight = Tensor::cat(&layers.map(Linear::weight), 0)?;
        let stacked = if layers.iter().all(|l| l.bias().is_none()) {
            Dense::new(Linear::new(weight, None))
        } else {
            let (h, _) = layers[0].weight().dims2()?;
            let zeros = Tensor::zeros(h, weight.dtype(), weight.device())?;
            let biases = layers.map(|l| l.bias().unwrap_or(&zeros));
            Dense::new(Linear::new(weight, Some(Tensor::cat(&biases, 0)?)))
        };
        if fixed {
            return Ok(self.stacked_fixed.get_or_init(|| stacked).clone());
        }
        Ok(stacked)
    }
}
