//! The frequency schedule theta_i = base^(-2i/r).

use crate::error::{Result, RopeError};

/// The default frequency base of the paper (and of most checkpoints).
pub const DEFAULT_BASE: f64 = 10_000.0;

/// The most rotated dimensions per head this crate accepts: 65536, far above any model's head
/// (64 to 256 in common checkpoints, 576 in the widest). It keeps every buffer sized by the
/// rotary dims (frequencies, a table row, a permutation) within a few hundred KiB, so that a
/// config or option claiming more is refused with [`RopeError::TooLarge`] rather than
/// attempted.
pub const MAX_ROTARY_DIM: usize = 1 << 16;

/// Checks that `rotary_dim` is even, non-zero and at most [`MAX_ROTARY_DIM`].
///
/// # Errors
/// [`RopeError::TooLarge`] above the cap, [`RopeError::InvalidRotaryDim`] for zero or odd.
pub fn check_rotary_dim(rotary_dim: usize) -> Result<()> {
    if rotary_dim > MAX_ROTARY_DIM {
        return Err(RopeError::TooLarge {
            what: "rotary dims",
            size: rotary_dim as u128,
            limit: MAX_ROTARY_DIM,
        });
    }
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
/// [`RopeError::InvalidRotaryDim`] for a zero or odd `rotary_dim`, [`RopeError::TooLarge`]
/// above [`MAX_ROTARY_DIM`], [`RopeError::InvalidBase`] for a base that is not finite and
/// positive.
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
