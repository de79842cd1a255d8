//! What the team's benchmarks (`roformer bench products`, `roformer bench attention`) and
//! reference tests time and compare below the model's front door; a user of the model needs
//! none of it.
//!
//! - The matrix products against the hardware: each multiply-add instruction's ceiling on one
//!   core ([`ceilings`]) and one product of the CPU layer, f32 or bf16, to time against it
//!   ([`ProductCase`]):
//!
//!   ```text
//!   share of the ceiling = product GFLOP/s / (ceiling GFLOP/s x threads)
//!   product FLOP         = 2 m n k
//!   ```
//!
//! - The two attention kinds: scaled dot-product attention
//!   `softmax(q k^T / sqrt(d) + mask) v` ([`softmax_attention`]), and RoPE with linear
//!   attention, the paper's eq. 19 (`Attention_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n
//!   / sum_n phi(q_m)^T phi(k_n)`, `phi(x) = elu(x) + 1`), in time linear in the length
//!   ([`LinearAttention`]) and as written ([`linear_attention_slow`], its reference).

pub use crate::attention::softmax_attention;
pub use crate::linear_attention::{
    linear_attention_slow, LinearAttention, LinearAttentionError, Masking, DEFAULT_CHUNK,
};
pub use crate::roofline::{bf16_kernels, ceilings, onednn_version, Ceiling, ProductCase, Storage};
