//! The frequency schedule theta_i = base^(-2i/r).

use crate::error::{Result, RopeError};

/// The default frequency base of the paper (and of most checkpoints).
pub const DEFAULT_BASE: f64 = 10_000.0;

/// Checks that `rotary_dim` is even and non-zero.
///
/// # Errors
/// [`RopeError::InvalidRotaryDim`] otherwise.
pub fn check_rotary_dim(rotary_dim: usize) -> Result<()> {
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(RopeError::InvalidRotaryDim(rotary_dim));
    }
    Ok(())
}

/// Inverse frequencies of the paper's schedule, in f64:
/// `theta_i = base^(-2i / rotary_dim)` for `i in 0..rotary_dim / 2`.
///
/// Pair `i` of a vector at position `m` rotates by the angle `m * theta_i`.
///
/// # Errors
/// [`RopeError::InvalidRotaryDim`] for a zero or odd `rotary_dim`, [`RopeError::InvalidBase`]
/// for a base that is not finite and positive.
pub fn inv_freqs(rotary_dim: usize, base: f64) -> Result<Vec<f64>> {
    check_rotary_dim(rotary_dim)?;
    if !(base.is_finite() && base > 0.0) {
        return Err(RopeError::InvalidBase(base));
    }
    let r = rotary_dim as f64;
    Ok((0..rotary_dim / 2)
        .map(|i| base.powf(-((2 * i) as f64) / r))
        .collect())
}

/// Checks that every inverse frequency is finite.
///
/// # Errors
/// [`RopeError::NonFinite`] naming the first bad entry.
pub fn check_finite(what: &'static str, values: &[f64]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(RopeError::NonFinite {
            what,
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}
