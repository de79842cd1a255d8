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
//! fused multiply-add, and stores with the rounding of [`Element::from_f32`] (to nearest, ties
//! to even), so all instruction sets give bit-identical results. (The one thing no path
//! promises is the payload of a NaN *produced by arithmetic*, which Rust leaves unspecified;
//! it is NaN on every path.)
//!
//! [`CosSin`]: crate::table::CosSin

#[cfg(target_arch = "x86_64")]
mod avx2;
// The AVX-512 intrinsics are stable since Rust 1.89: the workspace's declared minimum.
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
mod simd;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use crate::element::Element;
use crate::layout::Layout;

/// The environment variable that can lower the instruction set [`Isa::detect`] picks.
pub const ISA_ENV: &str = "ROTARY_ISA";

/// The instruction set the kernels run with, detected once per process.
///
/// Every variant exists on every target; [`Isa::is_supported`] tells which ones this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust, one element at a time.
    Scalar,
    /// x86_64 AVX2 with F16C (8 f32 lanes; F16C converts f16).
    Avx2,
    /// x86_64 AVX-512F and AVX-512BW (16 f32 lanes; converts f16 itself, permutes bf16 words).
    Avx512,
    /// aarch64 Advanced SIMD (4 f32 lanes).
    Neon,
}

impl Isa {
    /// Every instruction set, from the least to the most preferred on its architecture.
    const ALL: [Isa; 4] = [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512];

    /// The instruction set the kernels use: the best one this CPU supports, detected on first
    /// use and cached for the life of the process.
    ///
    /// The environment variable `ROTARY_ISA` (read once, at that first use) can *lower* the
    /// choice, for benchmarks and debugging: `scalar`, `avx2`, `avx512` or `neon` (any case)
    /// selects that instruction set if this CPU supports it. A value naming an instruction set
    /// the CPU lacks, or anything else, is ignored: the override never selects code the CPU
    /// cannot run.
    pub fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let request = std::env::var(ISA_ENV).ok();
            Isa::choose(Isa::best(), request.as_deref())
        })
    }

    /// The best instruction set this CPU supports, ignoring `ROTARY_ISA`.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// The instruction sets this CPU supports, scalar first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|isa| isa.is_supported())
            .collect()
    }

    /// Whether this CPU can run the kernels of `self` (checked at run time; cheap after the
    /// first call).
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The instruction set named `name` (`scalar`, `avx2`, `avx512`, `neon`; any case).
    pub fn from_name(name: &str) -> Option<Isa> {
        let name = name.trim();
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name))
    }

    /// Lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// `best`, or the instruction set `request` names when the CPU supports it.
    fn choose(best: Isa, request: Option<&str>) -> Isa {
        request
            .and_then(Isa::from_name)
            .filter(|isa| isa.is_supported())
            .unwrap_or(best)
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
/// for `n_rows / g.rows_per_token * g.rotary_dim` values; `g.rotary_dim` is even and at most
/// `g.head_dim`.
pub(crate) type ChunkFn<T> = unsafe fn(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
);

/// The kernel for element type `T` on instruction set `isa`; the scalar kernel when this CPU
/// does not support `isa`, so the result is always safe to call (under [`ChunkFn`]'s contract).
pub(crate) fn chunk_fn<T: Element>(isa: Isa) -> ChunkFn<T> {
    if !isa.is_supported() {
        return scalar::rotate_chunk::<T>;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::rotate_chunk::<T>,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::rotate_chunk::<T>,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::rotate_chunk::<T>,
        _ => scalar::rotate_chunk::<T>,
    }
}
