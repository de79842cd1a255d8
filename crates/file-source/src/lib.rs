//! Where a model file's bytes come from (a checkpoint of `roformer`, a GGUF file of `llama`):
//! the file, read with positional reads into memory this process owns, or a buffer held in
//! memory.
//!
//! Why not a memory map: when another process truncates a mapped file, the next read of a page
//! past the new end raises SIGBUS, which kills the process with no message. Here every read is
//! a `pread` of a range that the file's size at opening allows; a short read (the file shrank
//! meanwhile) is a [`ReadError::Short`], recorded, so that the caller can report "FILE changed
//! while it was being read". A file rewritten in place without shrinking gives new bytes, never
//! a fault, and is caught by its size or modification time when the caller asks
//! ([`Source::changed`]).
//!
//! Memory: nothing is read but what a caller asks for, into a buffer it reuses
//! ([`Source::read`]) or into one 8-byte aligned buffer per read ([`Source::read_aligned`], for
//! quantized blocks that candle reads in place). The whole file is never held in memory, and
//! no page of it stays resident in this process.
//!
//! ```
//! use file_source::{ReadError, Source};
//! let source = Source::Owned(b"GGUF and more".to_vec());
//! let mut buffer = Vec::new();
//! assert_eq!(source.read(0..4, &mut buffer)?, b"GGUF");
//! assert_eq!(&*source.read_aligned(5..8)?, b"and");
//! assert!(matches!(source.read(10..20, &mut buffer), Err(ReadError::PastEnd { .. })));
//! # Ok::<(), ReadError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod aligned;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::OnceLock;
use std::time::SystemTime;

pub use aligned::AlignedBytes;

/// Why bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A range past the end of the file (as it was opened) or of the buffer.
    #[error("bytes {range:?} lie past the end of the file ({len} bytes)")]
    PastEnd {
        /// The range asked for.
        range: Range<usize>,
        /// The size of the file at opening, or of the buffer.
        len: usize,
    },
    /// A read within the size at opening that came back short: the file shrank since.
    #[error("bytes {range:?} of a file of {len} bytes when opened came back short")]
    Short {
        /// The range asked for.
        range: Range<usize>,
        /// The size of the file at opening.
        len: usize,
    },
    /// A read the operating system refused.
    #[error("cannot read bytes {range:?}: {message}")]
    Io {
        /// The range asked for.
        range: Range<usize>,
        /// The operating system's message.
        message: String,
    },
}

/// The bytes of a model file.
#[derive(Debug)]
pub enum Source {
    /// An open regular file.
    File(FileSource),
    /// A buffer (tests, a model built into a binary, an in-memory file).
    Owned(Vec<u8>),
}

/// An open regular file, what it looked like when it was opened, and the first sign that it
/// changed since.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    /// Its size at opening: every read stays below it.
    len: usize,
    /// Its modification time at opening, where the platform has one.
    modified: Option<SystemTime>,
    /// The first read that came back short, described.
    short_read: OnceLock<String>,
}

impl FileSource {
    /// Fills `out` with the file's bytes from `start`, which the caller checked to lie within
    /// the size at opening.
    ///
    /// # Errors
    /// [`ReadError::Short`] for a file now shorter than that (also recorded), [`ReadError::Io`]
    /// for a read the operating system refused.
    fn fill(&self, start: usize, out: &mut [u8]) -> Result<(), ReadError> {
        let range = start..start + out.len();
        match read_exact_at(&self.file, out, start as u64) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                let short = ReadError::Short {
                    range,
                    len: self.len,
                };
                self.short_read.get_or_init(|| short.to_string());
                Err(short)
            }
            Err(e) => Err(ReadError::Io {
                range,
                message: e.to_string(),
            }),
        }
    }
}

