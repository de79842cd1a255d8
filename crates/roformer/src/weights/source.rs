//! Where a checkpoint's bytes come from: the file, read with positional reads into memory this
//! process owns, or a buffer held in memory.
//!
//! Why not a memory map: when another process truncates a mapped file, the next read of a page
//! past the new end raises SIGBUS, which kills the process with no message. Here every read is
//! a `pread` of a range that the file's size at opening allows; a short read (the file shrank
//! meanwhile) is recorded, and the load fails with "FILE changed while it was being read"
//! ([`crate::ModelError::FileChanged`]). A file rewritten in place without shrinking gives new
//! bytes, never a fault, and is caught by its size or modification time when the load ends
//! ([`Source::changed`]).
//!
//! Memory: a contiguous tensor is read [`CHUNK_BYTES`] at a time into one reused buffer and
//! decoded from there into the model's copy, so the peak is the model plus 1 MiB; a strided
//! tensor (from `torch.save`) reads the span of storage it covers, then gathers. The whole
//! file is never held in memory, and no page of it stays resident in this process.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::OnceLock;
use std::time::SystemTime;

/// Bytes of a contiguous run read and decoded at a time: small next to a tensor, large
/// enough that the system calls cost little.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The bytes of a checkpoint.
pub(crate) enum Source {
    /// An open regular file.
    File(FileSource),
    /// A buffer (e.g. a model built into the binary).
    Owned(Vec<u8>),
}

/// An open regular file, what it looked like when it was opened, and the first sign that it
/// changed since.
pub(crate) struct FileSource {
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
    /// A message for a file now shorter than that (also recorded in `short_read`), or for a
    /// read the operating system refused.
    fn fill(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        let range = start..start + out.len();
        match read_exact_at(&self.file, out, start as u64) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                let what = format!(
                    "bytes {range:?} of a file of {} bytes when opened came back short",
                    self.len
                );
                Err(self.short_read.get_or_init(|| what).clone())
            }
            Err(e) => Err(format!("cannot read bytes {range:?}: {e}")),
        }
    }
}

impl Source {
    /// Reads from `file`, a regular file, from now on.
    ///
    /// # Errors
    /// The operating system's, or [`io::ErrorKind::InvalidInput`] for a file larger than the
    /// address space.
    pub(crate) fn file(file: File) -> io::Result<Source> {
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
    pub(crate) fn len(&self) -> usize {
        match self {
            Source::File(f) => f.len,
            Source::Owned(v) => v.len(),
        }
    }

    /// The bytes of `range`: borrowed from a buffer, or read from the file into `buffer`
    /// (resized to fit).
    ///
    /// # Errors
    /// A message for a range past the end of the file (as it was opened), a file that is now
    /// shorter than `range.end` (also recorded for [`Source::changed`]), or a read the
    /// operating system refused.
    pub(crate) fn read<'a>(
        &'a self,
        range: Range<usize>,
        buffer: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], String> {
        if range.start > range.end || range.end > self.len() {
            return Err(format!(
                "bytes {range:?} lie past the end of the file ({} bytes)",
                self.len()
            ));
        }
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

    /// How the file changed since it was opened, if it did: a read that came back short, or a
    /// size or modification time that differs now. `None` for a buffer, and for a file whose
    /// size and time cannot be asked again (nothing suggests a change then).
    pub(crate) fn changed(&self) -> Option<String> {
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

    /// A reader over the whole source, for parsers that want [`Read`] and [`Seek`] (the zip
    /// directory of a `torch.save` archive).
    pub(crate) fn reader(&self) -> SourceReader<'_> {
        SourceReader {
            source: self,
            at: 0,
        }
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

/// [`Read`] and [`Seek`] over a [`Source`], through [`Source::read`]: the file's size at
/// opening is its end, and a short read is recorded as a change.
pub(crate) struct SourceReader<'a> {
    source: &'a Source,
    at: u64,
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
