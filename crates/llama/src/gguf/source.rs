//! Where a GGUF file's bytes come from: the file, read with positional reads into memory this
//! process owns, or a buffer held in memory.
//!
//! Why not a memory map: when another process truncates a mapped file, the next read of a page
//! past the new end raises SIGBUS, which kills the process with no message. Here every read is
//! a `pread` of a range that the file's size at opening allows; a short read (the file shrank
//! meanwhile) is an error the caller reports as "FILE changed while it was being read". A file
//! rewritten in place without shrinking gives new bytes, never a fault.
//!
//! Memory: the header is read into memory (a few MB for a 50 k-token vocabulary), and each
//! tensor is read into a buffer of its own size, copied into the model and freed, so the peak
//! is the model plus its largest tensor. Reading the whole file first would hold every weight
//! twice at the peak (the file as read, and the model's copy); a map held one copy but could
//! fault. Time: each tensor now passes through a fresh buffer (its page faults and one more
//! copy): a 26 MB f32 GGUF in the page cache loads in about 43 ms instead of 27 ms through a
//! map; the tiny 88 kB fixture in 0.06 ms instead of 0.03 ms (the NaN scan itself is lost in
//! the noise of both). Small next to reading a file that is not yet in the page cache.

use std::fs::File;
use std::io;
use std::ops::{Deref, Range};
use std::path::Path;

/// The bytes of a GGUF file.
#[derive(Debug)]
pub(super) enum Source {
    /// An open regular file and its size when it was opened.
    File {
        /// The file.
        file: File,
        /// Its size at opening: every read stays below it.
        len: usize,
    },
    /// A buffer (tests, in-memory files).
    Owned(Vec<u8>),
}

impl Source {
    /// Opens `path` for reading, refusing anything but a regular file before a read can block:
    /// on Unix the file is opened non-blocking (opening a FIFO with no writer would otherwise
    /// wait forever) and its type is asked of the open file, so no rename in between can swap
    /// it for a FIFO.
    ///
    /// # Errors
    /// The operating system's, or [`io::ErrorKind::InvalidInput`] for a directory, FIFO,
    /// socket or device.
    pub(super) fn open(path: &Path) -> io::Result<Source> {
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = options.open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a directory, FIFO, socket or device); give a GGUF file",
            ));
        }
        let len = usize::try_from(meta.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the file is too large"))?;
        Ok(Source::File { file, len })
    }

    /// The file's size (at opening), or the buffer's.
    pub(super) fn len(&self) -> usize {
        match self {
            Source::File { len, .. } => *len,
            Source::Owned(v) => v.len(),
        }
    }

    /// The bytes of `range`, which must lie below [`Source::len`]: borrowed from a buffer, or
    /// read from the file into an 8-byte aligned buffer.
    ///
    /// # Errors
    /// [`io::ErrorKind::UnexpectedEof`] when the file is now shorter than `range.end` (it
    /// changed since it was opened); other errors of the operating system.
    pub(super) fn read(&self, range: Range<usize>) -> io::Result<TensorBytes<'_>> {
        match self {
            Source::Owned(v) => v
                .get(range)
                .map(|b| TensorBytes(Inner::Borrowed(b)))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof)),
            Source::File { file, .. } => {
                let mut buffer = AlignedBytes::zeroed(range.len());
                read_exact_at(file, buffer.as_mut_slice(), range.start as u64)?;
                Ok(TensorBytes(Inner::Read(buffer)))
            }
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(mut file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Bytes of a GGUF file: borrowed from an in-memory file, or read from disk into a buffer
/// aligned to 8 bytes (as candle's block types need).
#[derive(Debug)]
pub struct TensorBytes<'a>(Inner<'a>);

#[derive(Debug)]
enum Inner<'a> {
    Borrowed(&'a [u8]),
    Read(AlignedBytes),
}

impl Deref for TensorBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Borrowed(b) => b,
            Inner::Read(a) => a.as_slice(),
        }
    }
}

/// A byte buffer aligned to 8 bytes (backed by `u64`s).
#[derive(Debug)]
pub(super) struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    /// A copy of `bytes`.
    pub(super) fn copy(bytes: &[u8]) -> AlignedBytes {
        let mut out = AlignedBytes::zeroed(bytes.len());
        out.as_mut_slice().copy_from_slice(bytes);
        out
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: the words own at least `len` initialised bytes, and u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; the borrow of `self` is exclusive, and every bit pattern is a
        // valid u64, so writing bytes through the view keeps the words valid.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}
