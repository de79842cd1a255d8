//! Helpers for the data module's tests: a scratch directory and the committed poetry sample.

use std::path::{Path, PathBuf};

use super::corpus::{read_corpus, Document};

/// A directory under the system temp dir, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh, empty directory named after `name` and this process.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("roformer-data-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Writes `contents` to `relative` (creating parent directories) and returns its path.
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The committed chinese-poetry sample directory.
pub fn poetry_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/poetry")
}

/// The poems of the committed sample, in path order.
pub fn poetry_sample() -> Vec<Document> {
    read_corpus(&poetry_dir(), None).unwrap()
}