impl Source {
    /// Opens `path` for reading, refusing anything but a regular file before a read can block:
    /// on Unix the file is opened non-blocking (opening a FIFO with no writer would otherwise
    /// wait forever) and its type is asked of the open file, so no rename in between can swap
    /// it for a FIFO.
    ///
    /// # Errors
    /// The operating system's, or [`io::ErrorKind::InvalidInput`] for a directory, FIFO,
    /// socket or device (`what` names the file expected in the message, e.g. "a GGUF file").
    pub fn open(path: &Path, what: &str) -> io::Result<Source> {
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = options.open(path)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a regular file (a directory, FIFO, socket or device); give {what}"),
            ));
        }
        Source::file(file)
    }

    /// Reads from `file`, a regular file, from now on.
    ///
    /// # Errors
    /// The operating system's, or [`io::ErrorKind::InvalidInput`] for a file larger than the
    /// address space.
    pub fn file(file: File) -> io::Result<Source> {
        let meta = file.metadata()?;
        let len = usize::try_from(meta.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the file is too large"))?;
        Ok(Source::File(FileSource {
            modified: meta.modified().ok(),
            file,
            len,
            short_read: OnceLock::new(),
        }))
    }

    /// The file's size (at opening), or the buffer's.
    pub fn len(&self) -> usize {
        match self {
            Source::File(f) => f.len,
            Source::Owned(v) => v.len(),
        }
    }

    /// Whether the file (at opening) or the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that `range` lies within [`Source::len`].
    fn check(&self, range: &Range<usize>) -> Result<(), ReadError> {
        if range.start > range.end || range.end > self.len() {
            return Err(ReadError::PastEnd {
                range: range.clone(),
                len: self.len(),
            });
        }
        Ok(())
    }

    /// The bytes of `range`: borrowed from a buffer, or read from the file into `buffer`
    /// (resized to fit).
    ///
    /// # Errors
    /// [`ReadError::PastEnd`] for a range past the end (of the file as it was opened),
    /// [`ReadError::Short`] for a file that is now shorter than `range.end` (also recorded for
    /// [`Source::changed`]), [`ReadError::Io`] for a read the operating system refused.
    pub fn read<'a>(
        &'a self,
        range: Range<usize>,
        buffer: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], ReadError> {
        self.check(&range)?;
        match self {
            Source::Owned(v) => Ok(&v[range]),
            Source::File(f) => {
                buffer.clear();
                buffer.resize(range.len(), 0);
                f.fill(range.start, buffer)?;
                Ok(buffer)
            }
        }
    }

    /// The bytes of `range`, borrowed from a buffer or read from the file into a buffer of
    /// their own aligned to 8 bytes (as candle's block types need).
    ///
    /// # Errors
    /// As [`Source::read`].
    pub fn read_aligned(&self, range: Range<usize>) -> Result<Bytes<'_>, ReadError> {
        self.check(&range)?;
        match self {
            Source::Owned(v) => Ok(Bytes(Inner::Borrowed(&v[range]))),
            Source::File(f) => {
                let mut buffer = AlignedBytes::zeroed(range.len());
                f.fill(range.start, buffer.as_mut_slice())?;
                Ok(Bytes(Inner::Read(buffer)))
            }
        }
    }

    /// How the file changed since it was opened, if it did: a read that came back short, or a
    /// size or modification time that differs now. `None` for a buffer, and for a file whose
    /// size and time cannot be asked again (nothing suggests a change then).
    pub fn changed(&self) -> Option<String> {
        let Source::File(f) = self else {
            return None;
        };
        if let Some(what) = f.short_read.get() {
            return Some(what.clone());
        }
        let meta = f.file.metadata().ok()?;
        if meta.len() != f.len as u64 {
            return Some(format!(
                "its size went from {} to {} bytes",
                f.len,
                meta.len()
            ));
        }
        (meta.modified().ok() != f.modified)
            .then(|| "it was modified (its modification time changed)".to_string())
    }

    /// A reader over the whole source, for parsers that want [`io::Read`] and [`io::Seek`]
    /// (the zip directory of a `torch.save` archive).
    pub fn reader(&self) -> SourceReader<'_> {
        SourceReader::new(self)
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(mut file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Bytes of a source: borrowed from a buffer, or read from the file into a buffer aligned to 8
/// bytes.
#[derive(Debug)]
pub struct Bytes<'a>(Inner<'a>);

#[derive(Debug)]
enum Inner<'a> {
    Borrowed(&'a [u8]),
    Read(AlignedBytes),
}

impl Deref for Bytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Borrowed(b) => b,
            Inner::Read(a) => a.as_slice(),
        }
    }
}

/// [`Read`] and [`Seek`] over a [`Source`], through its bounded reads: the file's size at
/// opening is its end, and a short read is recorded as a change.
#[derive(Debug)]
pub struct SourceReader<'a> {
    source: &'a Source,
    at: u64,
}

impl<'a> SourceReader<'a> {
    /// A reader at the start of `source`.
    fn new(source: &'a Source) -> SourceReader<'a> {
        SourceReader { source, at: 0 }
    }
}

impl Read for SourceReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let len = self.source.len();
        let start = usize::try_from(self.at).map_or(len, |at| at.min(len));
        let n = out.len().min(len - start);
        match self.source {
            Source::Owned(v) => out[..n].copy_from_slice(&v[start..start + n]),
            Source::File(f) => f.fill(start, &mut out[..n]).map_err(io::Error::other)?,
        }
        self.at = (start + n) as u64;
        Ok(n)
    }
}

impl Seek for SourceReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(at) => (0, i128::from(at)),
            SeekFrom::End(delta) => (self.source.len() as u64, i128::from(delta)),
            SeekFrom::Current(delta) => (self.at, i128::from(delta)),
        };
        let at = u64::try_from(i128::from(base) + delta)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.at = at;
        Ok(at)
    }
}

#[cfg(test)]
mod tests;
