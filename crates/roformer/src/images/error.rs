//! What can go wrong in the image data layer: one error type per job (image shapes, IDX
//! files, image files, the Fashion-MNIST directory, processor and augmentation options).

use std::path::PathBuf;

/// An image or a size that an operation cannot work on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The pixel buffer's length is not `channels * height * width` (or that product overflows).
    #[error("{len} values cannot hold {channels} x {height} x {width} planes")]
    Shape {
        /// The channels asked for.
        channels: usize,
        /// The height asked for.
        height: usize,
        /// The width asked for.
        width: usize,
        /// The buffer's length.
        len: usize,
    },
    /// An image or a requested size with no pixel (a zero side, or no channel).
    #[error("empty image: {channels} x {height} x {width}")]
    Empty {
        /// Channels.
        channels: usize,
        /// Height.
        height: usize,
        /// Width.
        width: usize,
    },
    /// A channel count the operation does not take (colour conversion knows 1 and 3).
    #[error("{found} channels where {expected} was expected")]
    Channels {
        /// The image's channel count.
        found: usize,
        /// What the operation takes.
        expected: &'static str,
    },
    /// Per-channel statistics whose count does not match the image's channels.
    #[error("{what} has {found} values for an image of {channels} channels")]
    StatsLength {
        /// Which statistic (`mean`, `std`).
        what: &'static str,
        /// Its length.
        found: usize,
        /// The image's channels.
        channels: usize,
    },
}

/// A malformed, unsupported or oversized IDX file.
///
/// Every size in the header is checked against the data actually present and against the
/// caller's byte cap before anything of that size is allocated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdxError {
    /// The file could not be opened or read (the cause is the source).
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Reading the stream failed: a corrupt gzip stream, or an I/O error.
    #[error("cannot read the IDX stream: {0}")]
    Read(#[source] std::io::Error),
    /// The stream ends inside the 4-byte magic number or the dimensions.
    #[error("the IDX header is cut short: {needed} bytes needed, {found} present")]
    ShortHeader {
        /// Header bytes needed.
        needed: usize,
        /// Header bytes present.
        found: usize,
    },
    /// The first two bytes of the magic number are not zero: not an IDX file.
    #[error("not an IDX file: magic number starts with {0:#04x} {1:#04x}, not 0x00 0x00")]
    NotIdx(u8, u8),
    /// A type byte this reader does not load (it loads unsigned bytes, 0x08).
    #[error(
        "unsupported IDX element type {code:#04x} ({name}); only 0x08 (unsigned byte) is read"
    )]
    UnsupportedType {
        /// The type byte.
        code: u8,
        /// Its name in the IDX format, or `unknown`.
        name: &'static str,
    },
    /// A rank of 0 or above [`MAX_RANK`](super::idx::MAX_RANK).
    #[error("unsupported IDX rank {rank} (1 to {max})")]
    UnsupportedRank {
        /// The rank byte.
        rank: u8,
        /// The largest rank read.
        max: usize,
    },
    /// The product of the dimensions does not fit in 64 bits.
    #[error("the IDX dimensions {dims:?} overflow")]
    Overflow {
        /// The dimensions read.
        dims: Vec<u64>,
    },
    /// Header and data together exceed the caller's cap on (decompressed) bytes.
    #[error("the IDX file declares {declared} bytes, over the limit of {limit}")]
    TooLarge {
        /// Header plus declared data, in bytes.
        declared: u64,
        /// The cap.
        limit: u64,
    },
    /// The (decompressed) data is shorter than the header declares.
    #[error("the IDX data is cut short: {declared} bytes declared, {found} present")]
    Truncated {
        /// Data bytes the dimensions declare.
        declared: u64,
        /// Data bytes present.
        found: u64,
    },
    /// Dimensions that cannot describe the bytes given to [`IdxArray::new`](super::IdxArray::new)
    /// (their product differs from the length, or a dimension exceeds `u32::MAX`).
    #[error("the dimensions {dims:?} do not describe {len} bytes of IDX data")]
    Layout {
        /// The dimensions given.
        dims: Vec<usize>,
        /// The data's length.
        len: usize,
    },
    /// Bytes follow the declared data: the header lies about the size.
    #[error("the IDX data runs past the {declared} bytes its dimensions declare")]
    TrailingData {
        /// Data bytes the dimensions declare.
        declared: u64,
    },
}

/// An image file that is refused or cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The file could not be opened or read (the cause is the source).
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The encoded bytes exceed the caller's cap (checked before decoding).
    #[error("the image file has {bytes} bytes, over the limit of {limit}")]
    TooManyBytes {
        /// The file's size.
        bytes: u64,
        /// The cap.
        limit: u64,
    },
    /// Neither PNG nor JPEG (by the leading bytes).
    #[error("not a PNG or JPEG image")]
    UnsupportedFormat,
    /// The header declares more pixels than the caller allows (checked before any pixel buffer
    /// is allocated).
    #[error("the image declares {width} x {height} pixels, over the limit of {limit}")]
    TooManyPixels {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The cap on `width * height`.
        limit: u64,
    },
    /// The header declares a zero width or height.
    #[error("the image declares a zero size ({width} x {height})")]
    Empty {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
    },
    /// The file ends before the image does.
    #[error("the image file is truncated")]
    Truncated,
    /// The decoder needed more memory than the limits allow.
    #[error("decoding the image exceeds the memory limits: {0}")]
    Limits(String),
    /// The bytes are not a valid image of their format.
    #[error("corrupt image: {0}")]
    Corrupt(String),
}

/// A Fashion-MNIST directory whose files are missing, malformed or disagree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// An IDX file is missing or malformed (the cause is the source).
    #[error("{path}: bad IDX file")]
    Idx {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: IdxError,
    },
    /// An IDX file whose dimensions are not those of its role (`[n, 28, 28]` images, `[n]`
    /// labels).
    #[error("{path}: dimensions {found:?}, expected {expected}")]
    Dims {
        /// The file.
        path: PathBuf,
        /// Its dimensions.
        found: Vec<usize>,
        /// What they should be.
        expected: &'static str,
    },
    /// The image and label files hold different numbers of examples.
    #[error("{images} images but {labels} labels")]
    CountMismatch {
        /// Images in the image file.
        images: usize,
        /// Labels in the label file.
        labels: usize,
    },
    /// A label outside `0..10`.
    #[error("{path}: label {label} at index {index} is not a class (0 to 9)")]
    BadLabel {
        /// The label file.
        path: PathBuf,
        /// The example.
        index: usize,
        /// The value found.
        label: u8,
    },
    /// An image operation failed (a batch side of 0).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A validation split larger than the training set it is cut from, or an example index
    /// past the end of a split.
    #[error("{what}: {requested} requested of {available}")]
    OutOfRange {
        /// What was asked for.
        what: &'static str,
        /// The count or index requested.
        requested: usize,
        /// The examples available.
        available: usize,
    },
}

/// Options (an image processor's `preprocessor_config.json`, augmentation settings) that parse
/// but cannot be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read (the cause is the source).
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The JSON does not parse, has a field of the wrong type, or a field this crate does not
    /// know (the parser's message names it).
    #[error("malformed preprocessor config: {0}")]
    Json(#[from] serde_json::Error),
    /// An option this crate does not implement: refused rather than ignored.
    #[error("unsupported {field}: {reason}")]
    Unsupported {
        /// The config field or option.
        field: &'static str,
        /// What was found and what is supported.
        reason: String,
    },
    /// A value no image operation can use (a zero size, a non-positive std, ...).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The config field or option.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Applying the options to an image failed.
    #[error(transparent)]
    Image(#[from] ImageError),
}
