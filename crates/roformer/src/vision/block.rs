//! `layer.{i}`: transformers' `DINOv3ViTLayer`, a pre-norm block with layer scales.
//!
//! ```text
//! h = x + DropPath(lambda1 * Attention(LayerNorm1(x)))        norm1, attention, layer_scale1
//! y = h + DropPath(lambda2 * Mlp(LayerNorm2(h)))              norm2, mlp, layer_scale2
//! ```
//!
//! `DropPath` (stochastic depth, `drop_path_rate`) runs in training only: it drops a whole
//! sample's branch with probability `p` and scales the kept ones by `1 / (1 - p)`.

use candle_core::Tensor;
use candle_nn::{Init, VarBuilder};

use crate::autograd::layer_scale::{scaled_residual, scaled_residual_slow};
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

    /// The block on `x` (`[b, t, hidden]`) with the pass's rotation.
    ///
    /// # Errors
    /// Shapes that do not fit; candle errors.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rotation: &PassRotation,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let a = self
            .attention
            .forward(&self.norm1.forward(x, plan)?, rotation, plan)?;
        let h = self.join(&a, &self.layer_scale1, x, plan)?;
        let m = self.mlp.forward(&self.norm2.forward(&h, plan)?, plan)?;
        self.join(&m, &self.layer_scale2, &h, plan)
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
