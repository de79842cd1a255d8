//! `rope_i`, `rope` and `rope_thd` with the names, arguments and results of candle-nn 0.11's
//! `candle_nn::rotary_emb`, plus a backward (see the [`crate::candle`] module docs).
//!
//! - [`check`]: which arguments are accepted, with the errors for the rest;
//! - [`op`]: the CPU op on this crate's kernels, with its backward;
//! - [`reference`]: the same rotation from differentiable candle ops, for devices other than
//!   the CPU when gradients are needed.

mod check;
mod op;
mod reference;

use candle_core::{DType, Tensor};

use crate::apply::{Direction, Order};
use crate::layout::Layout;

/// Which of candle-nn's three functions a call stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Convention {
    /// `rope_i`: `[b, h, t, d]`, interleaved pairs.
    RopeI,
    /// `rope`: `[b, h, t, d]`, half pairs.
    Rope,
    /// `rope_thd`: `[b, t, h, d]`, half pairs.
    RopeThd,
}

impl Convention {
    /// The function's path, for error messages.
    fn name(self) -> &'static str {
        match self {
            Convention::RopeI => "rotary::candle::rope_i",
            Convention::Rope => "rotary::candle::rope",
            Convention::RopeThd => "rotary::candle::rope_thd",
        }
    }

    fn layout(self) -> Layout {
        match self {
            Convention::RopeI => Layout::Interleaved,
            Convention::Rope | Convention::RopeThd => Layout::Half,
        }
    }

    fn order(self) -> Order {
        match self {
            Convention::RopeI | Convention::Rope => Order::HeadMajor,
            Convention::RopeThd => Order::TokenMajor,
        }
    }

    /// `xs`'s dimensions, named, for error messages.
    fn dims(self) -> &'static str {
        match self.order() {
            Order::HeadMajor => "[b, h, t, d]",
            Order::TokenMajor => "[b, t, h, d]",
        }
    }

    /// candle-nn's function of the same name (forward only).
    fn candle_nn(self) -> fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Convention::RopeI => candle_nn::rotary_emb::rope_i,
            Convention::Rope => candle_nn::rotary_emb::rope,
            Convention::RopeThd => candle_nn::rotary_emb::rope_thd,
        }
    }
}

/// RoPE on interleaved pairs `(x[2i], x[2i+1])`, as `candle_nn::rotary_emb::rope_i`: for `xs`
/// `[b, h, t, d]` and token `m < t` (of sequence `b_i` when `cos`/`sin` are 3D),
///
/// ```text
/// y[.., m, 2i]     = x[.., m, 2i] cos[m, i] - x[.., m, 2i + 1] sin[m, i]
/// y[.., m, 2i + 1] = x[.., m, 2i] sin[m, i] + x[.., m, 2i + 1] cos[m, i]      (i < d / 2)
/// ```
///
/// `cos` and `sin` are `[t', d / 2]` shared by the batch or `[b, t', d / 2]` per sequence, with
/// `t' >= t` (rows `0..t` are used), of `xs`'s dtype. Differentiable with respect to all three
/// (the gradient with respect to `xs` is the rotation `R^T dy`).
///
/// # Errors
/// A candle error naming the function and the shapes when `xs` is not 4D, `d` is odd, `cos`
/// and `sin` are not 2D or 3D of one shape fitting `xs` (batch, `t' >= t`, `d / 2`), the three
/// dtypes differ, or the dtype is not a float type.
pub fn rope_i(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    rotate(xs, cos, sin, Convention::RopeI)
}

/// RoPE on half pairs `(x[i], x[i + d/2])`, as `candle_nn::rotary_emb::rope` (the layout of
/// GPT-NeoX and Hugging Face's LLaMA): for `xs` `[b, h, t, d]` and token `m < t`,
///
/// ```text
/// y[.., m, i]         = x[.., m, i] cos[m, i] - x[.., m, i + d/2] sin[m, i]
/// y[.., m, i + d/2]   = x[.., m, i] sin[m, i] + x[.., m, i + d/2] cos[m, i]      (i < d / 2)
/// ```
///
/// `cos` and `sin` as for [`rope_i`].
///
/// # Errors
/// As [`rope_i`].
pub fn rope(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    rotate(xs, cos, sin, Convention::Rope)
}

/// [`rope`] on token-major `xs` `[b, t, h, d]` (the projection's output before the head
/// transpose), as `candle_nn::rotary_emb::rope_thd`; same formula and `cos`/`sin`.
///
/// # Errors
/// As [`rope_i`].
pub fn rope_thd(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    rotate(xs, cos, sin, Convention::RopeThd)
}

/// Checks the arguments, then rotates on the path the device and dtype call for.
fn rotate(
    xs: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    convention: Convention,
) -> candle_core::Result<Tensor> {
    let rows = check::check(xs, cos, sin, convention).map_err(candle_core::Error::wrap)?;
    let xs = xs.contiguous()?;
    let (cos, sin) = (rows.select(cos)?, rows.select(sin)?);
    let ours = matches!(xs.dtype(), DType::F32 | DType::F16 | DType::BF16);
    if xs.device().is_cpu() && ours {
        let op = op::DropInOp::new(convention, Direction::Forward);
        return xs.apply_op3(&cos, &sin, op);
    }
    if xs.track_op() || cos.track_op() || sin.track_op() {
        reference::rotate(&xs, &cos, &sin, convention)
    } else {
        convention.candle_nn()(&xs, &cos, &sin)
    }
}
