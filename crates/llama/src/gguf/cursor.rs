//! A bounds-checked little-endian reader over the bytes of a GGUF file.

use crate::error::{LlamaError, Result};

/// Reads little-endian values from the bytes of a file, or from a prefix of them, failing with
/// the offset on a short read.
///
/// Over a prefix, sizes are still checked against the whole file ([`Cursor::remaining`]); a read
/// that the file could serve but the prefix cannot fails and sets [`Cursor::needs_more`], so the
/// caller can read a longer prefix and parse again.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    file_len: usize,
    needs_more: bool,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`, the first bytes of a file of `file_len` bytes.
    pub(super) fn prefix(bytes: &'a [u8], file_len: usize) -> Self {
        Cursor {
            bytes,
            pos: 0,
            file_len: file_len.max(bytes.len()),
            needs_more: false,
        }
    }

    /// Whether a read failed only because the prefix ended before the file does.
    pub(super) fn needs_more(&self) -> bool {
        self.needs_more
    }

    /// The current offset.
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes of the file left after the current offset.
    pub(super) fn remaining(&self) -> usize {
        self.file_len - self.pos
    }

    /// An error at the current offset.
    pub(super) fn error(&self, what: impl Into<String>) -> LlamaError {
        LlamaError::Malformed {
            offset: self.pos as u64,
            what: what.into(),
        }
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.error(format!(
                "{what} needs {n} bytes, the file has {} left",
                self.remaining()
            )));
        }
        let Some(out) = self.bytes.get(self.pos..self.pos + n) else {
            self.needs_more = true;
            return Err(self.error(format!("{what}: past the bytes read so far")));
        };
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(super) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(super) fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub(super) fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A count or length stored as u64, checked against what `min_bytes_each` elements of that
    /// many would need from the rest of the file: a header never makes us reserve more than the
    /// file could hold.
    pub(super) fn count(&mut self, what: &str, min_bytes_each: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .filter(|&n| n.saturating_mul(min_bytes_each.max(1)) <= self.remaining());
        fits.ok_or_else(|| LlamaError::Malformed {
            offset: at as u64,
            what: format!(
                "{what} is {n}, more than the {} bytes left in the file can hold",
                self.remaining()
            ),
        })
    }

    /// A GGUF string: u64 length, then that many bytes of UTF-8.
    pub(super) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.count(what, 1)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| LlamaError::Malformed {
            offset: at as u64,
            what: format!("{what} is not UTF-8: {e}"),
        })
    }
}
