//! The execution choice of the vision layers, made from the pass's [`Plan`]: where the plan has
//! the CPU kernels ([`Kernels::Cpu`], f32 on the CPU), the fused CPU ops of
//! [`crate::autograd`] run, at inference as in training (the fused inference encoder of the
//! text model is post-norm RoFormer, a different layer); elsewhere candle's ops, one per step.

use candle_core::Tensor;
use candle_nn::Linear;

use crate::activation::Activation;
use crate::autograd::linear::{linear, linear_slow};
use crate::cpu::Precision;
use crate::plan::{Kernels, Plan};

/// The precision of the fused CPU ops, when the plan runs them.
pub(crate) fn fused(plan: Plan<'_>) -> Option<Precision> {
    match plan.kernels() {
        Kernels::Cpu(precision) => Some(precision),
        Kernels::Candle => None,
    }
}

/// `act(x W^T + b)` over the last dim of `x` (`[..., in]` to `[..., out]`): one fused op (the
/// erf GELU inside it) where the plan has the CPU kernels, candle-nn's layer then the
/// activation elsewhere.
///
/// # Errors
/// Shapes that do not fit the layer; candle errors.
pub(crate) fn dense(
    layer: &Linear,
    x: &Tensor,
    activation: Option<Activation>,
    plan: Plan<'_>,
) -> candle_core::Result<Tensor> {
    match fused(plan) {
        Some(precision) => linear(x, layer, activation, precision),
        None => linear_slow(x, layer, activation),
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
) -> candle_core::Result<Linear> {
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
    Ok(Linear::new(weight, bias))
}
