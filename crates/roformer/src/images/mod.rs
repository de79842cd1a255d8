//! The image data layer: files in, `[c, h, w]` f32 planes out, for a vision model's training,
//! evaluation, command line and server. Framework-free: plain slices and vectors in, typed
//! results out.
//!
//! - [`planes`]: the one image layout, `[channels, height, width]` row-major, grey and RGB.
//! - [`idx`]: IDX files (MNIST's format), plain or gzipped, every size checked.
//! - [`fashion_mnist`]: the Fashion-MNIST splits, class names, validation cut and statistics.
//! - [`sniff`] and [`decode`]: PNG and JPEG files, sizes checked before decoding.
//! - [`resize`](mod@resize): bilinear resizing as PyTorch does it, with and without antialiasing;
//!   [`geometry`]: windows, centre crops, mirror images.
//! - [`processor`]: a Hugging Face (DINOv3) image processor from `preprocessor_config.json`.
//! - [`augment`] and [`batch`]: seeded training augmentation (random sides, crops, flips,
//!   erasing) and `[b, c, s, s]` batches of Fashion-MNIST.
//! - [`tensor`]: a batch or an image as candle tensors, the one place candle appears.

#![warn(missing_docs)]

pub mod augment;
pub mod batch;
pub mod decode;
pub mod error;
pub mod fashion_mnist;
pub mod geometry;
pub mod idx;
pub mod planes;
pub mod processor;
pub mod resize;
pub mod sniff;
pub mod tensor;

pub use augment::{Augmentation, Crop, Erasing};
pub use batch::{epoch_order, BatchBuilder, ImageBatch};
pub use decode::{decode_image, read_image, DecodeLimits};
pub use error::{ConfigError, DatasetError, DecodeError, IdxError, ImageError};
pub use fashion_mnist::{FashionMnist, Split, CLASS_NAMES};
pub use idx::{read_idx, read_idx_file, IdxArray};
pub use planes::{Channels, Planes};
pub use processor::{ImageProcessor, RawProcessorConfig};
pub use resize::{resize, Resample};
