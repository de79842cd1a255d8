//! What one run of a target on one input came to, short of a panic.

use std::fmt::Display;

/// The result of running a target on an input that did not panic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// The input was refused with an error; its message (first line).
    Rejected(String),
    /// The input was accepted and everything computed from it was finite.
    Accepted,
    /// The input was accepted but an output holds NaN or an infinity (silent NaN): which
    /// output.
    NonFinite(String),
}

impl Outcome {
    /// A rejection with `err`'s message.
    pub fn rejected(err: impl Display) -> Outcome {
        let message = err.to_string();
        Outcome::Rejected(message.lines().next().unwrap_or_default().to_string())
    }

    /// The outcome of a step that either worked or was refused.
    pub fn from_result<E: Display>(result: Result<Outcome, E>) -> Outcome {
        result.unwrap_or_else(Outcome::rejected)
    }
}

/// The outcome of an input whose outputs are `outputs`: accepted when every value is finite.
///
/// # Errors
/// Candle errors reading the tensors back.
pub fn check_finite(outputs: &[(&str, &candle_core::Tensor)]) -> candle_core::Result<Outcome> {
    for (name, t) in outputs {
        let values = t
            .to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Ok(Outcome::NonFinite(format!(
                "{name}[{i}] = {} (shape {:?})",
                values[i],
                t.dims()
            )));
        }
    }
    Ok(Outcome::Accepted)
}
