//! Numerical analyses of RoPE from the paper: quantities that describe the rotation itself,
//! computed from the frequency schedule and checked through the kernels.
//!
//! - [`decay`]: the long-term decay bound of the paper's section 3.4.3 (its Figure 2), and the
//!   measured scores `<R_m q, R_n k>` it bounds;
//! - [`attention_map`]: the score of one position against all others under any schedule (1D or
//!   N-D), the picture behind seed 003's axial 2D form.

pub mod attention_map;
pub mod decay;
