//! The format and the declared size of a PNG or JPEG file, read from its first bytes without
//! decoding anything, so that a size can be refused before a pixel buffer exists.
//!
//! - PNG: the 8-byte signature `89 50 4E 47 0D 0A 1A 0A`, then the `IHDR` chunk (length 13)
//!   whose data starts with the width and the height as big-endian `u32`.
//! - JPEG: `FF D8` (start of image), then marker segments `FF m` with a big-endian length
//!   (which counts itself) up to the first start-of-frame marker (`C0` to `CF` except `C4`
//!   DHT, `C8` JPG and `CC` DAC), whose data is the sample precision (1 byte), the height
//!   and the width (2 bytes each, big-endian). A height of 0 (defined later by a DNL marker)
//!   reads as a zero size.

use super::error::DecodeError;

/// An image file format this crate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Portable Network Graphics.
    Png,
    /// JPEG (JFIF or Exif).
    Jpeg,
}

/// What a file's header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format, from the leading bytes.
    pub format: Format,
    /// Declared width in pixels.
    pub width: u32,
    /// Declared height in pixels.
    pub height: u32,
}

/// The PNG signature.
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

/// Reads the format and the declared size (see the module doc for where they are).
///
/// # Errors
/// [`DecodeError::UnsupportedFormat`] when the bytes start neither as PNG nor as JPEG;
/// [`DecodeError::Truncated`] when they end before the size; [`DecodeError::Corrupt`] when
/// the header's structure is wrong.
pub fn read_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    if bytes.starts_with(&PNG_SIGNATURE) {
        png_header(bytes)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg_header(bytes)
    } else {
        Err(DecodeError::UnsupportedFormat)
    }
}

/// The big-endian `u32` at `at`, or `Truncated`.
fn be32(bytes: &[u8], at: usize) -> Result<u32, DecodeError> {
    let b = bytes.get(at..at + 4).ok_or(DecodeError::Truncated)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The big-endian `u16` at `at`, or `Truncated`.
fn be16(bytes: &[u8], at: usize) -> Result<u16, DecodeError> {
    let b = bytes.get(at..at + 2).ok_or(DecodeError::Truncated)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

/// The size in a PNG's `IHDR` chunk.
fn png_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let length = be32(bytes, 8)?;
    let kind = bytes.get(12..16).ok_or(DecodeError::Truncated)?;
    if kind != b"IHDR" || length != 13 {
        return Err(DecodeError::Corrupt(
            "the first PNG chunk is not IHDR".into(),
        ));
    }
    Ok(Header {
        format: Format::Png,
        width: be32(bytes, 16)?,
        height: be32(bytes, 20)?,
    })
}

/// The size in a JPEG's first start-of-frame segment.
fn jpeg_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let mut at = 2;
    loop {
        // Markers are FF followed by a code; extra FF bytes are fill.
        if *bytes.get(at).ok_or(DecodeError::Truncated)? != 0xFF {
            return Err(DecodeError::Corrupt(format!("no JPEG marker at byte {at}")));
        }
        while *bytes.get(at).ok_or(DecodeError::Truncated)? == 0xFF {
            at += 1;
        }
        let marker = bytes[at];
        at += 1;
        match marker {
            // Standalone markers: no length.
            0x01 | 0xD0..=0xD7 => continue,
            0xD9 | 0xDA => {
                return Err(DecodeError::Corrupt(
                    "no JPEG frame header before the scan".into(),
                ))
            }
            _ => {}
        }
        let length = usize::from(be16(bytes, at)?);
        if length < 2 {
            return Err(DecodeError::Corrupt(format!(
                "JPEG segment length {length}"
            )));
        }
        if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            return Ok(Header {
                format: Format::Jpeg,
                height: u32::from(be16(bytes, at + 3)?),
                width: u32::from(be16(bytes, at + 5)?),
            });
        }
        at += length;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG signature and IHDR declaring `width x height` (no further chunk).
    fn png_ihdr(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = PNG_SIGNATURE.to_vec();
        bytes.extend_from_slice(&13u32.to_be_bytes());
        bytes.extend_from_slice(b"IHDR");
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn png_sizes_are_read() {
        let header = read_header(&png_ihdr(100_000, 7)).unwrap();
        assert_eq!(
            header,
            Header {
                format: Format::Png,
                width: 100_000,
                height: 7
            }
        );
        assert!(matches!(
            read_header(&png_ihdr(1, 1)[..20]),
            Err(DecodeError::Truncated)
        ));
        let mut wrong = png_ihdr(1, 1);
        wrong[12..16].copy_from_slice(b"IDAT");
        assert!(matches!(read_header(&wrong), Err(DecodeError::Corrupt(_))));
    }

    #[test]
    fn jpeg_sizes_are_read_past_other_segments() {
        // SOI, an APP0 segment of 4 data bytes, fill, SOF0: precision 8, height 3, width 513.
        let bytes = [
            0xFF, 0xD8, 0xFF, 0xE0, 0, 6, 1, 2, 3, 4, 0xFF, 0xFF, 0xC0, 0, 11, 8, 0, 3, 2, 1, 1,
        ];
        let header = read_header(&bytes).unwrap();
        assert_eq!(
            (header.format, header.width, header.height),
            (Format::Jpeg, 513, 3)
        );
        assert!(matches!(
            read_header(&bytes[..18]),
            Err(DecodeError::Truncated)
        ));
        assert!(matches!(
            read_header(&bytes[..2]),
            Err(DecodeError::Truncated)
        ));
        let scan_first = [0xFF, 0xD8, 0xFF, 0xDA, 0, 2];
        assert!(matches!(
            read_header(&scan_first),
            Err(DecodeError::Corrupt(_))
        ));
        let bad_length = [0xFF, 0xD8, 0xFF, 0xE0, 0, 1];
        assert!(matches!(
            read_header(&bad_length),
            Err(DecodeError::Corrupt(_))
        ));
    }

    #[test]
    fn other_formats_are_refused() {
        assert!(matches!(
            read_header(b"GIF89a"),
            Err(DecodeError::UnsupportedFormat)
        ));
        assert!(matches!(
            read_header(b""),
            Err(DecodeError::UnsupportedFormat)
        ));
    }
}
