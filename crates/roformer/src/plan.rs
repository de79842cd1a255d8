//! The execution plan of a forward pass, decided once when the pass starts and handed to every
//! layer: inference or training (with its dropout), and which kernels run the heavy steps.
//!
//! ```text
//! kernels = Cpu(precision)   the model's tensors are f32 on the CPU: the fused encoder
//!                            (inference) or the fused training ops (training), products in
//!                            `precision` (bf16 where the CPU has a native bf16 dot product)
//!         = Candle           any other device or dtype: candle's ops, one per step
//! ```
//!
//! The layers ask the plan, never the tensors, whether a fast path runs. A new execution
//! choice (a device, an ISA to force) is a field here, set in [`Plan::new`].

use candle_core::{DType, Device, Tensor};

use crate::autograd::param_grads::ParamGrads;
use crate::autograd::{add_norm, dropout};
use crate::cpu::tensor::f32_on_cpu;
use crate::cpu::Precision;
use crate::mode::Mode;

/// Which implementation runs the heavy steps of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// The CPU layer's fused kernels (`crate::fused` at inference, the fused ops of
    /// `crate::autograd` in training), matrix products in this precision.
    Cpu(Precision),
    /// candle's ops, one per step, on any device and dtype (the reference).
    Candle,
}

/// How one forward pass runs.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    mode: Mode<'a>,
    kernels: Kernels,
    param_grads: Option<&'a ParamGrads>,
}

impl<'a> Plan<'a> {
    /// The plan of a pass in `mode` over a model whose tensors are `dtype` on `device`:
    /// [`Kernels::Cpu`] (in the mode's precision) for f32 on the CPU, [`Kernels::Candle`]
    /// otherwise.
    pub fn new(mode: Mode<'a>, device: &Device, dtype: DType) -> Plan<'a> {
        let kernels = if f32_on_cpu(device, dtype) {
            Kernels::Cpu(mode.precision())
        } else {
            Kernels::Candle
        };
        Plan {
            mode,
            kernels,
            param_grads: None,
        }
    }

    /// This plan with the CPU kernels' matrix products in `precision` (unchanged where the
    /// kernels are [`Kernels::Candle`]): bf16 products at inference for the models whose layers
    /// read the precision from the plan (the vision transformer), as a training pass has them.
    /// The caller resolves `precision` ([`Precision::effective`]) for this CPU.
    pub fn with_precision(self, precision: Precision) -> Plan<'a> {
        let kernels = match self.kernels {
            Kernels::Cpu(_) => Kernels::Cpu(precision),
            Kernels::Candle => Kernels::Candle,
        };
        Plan { kernels, ..self }
    }

    /// This plan with the fused training ops handing their parameters' gradients to `sink`
    /// instead of candle's graph (see [`ParamGrads`]): the caller runs the pass's backward
    /// through the sink ([`ParamGrads::backward`]), which merges them into the store.
    /// Without it (the default) every gradient is candle's.
    pub fn with_param_grads(self, sink: &'a ParamGrads) -> Plan<'a> {
        Plan {
            param_grads: Some(sink),
            ..self
        }
    }

    /// Where the fused training ops hand their parameters' gradients, if not to candle's
    /// graph ([`Plan::with_param_grads`]).
    pub(crate) fn param_grads(&self) -> Option<&'a ParamGrads> {
        self.param_grads
    }

