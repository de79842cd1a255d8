//! The CPU layer under both fast paths (the fused inference encoder, [`crate::fused`], and the
//! fused training ops of [`crate::autograd`]): the one owner of their plumbing.
//!
//! - [`tensor`]: the layer's domain (f32 tensors on the CPU) and tensors' data as slices;
//! - [`mat`]: strided matrix views, and an output buffer shared by tasks that write disjoint
//!   elements;
//! - [`product`] and [`dense`]: the matrix product in the precision the caller asks for, and
//!   dense layers' `x W^T` over the threads; [`bf16`]: the bf16 kernels and packed weights;
//! - [`kept`]: activations a training op keeps for its products, rounded once (bf16) into
//!   the layouts those products read, and a dense layer's three products on them;
//!   [`kept_weight`]: a dense layer's weight packed once per training step for its products;
//! - [`math`]: vectorised row maths (`exp`, erf GELU, softmax row steps, layer and RMS norm);
//!   [`add_norm`]: a sub-layer's tail `LayerNorm(Dropout(y) + r)` and its backward;
//! - [`recycle`]: large buffers handed back by one training op and taken by the next, so
//!   that a step reuses memory without zeroing it;
//! - [`rows`]: outputs built block by block on the threads; [`mask`]: additive masks as rows;
//! - [`policy`]: how work is cut into tasks and tiles; [`ceiling`]: each multiply-add
//!   instruction's rate on one core, the ceiling the products are measured against.
//!
//! ```text
//! product:  C = (accumulate ? C : 0) + alpha * A B
//!           Precision::F32   A, B in f32                    (gemm)
//!           Precision::Bf16  round_bf16(A), round_bf16(B)   (our kernel; f32 accumulation)
//! ```
//!
//! Everything else (norms, softmax, losses, the optimiser) stays f32 whatever the precision,
//! as under PyTorch's `torch.autocast(dtype=torch.bfloat16)` on the CPU. A new precision is a
//! [`Precision`] variant and a kernel beside [`bf16`], chosen in [`product`].
//!
//! This layer imports nothing of the model: only candle, gemm, rayon and std.

pub(crate) mod add_norm;
pub(crate) mod bf16;
pub(crate) mod ceiling;
pub(crate) mod dense;
pub(crate) mod kept;
pub(crate) mod kept_weight;
pub(crate) mod mask;
pub(crate) mod mat;
pub(crate) mod math;
pub(crate) mod policy;
mod precision;
pub(crate) mod product;
pub(crate) mod recycle;
pub(crate) mod reference_path;
pub(crate) mod rows;
pub(crate) mod tensor;
#[cfg(test)]
mod tests;

pub(crate) use mat::{Dst, Mat, SharedOut};
pub use precision::Precision;
pub(crate) use product::product;
