//! `layer.{i}`: transformers' `DINOv3ViTLayer`, a pre-norm block with layer scales.
//!
//! ```text
//! h = x + DropPath(lambda1 * Attention(LayerNorm1(x)))        norm1, attention, layer_scale1
//! y = h + DropPath(lambda2 * Mlp(LayerNorm2(h)))              norm2, mlp, layer_scale2
//! ```
//!
//! `DropPath` (stochastic depth, `drop_path_rate`) runs in training only: it drops a whole
//! sample's branch with probability `p` and scales the kept ones by `1 / (1 - p)`.
//!
//! In a training pass on the CPU kernels each line above is a link with its own forward and
//! backward on slices (`autograd::attention_branch`, `autograd::mlp_branch`) where it applies
//! (a fixed rotation or none; a plain MLP with the erf GELU), and consecutive links, across
//! blocks, run as ONE op (`autograd::chain`: candle's backward then pays its zero tensor and
//! add for the stack's hidden states once, not per half); at inference with bf16 products,
//! where the same holds, the dense stages run by row blocks (`fused::prenorm`, through
//! `VisionAttention::half_by_rows` and `Mlp::half_by_rows`); elsewhere the layers' own ops.

use candle_core::Tensor;
use candle_nn::{Init, VarBuilder};

use crate::autograd::attention_branch::{attention_link, AttentionBranch};
use crate::autograd::chain::{Chained, Link};
use crate::autograd::layer_scale::{scaled_residual, scaled_residual_slow};
use crate::autograd::mlp_branch::{mlp_link, MlpBranch};
use crate::norm::Norm;
use crate::plan::Plan;
use crate::vision::attention::VisionAttention;
use crate::vision::config::VisionConfig;
use crate::vision::mlp::Mlp;
use crate::vision::ops::fused;
use crate::vision::rope::PassRotation;

/// One block.
#[derive(Debug, Clone)]
pub struct VisionLayer {
    norm1: Norm,
    attention: VisionAttention,
    layer_scale1: Tensor,
    norm2: Norm,
    mlp: Mlp,
    layer_scale2: Tensor,
    drop_path: f64,
}

