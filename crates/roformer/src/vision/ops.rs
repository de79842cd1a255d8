//! The execution choice of the vision layers, made from the pass's [`Plan`]: where the plan has
//! the CPU kernels ([`Kernels::Cpu`], f32 on the CPU), the fused CPU ops of
//! [`crate::autograd`] run, at inference as in training (the fused inference encoder of the
//! text model is post-norm RoFormer, a different layer); elsewhere candle's ops, one per step.
//! At inference with bf16 products a block's dense stages run by row blocks instead
//! ([`row_stages`], [`crate::fused::prenorm`]), their tensors held as slices here.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::Linear;

use crate::activation::Activation;
use crate::autograd::linear::{linear, linear_slow, PackedWeight};
use crate::cpu::bf16::PackedB;
use crate::cpu::tensor::Held;
use crate::cpu::Precision;
use crate::fused::prenorm::{PackedDense, RowLayerNorm};
use crate::norm::Norm;
use crate::plan::{Kernels, Plan};

/// The precision of the fused CPU ops, when the plan runs them.
pub(crate) fn fused(plan: Plan<'_>) -> Option<Precision> {
    match plan.kernels() {
        Kernels::Cpu(precision) => Some(precision),
        Kernels::Candle => None,
    }
}

/// Whether a block's dense stages run as the row stages of [`crate::fused::prenorm`]: at
/// inference on the CPU kernels with bf16 products, on a CPU with a native bf16 kernel.
pub(crate) fn row_stages(plan: Plan<'_>) -> bool {
    !plan.is_train() && fused(plan).is_some_and(|p| p.effective() == Precision::Bf16)
}

/// A dense layer, with its weight packed once for the bf16 products of inference (see
/// [`PackedWeight`]: only a weight that is no variable is packed and kept).
#[derive(Debug, Clone)]
pub(crate) struct Dense {
    layer: Linear,
    packed: PackedWeight,
}

impl Dense {
    /// `layer`, nothing packed yet.
    pub(crate) fn new(layer: Linear) -> Dense {
        Dense {
            layer,
            packed: PackedWeight::default(),
        }
    }

    /// The candle layer: `W` `[out, in]` and the bias.
    pub(crate) fn layer(&self) -> &Linear {
        &self.layer
    }

    /// `W^T` packed for the bf16 products: the words kept for a layer that is no variable
    /// (packed on first use, see [`PackedWeight`]), packed now for one that is.
    ///
    /// # Errors
    /// A weight that is not f32 on the CPU.
    fn packed_bf16(&self) -> candle_core::Result<Arc<PackedB>> {
        let fixed =
            !self.layer.weight().track_op() && !self.layer.bias().is_some_and(Tensor::track_op);
        let cache = if fixed {
            self.packed.clone()
        } else {
            PackedWeight::default()
        };
        cache.get_or_pack(self.layer.weight())
    }
}

/// A dense layer held for the row stages: its packed `W^T` and its bias, read-locked.
pub(crate) struct HeldDense<'a> {
    packed: Arc<PackedB>,
    bias: Option<Held<'a>>,
}

impl<'a> HeldDense<'a> {
    /// Packs (or takes the kept words of) `dense`'s weight and holds its bias.
    ///
    /// # Errors
    /// A weight that is not f32 on the CPU.
    pub(crate) fn new(dense: &'a Dense) -> candle_core::Result<Self> {
        Ok(HeldDense {
            packed: dense.packed_bf16()?,
            bias: dense.layer.bias().map(Held::new),
        })
    }

    /// The layer as the row stages read it; `None` when the bias is not contiguous f32.
    pub(crate) fn view(&self) -> Option<PackedDense<'_>> {
        let bias = match &self.bias {
            Some(b) => Some(b.f32s()?),
            None => None,
        };
        Some(PackedDense {
            weight: self.packed.view(),
            bias,
        })
    }
}

/// A layer norm held for the row stages: weight, bias (read-locked) and epsilon; `None` for
/// another norm.
pub(crate) struct HeldNorm<'a> {
    weight: Held<'a>,
    bias: Held<'a>,
    eps: f32,
}

impl<'a> HeldNorm<'a> {
    /// Holds `norm`'s tensors, if it is a layer norm.
    pub(crate) fn new(norm: &'a Norm) -> Option<Self> {
        match norm {
            Norm::Layer { weight, bias, eps } => Some(HeldNorm {
                weight: Held::new(weight),
                bias: Held::new(bias),
                eps: *eps as f32,
            }),
            Norm::Rms { .. } => None,
        }
    }

    /// The norm as the row stages read it; `None` when a tensor is not contiguous f32.
    pub(crate) fn view(&self) -> Option<RowLayerNorm<'_>> {
        Some(RowLayerNorm {
            weight: self.weight.f32s()?,
            bias: self.bias.f32s()?,
            eps: self.eps,
        })
    }
}

/// `act(x W^T + b)` over the last dim of `x` (`[..., in]` to `[..., out]`): one fused op (the
/// erf GELU inside it) where the plan has the CPU kernels, candle-nn's layer then the
/// activation elsewhere.
///
/// # Errors
/// Shapes that do not fit the layer; candle errors.
pub(crate) fn dense(
    dense: &Dense,
    x: &Tensor,
    activation: Option<Activation>,
    plan: Plan<'_>,
) -> candle_core::Result<Tensor> {
    match fused(plan) {
        Some(precision) => linear(x, &dense.layer, activation, precision, Some(&dense.packed)),
        None => linear_slow(x, &dense.layer, activation),
    }
}

/// A dense layer `[out, in]` with a bias when `bias`, read under `vb` as `weight` and `bias`
/// (weights initialised `N(0, std^2)`, biases 0, when the builder creates them).
///
/// # Errors
/// Candle errors from the var builder.
pub(crate) fn linear_layer(
    in_dim: usize,
    out_dim: usize,
    bias: bool,
    std: f64,
    vb: candle_nn::VarBuilder<'_>,
) -> candle_core::Result<Dense> {
    let init = candle_nn::Init::Randn {
        mean: 0.0,
        stdev: std,
    };
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", init)?;
    let bias = if bias {
        Some(vb.get_with_hints(out_dim, "bias", candle_nn::Init::Const(0.0))?)
    } else {
        None
    };
    Ok(Dense::new(Linear::new(weight, bias)))
}
