//! The bytes of a checkpoint: a read-only map of the file, or a buffer held in memory.
//!
//! A mapped file is read straight from the page cache: loading copies each tensor once, into
//! the model, instead of reading the whole file into memory first and copying from there
//! (which held the file twice at the peak). As each part of a tensor is copied its pages are
//! handed back ([`Bytes::release`]), so the mapping does not keep the file resident either
//! and peak memory stays near one copy of the weights.

use std::fs::File;
use std::ops::{Deref, Range};

/// The most the kernel maps around one faulting address in a file mapping: a PMD-sized
/// folio (2 MiB), above its default fault-around window (64 KiB).
const FAULT_AROUND: usize = 2 << 20;

/// The bytes of a checkpoint.
pub(crate) enum Bytes {
    /// A read-only shared map of the file.
    Mapped(memmap2::Mmap),
    /// A buffer (e.g. a model built into the binary).
    Owned(Vec<u8>),
}

impl Bytes {
    /// Maps `file` read-only.
    ///
    /// # Errors
    /// The operating system's, e.g. for a file that is not a regular file.
    pub(crate) fn map(file: &File) -> std::io::Result<Bytes> {
        // SAFETY: the map is read-only and we never create a mutable view of it. Its contents
        // are only sound to read while no one truncates or rewrites the file: a checkpoint
        // changed under a running load can make reads see the new bytes or raise SIGBUS, as
        // with every mapped loader (candle's, safetensors'). Checkpoints are not written
        // while models load from them; in exchange the file is never copied into memory.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Bytes::Mapped(map))
    }

    /// Tells the operating system that `range` has been copied out and its pages need not
    /// stay resident in this process (they stay in the page cache). A no-op for buffers and
    /// where the call fails: it only lowers memory use.
    ///
    /// The [`FAULT_AROUND`] bytes before `range` are released too: reading the start of
    /// `range` lets the kernel map the pages around it again ("fault-around", large folios),
    /// and without this each 1 MiB step of a load left some 40 KiB resident (26 MB for a
    /// 497 MB checkpoint).
    pub(crate) fn release(&self, range: Range<usize>) {
        #[cfg(unix)]
        if let Bytes::Mapped(map) = self {
            let range = range.start.saturating_sub(FAULT_AROUND)..range.end;
            if range.start < range.end && range.end <= map.len() {
                // SAFETY: MADV_DONTNEED on a read-only shared file mapping drops this
                // process's page-table entries only; the next read of those addresses faults
                // the same bytes back in from the file (page cache), so every slice borrowed
                // from the map keeps its contents. The range lies within the map (checked
                // above; memmap2 widens it to whole pages, which holds the same guarantee).
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        range.start,
                        range.len(),
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Owned(buf) => buf,
        }
    }
}
