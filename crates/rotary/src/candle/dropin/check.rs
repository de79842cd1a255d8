//! The arguments the drop-in accepts: candle-nn's, with the errors for the rest.
//!
//! Accepted as candle-nn 0.11 accepts them: `xs` 4D with an even head dim `d`; `cos` and `sin`
//! `[t', d/2]` or `[b, t', d/2]` with `t' >= t`; one float dtype for all three. Stricter than
//! candle-nn: `cos` and `sin` must have the same shape (candle-nn takes a 2D `cos` with a 3D
//! `sin` and then ignores `sin`'s batch). Looser: non-contiguous tensors are copied to
//! contiguous ones instead of refused.

use candle_core::{DType, Tensor};

use super::Convention;

/// Why a call's arguments were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum DropInError {
    /// `xs` is not 4D.
    #[error("{op}: xs must be 4D {dims}, got shape {got:?}")]
    XsRank {
        /// The function called.
        op: &'static str,
        /// The dimensions it expects, named.
        dims: &'static str,
        /// `xs`'s shape.
        got: Vec<usize>,
    },
    /// The head dim is odd: coordinates rotate in pairs.
    #[error("{op}: head dim {head_dim} of xs {xs:?} is odd (coordinates rotate in pairs)")]
    OddHeadDim {
        /// The function called.
        op: &'static str,
        /// The head dim.
        head_dim: usize,
        /// `xs`'s shape.
        xs: Vec<usize>,
    },
    /// `cos` or `sin` is neither 2D nor 3D.
    #[error("{op}: {what} must be 2D [t, d/2] or 3D [b, t, d/2], got shape {got:?}")]
    CosSinRank {
        /// The function called.
        op: &'static str,
        /// `cos` or `sin`.
        what: &'static str,
        /// Its shape.
        got: Vec<usize>,
    },
    /// `cos` and `sin` have different shapes.
    #[error("{op}: cos {cos:?} and sin {sin:?} must have the same shape")]
    CosSinDiffer {
        /// The function called.
        op: &'static str,
        /// `cos`'s shape.
        cos: Vec<usize>,
        /// `sin`'s shape.
        sin: Vec<usize>,
    },
    /// `cos`/`sin` do not fit `xs`: wrong batch, too few rows or a row width other than `d/2`.
    #[error(
        "{op}: cos/sin of shape {got:?} do not fit xs {xs:?}: need [t', {pairs}] or \
         [{batch}, t', {pairs}] with t' >= {seq}"
    )]
    CosSinShape {
        /// The function called.
        op: &'static str,
        /// `cos`'s (and `sin`'s) shape.
        got: Vec<usize>,
        /// `xs`'s shape.
        xs: Vec<usize>,
        /// `xs`'s batch.
        batch: usize,
        /// `xs`'s tokens per sequence.
        seq: usize,
        /// `d / 2`.
        pairs: usize,
    },
    /// The three tensors do not share one dtype.
    #[error("{op}: xs, cos and sin must have one dtype, got {xs:?}, {cos:?} and {sin:?}")]
    DTypeMismatch {
        /// The function called.
        op: &'static str,
        /// `xs`'s dtype.
        xs: DType,
        /// `cos`'s dtype.
        cos: DType,
        /// `sin`'s dtype.
        sin: DType,
    },
    /// A dtype that is not a float type.
    #[error("{op}: dtype {dtype:?} is not supported (f16, bf16, f32 or f64)")]
    DType {
        /// The function called.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
    },
}

/// Which rows of `cos`/`sin` a valid call uses: `0..seq` along `axis`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rows {
    axis: usize,
    seq: usize,
}

impl Rows {
    /// Rows `0..seq` of a `cos` or `sin` tensor, contiguous: `[seq, d/2]` or `[b, seq, d/2]`
    /// (a view when they already are, a copy otherwise).
    pub(super) fn select(self, cs: &Tensor) -> candle_core::Result<Tensor> {
        cs.narrow(self.axis, 0, self.seq)?.contiguous()
    }
}

/// Checks a call's arguments (see the module docs) and returns the rows it uses.
pub(super) fn check(
    xs: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    convention: Convention,
) -> Result<Rows, DropInError> {
    let op = convention.name();
    let [a, b, c, head_dim] = *xs.dims() else {
        return Err(DropInError::XsRank {
            op,
            dims: convention.dims(),
            got: xs.dims().to_vec(),
        });
    };
    let (batch, seq) = match convention.order() {
        crate::apply::Order::HeadMajor => (a, c),
        crate::apply::Order::TokenMajor => (a, b),
    };
    if head_dim % 2 != 0 {
        return Err(DropInError::OddHeadDim {
            op,
            head_dim,
            xs: xs.dims().to_vec(),
        });
    }
    for (what, cs) in [("cos", cos), ("sin", sin)] {
        if !matches!(cs.rank(), 2 | 3) {
            return Err(DropInError::CosSinRank {
                op,
                what,
                got: cs.dims().to_vec(),
            });
        }
    }
    if cos.dims() != sin.dims() {
        return Err(DropInError::CosSinDiffer {
            op,
            cos: cos.dims().to_vec(),
            sin: sin.dims().to_vec(),
        });
    }
    let pairs = head_dim / 2;
    let fits = match *cos.dims() {
        [rows, p] => (rows >= seq && p == pairs).then_some(Rows { axis: 0, seq }),
        [bc, rows, p] => {
            (bc == batch && rows >= seq && p == pairs).then_some(Rows { axis: 1, seq })
        }
        _ => None,
    };
    let rows = fits.ok_or_else(|| DropInError::CosSinShape {
        op,
        got: cos.dims().to_vec(),
        xs: xs.dims().to_vec(),
        batch,
        seq,
        pairs,
    })?;
    let (dx, dc, ds) = (xs.dtype(), cos.dtype(), sin.dtype());
    if dx != dc || dx != ds {
        return Err(DropInError::DTypeMismatch {
            op,
            xs: dx,
            cos: dc,
            sin: ds,
        });
    }
    if !matches!(dx, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return Err(DropInError::DType { op, dtype: dx });
    }
    Ok(rows)
}
