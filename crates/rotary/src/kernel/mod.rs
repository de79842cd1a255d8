//! The element-wise rotation kernels and their run-time CPU dispatch.
//!
//! A kernel rotates a *chunk*: `n_rows` consecutive rows of `head_dim` elements, where every
//! `rows_per_token` consecutive rows belong to one token and share one [`CosSin`] row
//! (`rows_per_token = heads` for token-major data, `1` for head-major data). For coordinate
//! `j < rotary_dim` of a row, with the token's table row `(C, S)`:
//!
//! ```text
//! forward: y[j] = x[j] * C[j] + x[partner(j)] * S[j]      (y = R_m x)
//! inverse: y[j] = x[j] * C[j] - x[partner(j)] * S[j]      (y = R_m^T x)
//! ```
//!
//! Coordinates `rotary_dim..head_dim` are copied (out of place) or left alone (in place).
//! Every path computes exactly these two products and one sum per coordinate in f32, without
//! fused multiply-add, so all instruction sets give bit-identical results.
//!
//! [`CosSin`]: crate::table::CosSin

mod scalar;

use std::sync::OnceLock;

use crate::element::Element;
use crate::layout::Layout;

pub(crate) use scalar::rotate_chunk as rotate_chunk_scalar;

/// The instruction set the kernels run with, detected once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust, one element at a time.
    Scalar,
}

impl Isa {
    /// The best instruction set this CPU supports, detected on first use and cached.
    pub fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| Isa::Scalar)
    }

    /// Lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
        }
    }
}

/// The geometry a chunk kernel needs besides the data pointers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geom {
    pub head_dim: usize,
    pub rotary_dim: usize,
    pub rows_per_token: usize,
    pub layout: Layout,
    pub inverse: bool,
}

/// A chunk kernel.
///
/// # Safety
/// `src` and `dst` are valid for `n_rows * head_dim` elements and are either equal (in place)
/// or do not overlap; `n_rows` is a multiple of `g.rows_per_token`; `cos` and `sin` are valid
/// for `n_rows / g.rows_per_token * g.rotary_dim` values.
pub(crate) type ChunkFn<T> =
    unsafe fn(src: *const T, dst: *mut T, n_rows: usize, g: &Geom, cos: *const f32, sin: *const f32);

/// The kernel for element type `T` on instruction set `isa`.
pub(crate) fn chunk_fn<T: Element>(isa: Isa) -> ChunkFn<T> {
    match isa {
        Isa::Scalar => rotate_chunk_scalar::<T>,
    }
}
