//! PNG and JPEG files to `[c, h, w]` u8 planes, with every size checked before it is
//! allocated.
//!
//! The checks, in order: the encoded length against [`DecodeLimits::max_bytes`] (for a file,
//! before reading it); the format and declared size from the header ([`sniff`](super::sniff));
//! a zero side; `width * height` against [`DecodeLimits::max_pixels`]. Only then does the
//! `image` crate decode, under `image::io::Limits` that hold it to the declared size and to
//! at most 8 bytes per pixel of allocations, so a decompression bomb stops at the limit.
//!
//! The result keeps the file's colours: grey files (with or without alpha) give one plane,
//! colour files three. Transparency is composited onto white, as transformers'
//! `convert_to_rgb` does: `v = round((a v + (255 - a) 255) / 255)`. 16-bit samples are
//! reduced to 8 bits by the `image` crate (`round(v / 257)`). Exif orientation is not applied.

use std::fs::File;
use std::io::{self, Cursor, Read};
use std::path::Path;

use image::io::{Limits, Reader};
use image::{DynamicImage, ImageError as CrateError, ImageFormat};

use super::error::DecodeError;
use super::planes::Planes;
use super::sniff::{read_header, Format};

/// The caps a decode works under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The most encoded bytes accepted.
    pub max_bytes: u64,
    /// The most pixels (`width * height`) a header may declare.
    pub max_pixels: u64,
}

impl Default for DecodeLimits {
    /// 16 MiB of file and 16,777,216 pixels (4096 x 4096): 48 MiB decoded as RGB, 192 MiB as
    /// f32 planes.
    fn default() -> Self {
        Self {
            max_bytes: 16 << 20,
            max_pixels: 4096 * 4096,
        }
    }
}

/// Decodes a PNG or JPEG file held in memory (see the module doc for the checks and the
/// colours).
///
/// # Errors
/// [`DecodeError::TooManyBytes`], [`DecodeError::UnsupportedFormat`],
/// [`DecodeError::Empty`] and [`DecodeError::TooManyPixels`] before decoding;
/// [`DecodeError::Truncated`], [`DecodeError::Limits`], [`DecodeError::Corrupt`] from it.
pub fn decode_image(bytes: &[u8], limits: &DecodeLimits) -> Result<Planes<u8>, DecodeError> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(DecodeError::TooManyBytes {
            bytes: bytes.len() as u64,
            limit: limits.max_bytes,
        });
    }
    let header = read_header(bytes)?;
    let (width, height) = (header.width, header.height);
    if width == 0 || height == 0 {
        return Err(DecodeError::Empty { width, height });
    }
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels {
        return Err(DecodeError::TooManyPixels {
            width,
            height,
            limit: limits.max_pixels,
        });
    }
    let format = match header.format {
        Format::Png => ImageFormat::Png,
        Format::Jpeg => ImageFormat::Jpeg,
    };
    let mut reader = Reader::with_format(Cursor::new(bytes), format);
    let mut crate_limits = Limits::default();
    crate_limits.max_image_width = Some(width);
    crate_limits.max_image_height = Some(height);
    // The largest pixel type (RGBA, 16 bits) plus 1 MiB for metadata chunks.
    crate_limits.max_alloc = Some(pixels * 8 + (1 << 20));
    reader.limits(crate_limits);
    let image = reader.decode().map_err(crate_error)?;
    if (image.width(), image.height()) != (width, height) {
        return Err(DecodeError::Corrupt(format!(
            "decoded {} x {} pixels, the header declares {width} x {height}",
            image.width(),
            image.height()
        )));
    }
    to_planes(image)
}

/// Reads and decodes a PNG or JPEG file: its size is checked against `limits.max_bytes`
/// before it is read, then [`decode_image`] runs.
///
/// # Errors
/// [`DecodeError::Io`] when the file cannot be read; those of [`decode_image`].
pub fn read_image(path: &Path, limits: &DecodeLimits) -> Result<Planes<u8>, DecodeError> {
    let io_error = |source: io::Error| DecodeError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let size = file.metadata().map_err(io_error)?.len();
    if size > limits.max_bytes {
        return Err(DecodeError::TooManyBytes {
            bytes: size,
            limit: limits.max_bytes,
        });
    }
    // The file may grow between the two calls: read one byte past the cap at most.
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limits.max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    decode_image(&bytes, limits)
}

/// The `image` crate's error as a [`DecodeError`]: an early end of input is `Truncated`
/// whichever way the decoder reports it.
fn crate_error(error: CrateError) -> DecodeError {
    match error {
        CrateError::Limits(e) => DecodeError::Limits(e.to_string()),
        CrateError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            DecodeError::Truncated
        }
        other => {
            let message = other.to_string();
            let lower = message.to_lowercase();
            if lower.contains("eof") || lower.contains("end of") || lower.contains("truncated") {
                DecodeError::Truncated
            } else {
                DecodeError::Corrupt(message)
            }
        }
    }
}

/// Planes of the decoded image: grey or RGB, alpha composited onto white.
fn to_planes(image: DynamicImage) -> Result<Planes<u8>, DecodeError> {
    let color = image.color();
    let (w, h) = (image.width() as usize, image.height() as usize);
    let (channels, interleaved) = match (color.has_color(), color.has_alpha()) {
        (false, false) => (1, image.into_luma8().into_raw()),
        (false, true) => (1, on_white(&image.into_luma_alpha8().into_raw(), 1)),
        (true, false) => (3, image.into_rgb8().into_raw()),
        (true, true) => (3, on_white(&image.into_rgba8().into_raw(), 3)),
    };
    let area = w * h;
    let mut data = vec![0u8; channels * area];
    for (p, pixel) in interleaved.chunks_exact(channels).enumerate() {
        for (c, &v) in pixel.iter().enumerate() {
            data[c * area + p] = v;
        }
    }
    Planes::new(channels, h, w, data).map_err(|e| DecodeError::Corrupt(e.to_string()))
}

/// Interleaved pixels of `colours` values and one alpha composited onto white:
/// `round((a v + (255 - a) 255) / 255)`, computed as `floor((2 x + 255) / 510)` in integers.
fn on_white(pixels: &[u8], colours: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(pixels.len() / (colours + 1) * colours);
    for pixel in pixels.chunks_exact(colours + 1) {
        let a = u32::from(pixel[colours]);
        for &v in &pixel[..colours] {
            let blended = (2 * (a * u32::from(v) + (255 - a) * 255) + 255) / 510;
            out.push(blended as u8);
        }
    }
    out
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
