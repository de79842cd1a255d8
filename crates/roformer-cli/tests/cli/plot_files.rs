//! Checks that plot files written by a command are real images.

use std::path::PathBuf;

/// A fresh path for an output file of test `test` in Cargo's per-target temporary directory
/// (any earlier file of that name is removed).
pub fn out_path(test: &str, file: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(test);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    let _ = std::fs::remove_file(&path);
    path
}

/// Asserts `path` is a PNG (signature, IHDR chunk first, IEND chunk last) of the given pixel
/// size holding more than `min_bytes` bytes (a blank canvas compresses to far less than a
/// plotted one).
pub fn assert_png(path: &PathBuf, width: u32, height: u32, min_bytes: usize) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.len() > min_bytes,
        "{}: only {} bytes",
        path.display(),
        bytes.len()
    );
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "IHDR first");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((be(16), be(20)), (width, height), "pixel size");
    assert_eq!(
        &bytes[bytes.len() - 8..bytes.len() - 4],
        b"IEND",
        "IEND last"
    );
}

/// Asserts `path` is an SVG document that contains each of `texts`, and returns it.
pub fn assert_svg(path: &PathBuf, texts: &[&str]) -> String {
    let svg = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(svg.trim_start().starts_with("<svg"), "not an SVG document");
    assert!(svg.trim_end().ends_with("</svg>"), "SVG not closed");
    for text in texts {
        assert!(svg.contains(text), "SVG lacks {text:?}");
    }
    svg
}
