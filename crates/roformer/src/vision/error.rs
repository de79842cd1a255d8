//! [`VisionError`]: what can go wrong configuring, loading or running a vision model.

use crate::error::ModelError;

/// Everything that can go wrong with a vision model: a config that cannot describe a working
/// model, a checkpoint that does not fit it, pixels it cannot take.
///
/// Bad user data (a config, a checkpoint, pixel values) always ends up here, never in a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VisionError {
    /// A config value that parses but cannot describe a working model.
    #[error("invalid vision config: {field}: {reason}")]
    Config {
        /// The `config.json` field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// 2D RoPE splits each head's pairs between the two axes, so its head dim
    /// (`hidden_size / num_attention_heads`) must divide by 4 (by 2 for `rope_flat`).
    #[error(
        "invalid vision config: {position} positions need a head dim divisible by {divisor}, \
         got hidden_size {hidden_size} / {heads} heads = {head_dim}"
    )]
    RopeHeadDim {
        /// The position kind asking for the rotation, as `config.json` names it.
        position: &'static str,
        /// `hidden_size / num_attention_heads`.
        head_dim: usize,
        /// `hidden_size`.
        hidden_size: usize,
        /// `num_attention_heads`.
        heads: usize,
        /// What the head dim must divide by: 4 for the 2D kinds, 2 for `rope_flat`.
        divisor: usize,
    },
    /// An image with fewer pixels than one patch along an axis: it has no whole patch.
    #[error(
        "image of {height}x{width} pixels is smaller than one {patch}x{patch} patch \
         (resize it to at least {patch}x{patch})"
    )]
    ImageTooSmall {
        /// Its height in pixels.
        height: usize,
        /// Its width in pixels.
        width: usize,
        /// The patch side of the model.
        patch: usize,
    },
    /// Pixel values that do not fit the model: wrong rank, channel count, dtype, or a NaN or
    /// an infinity.
    #[error("invalid pixel_values: {0}")]
    Input(String),
    /// A file, config or checkpoint problem shared with the text models (missing files,
    /// malformed JSON, every missing, unexpected or mis-shaped tensor).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A rotary problem (frequencies or positions out of range).
    #[error(transparent)]
    Rope(#[from] rotary::RopeError),
    /// An error from candle while running the model.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Shorthand for results of the vision model.
pub type Result<T> = std::result::Result<T, VisionError>;

/// A [`VisionError::Config`] for `field`.
pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> VisionError {
    VisionError::Config {
        field,
        reason: reason.into(),
    }
}
