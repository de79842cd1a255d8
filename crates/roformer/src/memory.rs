//! The machine's memory: how much a command may still allocate, a check of a planned
//! allocation against it, and reading an input file whole within that bound.
//!
//! On Linux the bound is `MemAvailable` of `/proc/meminfo`: the kernel's estimate of the memory
//! that can be allocated without swapping (free memory plus reclaimable caches). Elsewhere, or
//! when that file cannot be read, it is [`FALLBACK_AVAILABLE`]. A request past the bound is
//! refused with a [`TooLarge`] that says how much is needed and how much there is, instead of
//! an allocation failure that aborts the process.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// The bound used where `/proc/meminfo` cannot be read (not Linux, or no `/proc`): 16 GiB.
pub const FALLBACK_AVAILABLE: u64 = 16 << 30;

/// Memory that may still be allocated, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from (`MemAvailable in /proc/meminfo`, or the fallback).
    pub source: &'static str,
}

/// The memory available now: `MemAvailable` of `/proc/meminfo`, else [`FALLBACK_AVAILABLE`].
pub fn available() -> Available {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_available(&text))
        .map(|bytes| Available {
            bytes,
            source: "MemAvailable in /proc/meminfo",
        })
        .unwrap_or(Available {
            bytes: FALLBACK_AVAILABLE,
            source: "the 16 GiB assumed where /proc/meminfo cannot be read",
        })
}

/// The `MemAvailable:` line of a `/proc/meminfo` text, in bytes (the file gives kB = KiB).
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// A planned allocation past the memory available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs about {} of memory, more than the {} available ({})",
    Bytes(*.needs),
    Bytes(.available.bytes),
    .available.source
)]
pub struct TooLarge {
    /// What needs the memory (names the sizes that ask for it).
    pub what: String,
    /// Bytes needed.
    pub needs: u64,
    /// The memory available.
    pub available: Available,
}

/// Refuses `needs` bytes for `what` when they exceed the memory [`available`] now.
///
/// # Errors
/// [`TooLarge`] naming `what`, the bytes needed and the bytes available.
pub fn check_fits(what: impl FnOnce() -> String, needs: u64) -> Result<(), TooLarge> {
    let available = available();
    if needs > available.bytes {
        return Err(TooLarge {
            what: what(),
            needs,
            available,
        });
    }
    Ok(())
}

/// A byte count for people: `512 B`, `3.4 MiB`, `1.2 GiB`, `5.0 TiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

/// Reads a whole input file with a bound: only a regular file (a FIFO, a terminal or a device
/// such as `/dev/zero` could be endless, so it is refused before anything is read), no larger
/// than the memory [`available`], and no more than the size it had when opened (a file that
/// grows meanwhile is read up to that size).
///
/// # Errors
/// An [`std::io::Error`]: the stat's or open's, [`std::io::ErrorKind::InvalidInput`] for a file that is
/// not regular (naming what it is), [`std::io::ErrorKind::OutOfMemory`] for one larger than
/// the memory available, and read errors. The caller names the path.
pub fn read_input_file(path: &Path) -> std::io::Result<Vec<u8>> {
    // Stat before opening: opening a FIFO blocks until a writer comes.
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "it is {}, not a regular file (an input is read whole, and {} can be endless): \
                 give a file",
                kind_of(&meta.file_type()),
                kind_of(&meta.file_type())
            ),
        ));
    }
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if let Err(e) = check_fits(|| format!("reading this {len}-byte file"), len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            e.to_string(),
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_input_file`] as UTF-8 text.
///
/// # Errors
/// [`read_input_file`]'s, and [`std::io::ErrorKind::InvalidData`] for text that is not UTF-8
/// (saying where the first invalid byte is).
pub fn read_input_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_input_file(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}

/// What a non-regular file is, for messages.
fn kind_of(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_kib() {
        let text =
            "MemTotal:       24684528 kB\nMemFree:        1 kB\nMemAvailable:   21546740 kB\n";
        assert_eq!(mem_available(text), Some(21_546_740 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
    }

    #[test]
    fn the_available_memory_is_positive() {
        let a = available();
        assert!(a.bytes > 0, "{a:?}");
    }

    #[test]
    fn a_request_past_the_memory_is_refused_with_both_figures() {
        let e = check_fits(|| "a test".into(), u64::MAX).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("a test needs about 16384.0 PiB"), "{text}");
        assert!(text.contains("available ("), "{text}");
        assert!(check_fits(|| unreachable!(), 1).is_ok());
    }

    #[test]
    fn bytes_read_for_people() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(3 << 20).to_string(), "3.0 MiB");
        assert_eq!(Bytes(1536 << 20).to_string(), "1.5 GiB");
    }

    #[cfg(unix)]
    #[test]
    fn devices_are_refused_before_anything_is_read() {
        let e = read_input_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a character device"), "{e}");
        let e = read_input_file(Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = test_support::Scratch::new("roformer-memory", "regular");
        let path = dir.write("input.txt", b"abc\n");
        assert_eq!(read_input_file(&path).unwrap(), b"abc\n");
        std::fs::write(&path, b"ab\xffc").unwrap();
        let e = read_input_text(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }
}
