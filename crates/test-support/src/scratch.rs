//! A test's own directory under the system's temporary directory, removed when the test ends.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// `temp_dir()/{prefix}-{process id}-{name}`, made empty at the start and removed when dropped,
/// except while the thread panics: a failed test leaves its files for a look, and says where.
///
/// It dereferences to its [`Path`], so `dir.join("model")` and `&dir` as a `&Path` read as
/// they would with a `PathBuf`.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh, empty directory for the test `name` of a file whose directories start with
    /// `prefix`. The process id keeps concurrent runs of the same tests apart.
    ///
    /// # Panics
    /// When the directory cannot be made (a test failure).
    pub fn new(prefix: &str, name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
        // Left by an earlier process with the same id, or by a failed test.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        Scratch(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `relative` inside the directory, making its parent directories,
    /// and returns the file's path.
    ///
    /// # Panics
    /// When the file cannot be written (a test failure).
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for a look: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn a_scratch_directory_starts_empty_and_is_gone_after_its_test() {
        let kept;
        {
            let dir = Scratch::new("test-support-scratch", "gone");
            let written = dir.write("a/b.txt", "x");
            assert_eq!(written, dir.join("a/b.txt"));
            assert_eq!(std::fs::read_to_string(written).unwrap(), "x");
            std::fs::write(dir.join("a.txt"), "x").unwrap();
            kept = dir.to_path_buf();
            assert!(kept.join("a.txt").is_file());
            let again = Scratch::new("test-support-scratch", "gone");
            assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
            std::mem::forget(again);
        }
        assert!(!kept.exists());
    }

    #[test]
    fn a_panicking_test_keeps_its_directory() {
        let dir = std::thread::spawn(|| {
            let dir = Scratch::new("test-support-scratch", "kept");
            let path = dir.to_path_buf();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _dir = dir;
                panic!("a failing test");
            }))
            .unwrap_err();
            path
        })
        .join()
        .unwrap();
        assert!(dir.is_dir());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
