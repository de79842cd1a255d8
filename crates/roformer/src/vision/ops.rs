//! The execution choice of the vision layers, made from the pass's [`Plan`]: where the plan has
//! the CPU kernels ([`Kernels::Cpu`], f32 on the CPU), the fused CPU ops of
//! [`crate::autograd`] run, at inference as in training (the fused inference encoder of the
//! text model is post-norm RoFormer, a different layer); elsewhere candle's ops, one per step.

use candle_core::Tensor;
use candle_nn::Linear;

use crate::activation::Activation;
use crate::autograd::linear::{linear, linear_slow, PackedWeight};
use crate::cpu::Precision;
use crate::plan::{Kernels, Plan};

/// The precision of the fused CPU ops, when the plan runs them.
pub(crate) fn fused(plan: Plan<'_>) -> Option<Precision> {
    match plan.kernels() {
        Kernels::Cpu(precision) => Some(precision),
        Kernels::Candle => None,
    }
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
