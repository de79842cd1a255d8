//! Storage element types: f32, f16 and bf16, all computed in f32.

use half::{bf16, f16};

/// The storage type of a tensor the kernels rotate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Lower-case name as used in the CLI and JSON output (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element the kernels can load, widen to f32, and store back rounded to nearest even.
///
/// Sealed: implemented for `f32`, `half::f16` and `half::bf16` only.
pub trait Element:
    Copy + Send + Sync + Default + std::fmt::Debug + 'static + sealed::Sealed
{
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Rounding (to nearest, ties to even) from f32.
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
