//! The precision of the matrix products.

use std::fmt;

/// The element type the matrix products read their operands in. Accumulation, and every
/// other op, is f32 in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// f32 operands (the reference).
    #[default]
    F32,
    /// Operands rounded to bf16 (to nearest, ties to even), products summed in f32.
    Bf16,
}

impl Precision {
    /// The precision that runs here: `Bf16` only where this CPU has a native bf16 dot
    /// product (see `crate::cpu::bf16::native`), otherwise `F32`.
    pub fn effective(self) -> Precision {
        match self {
            Precision::Bf16 if super::bf16::native().is_some() => Precision::Bf16,
            _ => Precision::F32,
        }
    }

    /// The bf16 kernel the products of this precision run on: this CPU's native one
    /// (`crate::cpu::bf16::native`) for `Bf16`, and none (f32 through gemm) for `F32` or where
    /// the CPU has no native bf16 dot product.
    pub(crate) fn bf16_kernel(self) -> Option<super::bf16::Kernel> {
        match self {
            Precision::Bf16 => super::bf16::native(),
            Precision::F32 => None,
        }
    }

    /// The name used by the command-line flags: `f32` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