/// `layer_scale{n}.lambda1`, `[hidden]`, under `vb`.
fn layer_scale(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Tensor> {
    let init = Init::Const(cfg.layerscale_value);
    vb.get_with_hints(cfg.hidden_size, "lambda1", init)
}

impl VisionLayer {
    /// Reads `norm1`, `attention`, `layer_scale1`, `norm2`, `mlp` and `layer_scale2` under
    /// `vb` (`layer.{i}`).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(VisionLayer {
            norm1: Norm::layer_norm(h, eps, vb.pp("norm1"))?,
            attention: VisionAttention::load(vb.pp("attention"), cfg)?,
            layer_scale1: layer_scale(vb.pp("layer_scale1"), cfg)?,
            norm2: Norm::layer_norm(h, eps, vb.pp("norm2"))?,
            mlp: Mlp::load(vb.pp("mlp"), cfg)?,
            layer_scale2: layer_scale(vb.pp("layer_scale2"), cfg)?,
            drop_path: cfg.drop_path_rate,
        })
    }

    /// The block on the hidden states `x` (`[b, t, hidden]`) with the pass's rotation. A half
    /// that runs as one op with its own backward (a training pass on the CPU kernels, where it
    /// applies: [`Self::attention_link`], [`Self::mlp_link`]) joins `x`'s pending links, which
    /// run together as one op when the states are next read ([`Chained`]); the others run at
    /// once: row stages at inference with bf16 products, the layers' ops elsewhere.
    ///
    /// # Errors
    /// Shapes that do not fit; candle errors.
    pub(crate) fn forward(
        &self,
        x: &mut Chained,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<()> {
        match self.attention_link(x.input(), rotation, plan)? {
            Some(link) => x.push(link),
            None => x.then(|x| self.attention_half(x, rotation, plan))?,
        }
        match self.mlp_link(x.input(), plan)? {
            Some(link) => x.push(link),
            None => x.then(|h| self.mlp_half(h, plan))?,
        }
        Ok(())
    }

    /// `h = x + DropPath(lambda1 * Attention(LayerNorm1(x)))` where it is not a link: row
    /// stages at inference with bf16 products, the layers' ops elsewhere.
    fn attention_half(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let by_rows =
            self.attention
                .half_by_rows(x, &self.norm1, &self.layer_scale1, rotation, plan)?;
        if let Some(h) = by_rows {
            return Ok(h);
        }
        let a = self
            .attention
            .forward(&self.norm1.forward(x, plan)?, rotation, plan)?;
        self.join(&a, &self.layer_scale1, x, plan)
    }

    /// `y = h + DropPath(lambda2 * Mlp(LayerNorm2(h)))`, chosen as the attention half is.
    fn mlp_half(&self, h: &Tensor, plan: Plan<'_>) -> candle_core::Result<Tensor> {
        if let Some(y) = self
            .mlp
            .half_by_rows(h, &self.norm2, &self.layer_scale2, plan)?
        {
            return Ok(y);
        }
        let m = self.mlp.forward(&self.norm2.forward(h, plan)?, plan)?;
        self.join(&m, &self.layer_scale2, h, plan)
    }

    /// The attention half as a link ([`attention_link`], its own backward) for states of
    /// `x`'s shape where it applies: a training pass on the CPU kernels, a layer norm, and a
    /// fixed rotation or none (not RoPE-Mixed's learned one). `None` where it does not apply
    /// (nothing drawn then); where it does, the attention's dropout and the half's stochastic
    /// depth are drawn, in that order, as the layers' ops would draw them.
    fn attention_link(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Option<Link>> {
        let Some(precision) = plan.fused_training() else {
            return Ok(None);
        };
        let Norm::Layer { weight, bias, eps } = &self.norm1 else {
            return Ok(None);
        };
        let (b, t, _) = x.dims3()?;
        let Some((projections, spec)) =
            self.attention
                .fused_parts((b, t), rotation, plan, precision)
        else {
            return Ok(None);
        };
        let branch = AttentionBranch {
            norm: (weight, bias, *eps),
            projections,
            lambda: &self.layer_scale1,
        };
        let keep = plan.mode().keep_mask(b, self.drop_path);
        attention_link(x, branch, spec, keep).map(Some)
    }

    /// The MLP half as a link ([`mlp_link`], its own backward) for states of `h`'s shape
    /// where it applies: a training pass on the CPU kernels, a layer norm and a plain MLP with
    /// the erf GELU (inference has no backward: [`Mlp::half_by_rows`]). `None` where it does
    /// not apply (nothing drawn then); the half's stochastic depth drawn where it does.
    fn mlp_link(&self, h: &Tensor, plan: Plan<'_>) -> candle_core::Result<Option<Link>> {
        let Some(precision) = plan.fused_training() else {
            return Ok(None);
        };
        let Norm::Layer { weight, bias, eps } = &self.norm2 else {
            return Ok(None);
        };
        let Some((up, down)) = self.mlp.plain_gelu() else {
            return Ok(None);
        };
        let branch = MlpBranch {
            norm: (weight, bias, *eps),
            up: up.layer(),
            down: down.layer(),
            lambda: &self.layer_scale2,
        };
        let keep = plan.mode().keep_mask(h.dim(0)?, self.drop_path);
        mlp_link(h, branch, keep, precision).map(Some)
    }

    /// `residual + DropPath(lambda * branch)` (all `[b, t, hidden]` but `lambda`, `[hidden]`):
    /// in training each sample's branch is dropped with probability `drop_path` (kept ones
    /// scaled by `1 / (1 - p)`). One fused op where the plan has the CPU kernels
    /// ([`scaled_residual`]), its candle twin elsewhere.
    fn join(
        &self,
        branch: &Tensor,
        lambda: &Tensor,
        residual: &Tensor,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let keep = plan.mode().keep_mask(branch.dim(0)?, self.drop_path);
        match fused(plan) {
            Some(_) => scaled_residual(branch, lambda, residual, keep),
            None => scaled_residual_slow(branch, lambda, residual, keep),
        }
    }
}
