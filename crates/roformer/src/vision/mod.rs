//! A vision transformer with 2D rotary positions, built from the encoder's parts, that loads
//! transformers' DINOv3 (`DINOv3ViTModel`, `model_type: dinov3_vit`) and trains.
//!
//! ```text
//! pixels [b, c, h, w]
//!   -> patches: a stride-p convolution as one product over unfolded patches   [b, n, hidden]
//!      (n = floor(h/p) floor(w/p): the grid comes from the image; pixels past the last
//!       whole patch are dropped)
//!   -> [CLS; registers; patches] (+ a resampled absolute table on the patches)
//!   -> layers: x + lambda1 Attn(LN1 x), then h + lambda2 Mlp(LN2 h)     pre-norm, layer scales
//!      (q, k of the patch tokens rotated by 2D RoPE, the prefix tokens left as they are)
//!   -> LayerNorm: last_hidden_state; its CLS row: pooler_output
//! ```
//!
//! The position kind is one config field ([`PositionKind`]: `rope_axial`, `rope_mixed`,
//! `rope_flat`, `absolute`, `none`), the coordinates another ([`Coordinates`]: DINOv3's
//! normalised patch centres, the seed's integer indices, or those indices stretched onto the
//! config's grid). The rotation goes through
//! [`rotary::nd`]: a per-token cos/sin table whose prefix rows are the identity, handed to
//! the encoder's fused attention on the CPU, or the same angles as candle ops elsewhere and for
//! RoPE-Mixed's learned frequencies.
//!
//! Files, one job each: `config` (the two-phase config), `positions` (grid and coordinates),
//! `rope` (the rotation of a pass), `absolute` (the learned table and its bicubic resampling),
//! `patch` (the patch embedding), `embeddings`, `attention`, `mlp`, `block`, `model`
//! ([`VisionModel`], [`VisionForImageClassification`]), `tensors` (what a checkpoint must
//! hold), `load` ([`VisionModelDir`]), `init` (seeded initial values in a `VarMap`), `save`
//! (a Hugging Face directory), `ops` (the plan's execution choice), `error`.
//!
//! Every layer has a fast path (the fused CPU ops, f32 on the CPU, products in the plan's
//! precision) and a reference of candle ops (any device and dtype); the tests run one against
//! the other, against candle's `conv2d`, against finite differences, and against transformers
//! on the committed fixtures.

pub mod absolute;
mod attention;
mod block;
pub mod config;
mod embeddings;
pub mod error;
pub mod init;
mod load;
mod mlp;
mod model;
mod ops;
pub mod patch;
pub mod positions;
pub mod rope;
pub mod save;
pub mod tensors;

#[cfg(test)]
pub(crate) mod tests;

pub use attention::VisionAttention;
pub use block::VisionLayer;
pub use config::{
    Biases, CoordinateAugmentation, MlpKind, PositionKind, RawVisionConfig, SizeField, VisionConfig,
};
pub use embeddings::VisionEmbeddings;
pub use error::VisionError;
pub use load::VisionModelDir;
pub use mlp::Mlp;
pub use model::{VisionForImageClassification, VisionModel, VisionOutput};
pub use positions::{Coordinates, PatchGrid};
pub use tensors::VisionKind;
