//! The activation functions a RoFormer config can name (transformers' `ACT2FN`).

use std::str::FromStr;

use candle_core::{DType, Tensor};

use crate::error::ModelError;

/// An element-wise activation, by its transformers name.
///
/// Formulas (`Phi` is the standard normal CDF):
/// - `gelu`, `gelu_python`: `x Phi(x)` (exact, with erf);
/// - `gelu_new`, `gelu_pytorch_tanh`, `gelu_python_tanh`, `gelu_accurate`:
///   `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`;
/// - `gelu_fast`: `0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2)))`;
/// - `gelu_10`: `gelu` clipped to `[-10, 10]`; `quick_gelu`: `x sigmoid(1.702 x)`;
/// - `relu`, `relu2` (`relu(x)^2`), `relu6` (`min(max(x, 0), 6)`), `leaky_relu` (slope 0.01);
/// - `silu`, `swish`: `x sigmoid(x)`; `mish`: `x tanh(softplus(x))`;
/// - `hardswish`: `x relu6(x + 3) / 6`; `sigmoid`, `tanh`, `linear` (identity);
/// - `laplace`: `0.5 (1 + erf((x - 0.707107) / (0.282095 sqrt 2)))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// Exact GELU.
    Gelu,
    /// GELU clipped to [-10, 10].
    Gelu10,
    /// Tanh-approximated GELU (`gelu_new` and its synonyms).
    GeluTanh,
    /// `gelu_fast`.
    GeluFast,
    /// `quick_gelu`.
    QuickGelu,
    /// `relu`.
    Relu,
    /// `relu2`.
    Relu2,
    /// `relu6`.
    Relu6,
    /// `leaky_relu` with PyTorch's default slope 0.01.
    LeakyRelu,
    /// `silu` / `swish`.
    Silu,
    /// `mish`.
    Mish,
    /// `hardswish`.
    HardSwish,
    /// `sigmoid`.
    Sigmoid,
    /// `tanh`.
    Tanh,
    /// `linear` (identity).
    Linear,
    /// `laplace`.
    Laplace,
}

/// Every accepted name and the activation it means.
const NAMES: &[(&str, Activation)] = &[
    ("gelu", Activation::Gelu),
    ("gelu_python", Activation::Gelu),
    ("gelu_10", Activation::Gelu10),
    ("gelu_new", Activation::GeluTanh),
    ("gelu_pytorch_tanh", Activation::GeluTanh),
    ("gelu_python_tanh", Activation::GeluTanh),
    ("gelu_accurate", Activation::GeluTanh),
    ("gelu_fast", Activation::GeluFast),
    ("quick_gelu", Activation::QuickGelu),
    ("relu", Activation::Relu),
    ("relu2", Activation::Relu2),
    ("relu6", Activation::Relu6),
    ("leaky_relu", Activation::LeakyRelu),
    ("silu", Activation::Silu),
    ("swish", Activation::Silu),
    ("mish", Activation::Mish),
    ("hardswish", Activation::HardSwish),
    ("sigmoid", Activation::Sigmoid),
    ("tanh", Activation::Tanh),
    ("linear", Activation::Linear),
    ("laplace", Activation::Laplace),
];

impl Activation {
    /// Parses a transformers activation name, for the config field `field`.
    ///
    /// # Errors
    /// [`ModelError::UnknownActivation`] naming it and listing the known names.
    pub fn parse(field: &'static str, name: &str) -> Result<Activation, ModelError> {
        by_name(name).ok_or_else(|| ModelError::UnknownActivation {
            field,
            name: name.to_string(),
            known: Activation::known_names().join(", "),
        })
    }

    /// Every name [`Activation::parse`] accepts.
    pub fn known_names() -> Vec<&'static str> {
        NAMES.iter().map(|(n, _)| *n).collect()
    }

    /// The canonical transformers name of the activation (the first of `NAMES` that means
    /// it), as written back to `config.json`.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("linear", |(n, _)| *n)
    }

    /// Applies the activation element-wise (computed in f32 for f16/bf16 inputs).
    ///
    /// # Errors
    /// Candle errors only (e.g. an integer tensor).
    pub fn forward(self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let x = match dtype {
            DType::F16 | DType::BF16 => x.to_dtype(DType::F32)?,
            _ => x.clone(),
        };
        let y = match self {
            Activation::Gelu => x.gelu_erf()?,
            Activation::Gelu10 => x.gelu_erf()?.clamp(-10f32, 10f32)?,
            Activation::GeluTanh => gelu_tanh(&x)?,
            Activation::GeluFast => {
                let inner = ((&x * 0.7978845608)? * (x.sqr()? * 0.044715)?.affine(1.0, 1.0)?)?;
                ((&x * 0.5)? * inner.tanh()?.affine(1.0, 1.0)?)?
            }
            Activation::QuickGelu => (&x * candle_nn::ops::sigmoid(&(&x * 1.702)?)?)?,
            Activation::Relu => x.relu()?,
            Activation::Relu2 => x.relu()?.sqr()?,
            Activation::Relu6 => x.clamp(0f32, 6f32)?,
            Activation::LeakyRelu => candle_nn::ops::leaky_relu(&x, 0.01)?,
            Activation::Silu => x.silu()?,
            Activation::Mish => (&x * softplus(&x)?.tanh()?)?,
            Activation::HardSwish => ((&x * (&x + 3.0)?.clamp(0f32, 6f32)?)? / 6.0)?,
            Activation::Sigmoid => candle_nn::ops::sigmoid(&x)?,
            Activation::Tanh => x.tanh()?,
            Activation::Linear => x,
            Activation::Laplace => {
                let z = ((&x - LAPLACE_MU)? / (LAPLACE_SIGMA * std::f64::consts::SQRT_2))?;
                (z.erf()?.affine(1.0, 1.0)? * 0.5)?
            }
        };
        y.to_dtype(dtype)
    }
}

/// Written as its canonical transformers name ([`Activation::name`]).
impl serde::Serialize for Activation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Read from any transformers name [`Activation::parse`] accepts.
impl<'de> serde::Deserialize<'de> for Activation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        by_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown activation {name:?} (known: {})",
                Activation::known_names().join(", ")
            ))
        })
    }
}

/// The activation a transformers name means.
fn by_name(name: &str) -> Option<Activation> {
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, a)| *a)
}

impl FromStr for Activation {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Activation::parse("hidden_act", s)
    }
}

/// The mean of transformers' `LaplaceActivation`: its literal, not exactly `1/sqrt(2)`.
#[allow(clippy::approx_constant)]
const LAPLACE_MU: f64 = 0.707107;

/// The spread of transformers' `LaplaceActivation`.
const LAPLACE_SIGMA: f64 = 0.282095;

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = ((x + ((x.sqr()? * x)? * 0.044715)?)? * c)?;
    (x * 0.5)? * inner.tanh()?.affine(1.0, 1.0)?
}

/// `log(1 + exp(x))`, as PyTorch computes it (linear above 20).
fn softplus(x: &Tensor) -> candle_core::Result<Tensor> {
    let smooth = x.clamp(f32::MIN, 20f32)?.exp()?.affine(1.0, 1.0)?.log()?;
    x.gt(20.0)?.where_cond(x, &smooth)
}
