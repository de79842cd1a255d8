//! Helpers for the data module's tests: the committed poetry sample.

use std::path::{Path, PathBuf};

use super::corpus::{read_corpus, Document};

/// The committed chinese-poetry sample directory.
pub fn poetry_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/poetry")
}

/// The poems of the committed sample, in path order.
pub fn poetry_sample() -> Vec<Document> {
    read_corpus(&poetry_dir(), None).unwrap()
}
