//! IDX files (the MNIST family's format), plain or gzipped, read without trusting a size.
//!
//! The format: a 4-byte magic number `0x00 0x00 T R` (`T` the element type, `R` the rank),
//! then `R` dimensions as big-endian `u32`, then the elements row-major, `prod(dims)` of them.
//! Only unsigned bytes (`T = 0x08`) are loaded, the type of every image and label file of
//! MNIST and Fashion-MNIST.
//!
//! Reading checks, in order: the magic number, the type, the rank (1 to [`MAX_RANK`]), the
//! dimensions' product (no overflow), header plus data against the caller's cap on
//! (decompressed) bytes — all before the data buffer is allocated — then that the data is
//! exactly as long as declared, neither shorter nor longer. A gzip stream is decompressed
//! through the same bounded reads, so a gzip bomb costs at most the cap plus one byte.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::Path;

use flate2::read::GzDecoder;

use super::error::IdxError;

/// The largest rank read (MNIST-like files have rank 1 or 3).
pub const MAX_RANK: usize = 8;

/// The IDX type byte of unsigned bytes, the only type loaded.
pub const TYPE_U8: u8 = 0x08;

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// An IDX array of unsigned bytes: its dimensions and its elements, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    dims: Vec<usize>,
    data: Vec<u8>,
}

impl IdxArray {
    /// Wraps row-major `data` of shape `dims`.
    ///
    /// # Errors
    /// [`IdxError::UnsupportedRank`] for no dimension or more than [`MAX_RANK`];
    /// [`IdxError::Layout`] when a dimension exceeds `u32::MAX` or `prod(dims) != data.len()`.
    pub fn new(dims: Vec<usize>, data: Vec<u8>) -> Result<Self, IdxError> {
        if dims.is_empty() || dims.len() > MAX_RANK {
            return Err(IdxError::UnsupportedRank {
                rank: u8::try_from(dims.len()).unwrap_or(u8::MAX),
                max: MAX_RANK,
            });
        }
        let product = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let fits = dims.iter().all(|&d| u32::try_from(d).is_ok());
        if !fits || product != Some(data.len()) {
            return Err(IdxError::Layout {
                dims,
                len: data.len(),
            });
        }
        Ok(Self { dims, data })
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The elements, row-major.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The dimensions and the elements.
    pub fn into_parts(self) -> (Vec<usize>, Vec<u8>) {
        (self.dims, self.data)
    }

    /// The uncompressed IDX encoding: magic `0x00 0x00 0x08 rank`, the dimensions as
    /// big-endian `u32`, the elements.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 4 * self.dims.len() + self.data.len());
        // `new` bounds the rank by MAX_RANK and every dimension by u32::MAX.
        out.extend_from_slice(&[0, 0, TYPE_U8, self.dims.len() as u8]);
        for &d in &self.dims {
            out.extend_from_slice(&(d as u32).to_be_bytes());
        }
        out.extend_from_slice(&self.data);
        out
    }
}

/// The name of an IDX type byte, for error messages.
fn type_name(code: u8) -> &'static str {
    match code {
        0x08 => "unsigned byte",
        0x09 => "signed byte",
        0x0B => "16-bit integer",
        0x0C => "32-bit integer",
        0x0D => "32-bit float",
        0x0E => "64-bit float",
        _ => "unknown",
    }
}

/// Reads an IDX file, plain or gzipped (told apart by the gzip magic bytes `1f 8b`; an IDX
/// file starts with `00 00`), allowing at most `max_bytes` of header and data once
/// decompressed.
///
/// # Errors
/// [`IdxError::Io`] when the file cannot be opened, and everything
/// [`read_idx`] returns.
pub fn read_idx_file(path: &Path, max_bytes: u64) -> Result<IdxArray, IdxError> {
    let file = File::open(path).map_err(|source| IdxError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_idx(BufReader::new(file), max_bytes)
}

/// Reads an IDX stream, plain or gzipped, allowing at most `max_bytes` of header and data once
/// decompressed.
///
/// # Errors
/// [`IdxError::ShortHeader`], [`IdxError::NotIdx`], [`IdxError::UnsupportedType`],
/// [`IdxError::UnsupportedRank`], [`IdxError::Overflow`], [`IdxError::TooLarge`] for a bad
/// header (the last one before any allocation of the declared size);
/// [`IdxError::Truncated`] and [`IdxError::TrailingData`] when the data is shorter or longer
/// than declared; [`IdxError::Read`] for a corrupt gzip stream or a failing reader.
pub fn read_idx(mut reader: impl Read, max_bytes: u64) -> Result<IdxArray, IdxError> {
    let mut head = [0u8; 2];
    let found = read_up_to(&mut reader, &mut head)?;
    let stream = Cursor::new(head[..found].to_vec()).chain(reader);
    if head == GZIP_MAGIC {
        parse(GzDecoder::new(stream), max_bytes)
    } else {
        parse(stream, max_bytes)
    }
}

/// Parses an uncompressed IDX stream (see the module doc for the checks and their order).
fn parse(mut r: impl Read, max_bytes: u64) -> Result<IdxArray, IdxError> {
    let mut magic = [0u8; 4];
    let found = read_up_to(&mut r, &mut magic)?;
    if found < magic.len() {
        return Err(IdxError::ShortHeader { needed: 4, found });
    }
    let [zero0, zero1, code, rank] = magic;
    if (zero0, zero1) != (0, 0) {
        return Err(IdxError::NotIdx(zero0, zero1));
    }
    if code != TYPE_U8 {
        return Err(IdxError::UnsupportedType {
            code,
            name: type_name(code),
        });
    }
    if rank == 0 || usize::from(rank) > MAX_RANK {
        return Err(IdxError::UnsupportedRank {
            rank,
            max: MAX_RANK,
        });
    }
    let header = 4 + 4 * usize::from(rank);
    let mut dim_bytes = vec![0u8; 4 * usize::from(rank)];
    let found = read_up_to(&mut r, &mut dim_bytes)?;
    if found < dim_bytes.len() {
        return Err(IdxError::ShortHeader {
            needed: header,
            found: 4 + found,
        });
    }
    let dims: Vec<u64> = dim_bytes
        .chunks_exact(4)
        .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    let declared = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| IdxError::Overflow { dims: dims.clone() })?;
    let total = declared
        .checked_add(header as u64)
        .ok_or_else(|| IdxError::Overflow { dims: dims.clone() })?;
    let len = usize::try_from(declared)
        .ok()
        .filter(|_| total <= max_bytes);
    let Some(len) = len else {
        return Err(IdxError::TooLarge {
            declared: total,
            limit: max_bytes,
        });
    };
    let mut data = Vec::with_capacity(len);
    r.by_ref()
        .take(declared)
        .read_to_end(&mut data)
        .map_err(IdxError::Read)?;
    if data.len() < len {
        return Err(IdxError::Truncated {
            declared,
            found: data.len() as u64,
        });
    }
    let mut extra = [0u8; 1];
    if read_up_to(&mut r, &mut extra)? > 0 {
        return Err(IdxError::TrailingData { declared });
    }
    // The dimensions came from u32 values and their product fits in memory.
    let dims = dims.into_iter().map(|d| d as usize).collect();
    Ok(IdxArray { dims, data })
}

/// Fills `buf` from `r` until it is full or the stream ends; the number of bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, IdxError> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(IdxError::Read(e)),
        }
    }
    Ok(filled)
}

#[cfg(test)]
#[path = "idx_tests.rs"]
mod tests;
