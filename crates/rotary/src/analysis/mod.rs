//! Numerical analyses of RoPE from the paper: quantities that describe the rotation itself,
//! computed from the frequency schedule and checked through the kernels.
//!
//! - [`decay`]: the long-term decay bound of the paper's section 3.4.3 (its Figure 2), and the
//!   measured scores `<R_m q, R_n k>` it bounds.

pub mod decay;
