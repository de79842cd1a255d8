//! The CPU layer under both fast paths (the fused inference encoder and the fused training
//! ops): strided matrix views, an output buffer shared by tasks that write disjoint elements,
//! and the matrix product in the precision the caller asks for.
//!
//! ```text
//! product:  C = (accumulate ? C : 0) + alpha * A B
//!           Precision::F32   A, B in f32                    (gemm)
//!           Precision::Bf16  round_bf16(A), round_bf16(B)   (our kernel; f32 accumulation)
//! ```
//!
//! Everything else (norms, softmax, losses, the optimiser) stays f32 whatever the precision,
//! as under PyTorch's `torch.autocast(dtype=torch.bfloat16)` on the CPU.

pub(crate) mod bf16;
mod mat;
mod precision;
mod product;

pub(crate) use mat::{Dst, Mat, SharedOut};
pub use precision::Precision;
pub(crate) use product::product;
