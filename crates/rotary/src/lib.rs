//! Rotary position embedding (RoPE), from "RoFormer: Enhanced Transformer with Rotary Position
//! Embedding" (Su et al., 2021).
//!
//! A query or key vector `x` at position `m` is rotated pair by pair:
//!
//! ```text
//! (x_a, x_b) -> (x_a cos(m theta_i) - x_b sin(m theta_i),  x_b cos(m theta_i) + x_a sin(m theta_i))
//! theta_i = base^(-2i / r),  i = 0 .. r/2
//! ```
//!
//! so that `<R_m q, R_n k> = <q, R_{n-m} k>` depends on positions only through `n - m`.
//!
//! The crate is organised in separate, pure steps:
//! - [`freqs`]: the frequency schedule `theta_i`;
//! - [`layout`]: which coordinates pair up ([`Layout::Interleaved`] or [`Layout::Half`]), and the
//!   weight permutation between them;
//! - [`positions`]: where each token sits (a range from an offset, explicit or fractional);
//! - [`table`]: cos/sin coefficients from f64 angles, rounded once;
//! - [`apply`]: rotating slices of f32/f16/bf16 data, in place or not, q and k fused, on
//!   threads, with SIMD kernels chosen at run time;
//! - [`Rope`]: the 1D embedding that ties them together with a cached table;
//! - [`finite`]: the workspace's one scan for NaN and infinities.
//!
//! ```
//! use rotary::{Direction, Layout, Positions, Rope, Shape};
//! let rope = Rope::new(64, 64, 10_000.0, Layout::Interleaved)?;
//! let shape = Shape::head_major(1, 2, 3, 64);
//! let mut q = vec![1.0f32; 2 * 3 * 64];
//! rope.apply_inplace(&mut q, shape, Positions::START, Direction::Forward)?;
//! rope.apply_inplace(&mut q, shape, Positions::START, Direction::Inverse)?;
//! assert!(q.iter().all(|v| (v - 1.0).abs() < 1e-6));
//! # Ok::<(), rotary::RopeError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod analysis;
pub mod apply;
#[cfg(feature = "candle")]
pub mod candle;
#[cfg(feature = "candle")]
pub mod candle_mixed;
pub mod element;
pub mod error;
pub mod finite;
pub mod freqs;
pub mod kernel;
pub mod layout;
pub mod nd;
mod parallel;
pub mod positions;
pub mod rope;
pub mod scaling;
pub mod table;

pub use apply::{
    rotate, rotate_inplace, rotate_qk_inplace, rotate_uninit, Direction, Order, Shape,
};
#[cfg(feature = "candle")]
pub use candle::{apply_rope, rotate_slow, rotate_tensor};
#[cfg(feature = "candle")]
pub use candle_mixed::mixed_rope;
pub use element::{DType, Element};
pub use error::{Result, RopeError};
pub use freqs::{inv_freqs, DEFAULT_BASE, MAX_ROTARY_DIM};
pub use kernel::Isa;
pub use layout::{convert_projection, pair_permutation, Layout};
pub use nd::{AxisSchedule, NdPositions, NdRope};
pub use positions::Positions;
pub use rope::{Coefficients, Rope};
pub use scaling::by_length::ScaledRope;
pub use scaling::{ConfigError, RopeSpec, ScaledFreqs, Scaling, Xpos};
pub use table::{CosSin, CosSinView};