    /// The mode: inference or training.
    pub fn mode(&self) -> Mode<'a> {
        self.mode
    }

    /// The kernels of the heavy steps.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Whether gradients must flow through this pass.
    pub fn is_train(&self) -> bool {
        self.mode.is_train()
    }

    /// Whether the fused inference encoder runs ([`crate::fused`]).
    pub(crate) fn fused_encoder(&self) -> bool {
        !self.is_train() && matches!(self.kernels, Kernels::Cpu(_))
    }

    /// The precision of the fused training ops when they run (training on the CPU in f32).
    pub(crate) fn fused_training(&self) -> Option<Precision> {
        match self.kernels {
            Kernels::Cpu(precision) if self.is_train() => Some(precision),
            _ => None,
        }
    }

    /// `x` with dropout of probability `p` in training (the identity at inference, or when
    /// `p` is 0 or the generator is disabled; see [`crate::Dropout::keep_mask`]).
    ///
    /// # Errors
    /// Candle errors only.
    pub fn dropout(&self, x: &Tensor, p: f64) -> candle_core::Result<Tensor> {
        match (self.mode.keep_mask(x.elem_count(), p), self.kernels) {
            (None, _) => Ok(x.clone()),
            (Some(mask), Kernels::Cpu(_)) => dropout::dropout(x, mask),
            (Some(mask), Kernels::Candle) => dropout::dropout_slow(x, mask),
        }
    }

    /// `Dropout(y) + residual` (`y + residual` where [`Plan::dropout`] is the identity).
    ///
    /// # Errors
    /// Shapes that differ, and candle errors.
    pub fn dropout_add(
        &self,
        y: &Tensor,
        residual: &Tensor,
        p: f64,
    ) -> candle_core::Result<Tensor> {
        match (self.mode.keep_mask(y.elem_count(), p), self.kernels) {
            (None, _) => y + residual,
            (Some(mask), Kernels::Cpu(_)) => dropout::dropout_add(y, residual, mask),
            (Some(mask), Kernels::Candle) => dropout::dropout_add_slow(y, residual, mask),
        }
    }

    /// `LayerNorm(Dropout(y) + residual)` with `weight` and `bias` (`[h]` for `y` and
    /// `residual` of shape `[..., h]`) in training: one fused op (dropout, add and norm) where
    /// the kernels are [`Kernels::Cpu`], [`Plan::dropout_add`] then
    /// `crate::autograd::layer_norm` elsewhere. Draws the dropout mask as
    /// [`Plan::dropout_add`] does.
    ///
    /// # Errors
    /// Shapes that differ or do not fit the norm, and candle errors.
    pub fn dropout_add_layer_norm(
        &self,
        y: &Tensor,
        residual: &Tensor,
        p: f64,
        (weight, bias): (&Tensor, &Tensor),
        eps: f64,
    ) -> candle_core::Result<Tensor> {
        let mask = self.mode.keep_mask(y.elem_count(), p);
        match self.kernels {
            Kernels::Cpu(_) => add_norm::add_norm(y, residual, mask, (weight, bias), eps),
            Kernels::Candle => add_norm::add_norm_slow(y, residual, mask, (weight, bias), eps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Dropout;

    /// The plan of a pass over f32 CPU tensors.
    fn plan(mode: Mode<'_>) -> Plan<'_> {
        Plan::new(mode, &Device::Cpu, DType::F32)
    }

    #[test]
    fn inference_and_disabled_are_identity() {
        let x = Tensor::arange(0f32, 10.0, &Device::Cpu).unwrap();
        let d = Dropout::disabled();
        for y in [
            plan(Mode::Inference).dropout(&x, 0.5).unwrap(),
            plan(Mode::Train {
                dropout: &d,
                precision: Precision::F32,
            })
            .dropout(&x, 0.5)
            .unwrap(),
            plan(Mode::Train {
                dropout: &Dropout::seeded(1),
                precision: Precision::F32,
            })
            .dropout(&x, 0.0)
            .unwrap(),
        ] {
            assert_eq!(y.to_vec1::<f32>().unwrap(), x.to_vec1::<f32>().unwrap());
        }
        let zeros = Dropout::seeded(1).apply(&x, 1.0).unwrap();
        assert!(zeros.to_vec1::<f32>().unwrap().iter().all(|&v| v == 0.0));
    }

    /// The fused tail on [`Kernels::Cpu`] and its twin on [`Kernels::Candle`] are
    /// [`Plan::dropout_add`] then the layer norm, drawing the same masks call after call
    /// (f32 rounding apart: 1e-5).
    #[test]
    fn dropout_add_layer_norm_is_dropout_add_then_the_norm() {
        let values = |n: usize, k: usize| {
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * k % 101) as f32 - 50.0) / 25.0)
                .collect();
            Tensor::from_vec(v, n, &Device::Cpu).unwrap()
        };
        let (y, r) = (
            values(96, 37).reshape((4, 24)).unwrap(),
            values(96, 53).reshape((4, 24)).unwrap(),
        );
        let (w, b) = ((values(24, 7) + 3.0).unwrap(), values(24, 11));
        for dtype in [DType::F32, DType::F64] {
            let (d1, d2) = (Dropout::seeded(5), Dropout::seeded(5));
            let train = |d| Mode::Train {
                dropout: d,
                precision: Precision::F32,
            };
            let (one, two) = (
                Plan::new(train(&d1), &Device::Cpu, dtype),
                Plan::new(train(&d2), &Device::Cpu, dtype),
            );
            for _ in 0..2 {
                let fused = one
                    .dropout_add_layer_norm(&y, &r, 0.3, (&w, &b), 1e-12)
                    .unwrap();
                let sum = two.dropout_add(&y, &r, 0.3).unwrap();
                let want = crate::autograd::layer_norm(&sum, &w, &b, 1e-12).unwrap();
                let diff = (fused - want).unwrap().abs().unwrap().max_all().unwrap();
                assert!(diff.to_scalar::<f32>().unwrap() < 1e-5, "{dtype:?}");
            }
        }
    }

    #[test]
    fn with_precision_sets_the_cpu_products_and_leaves_the_rest() {
        let bf16 = plan(Mode::Inference).with_precision(Precision::Bf16);
        assert_eq!(bf16.kernels(), Kernels::Cpu(Precision::Bf16));
        assert!(!bf16.is_train());
        let candle = Plan::new(Mode::Inference, &Device::Cpu, DType::F64);
        assert_eq!(
            candle.with_precision(Precision::Bf16).kernels(),
            Kernels::Candle
        );
    }

    #[test]
    fn kernels_follow_device_and_dtype_and_fast_paths_follow_the_mode() {
        let d = Dropout::disabled();
        let train = Mode::Train {
            dropout: &d,
            precision: Precision::Bf16,
        };
        assert_eq!(plan(train).kernels(), Kernels::Cpu(Precision::Bf16));
        assert_eq!(plan(train).fused_training(), Some(Precision::Bf16));
        assert!(!plan(train).fused_encoder());
        assert!(plan(Mode::Inference).fused_encoder());
        assert_eq!(plan(Mode::Inference).fused_training(), None);
        let f64_train = Plan::new(train, &Device::Cpu, DType::F64);
        assert_eq!(f64_train.kernels(), Kernels::Candle);
        assert_eq!(f64_train.fused_training(), None);
        assert!(!Plan::new(Mode::Inference, &Device::Cpu, DType::BF16).fused_encoder());
    }
}
