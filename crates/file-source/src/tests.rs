//! Reads of buffers and files, a file that shrinks or changes while it is read, and what
//! [`Source::open`] refuses.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use test_support::Scratch;

use super::*;

/// `dir/data.bin` holding `bytes`.
fn file_of(dir: &Scratch, bytes: &[u8]) -> PathBuf {
    let path = dir.join("data.bin");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn buffers_and_files_read_the_same_bytes_and_refuse_ranges_past_the_end() {
    let bytes: Vec<u8> = (0..=255).collect();
    let dir = Scratch::new("file-source", "same");
    let path = file_of(&dir, &bytes);
    let sources = [
        Source::Owned(bytes.clone()),
        Source::open(&path, "a test file").unwrap(),
    ];
    for source in &sources {
        assert_eq!(source.len(), 256);
        let mut buffer = Vec::new();
        assert_eq!(source.read(3..9, &mut buffer).unwrap(), &bytes[3..9]);
        let aligned = source.read_aligned(17..200).unwrap();
        assert_eq!(&*aligned, &bytes[17..200]);
        let err = source.read(250..257, &mut buffer).unwrap_err();
        assert_eq!(
            err,
            ReadError::PastEnd {
                range: 250..257,
                len: 256
            }
        );
        assert!(source.read_aligned(300..301).is_err());
        assert_eq!(source.changed(), None);
        let mut reader = source.reader();
        reader.seek(SeekFrom::End(-4)).unwrap();
        let mut tail = Vec::new();
        reader.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, &bytes[252..]);
    }
    // Read from the file, the aligned bytes lie on an 8-byte boundary.
    let aligned = sources[1].read_aligned(1..20).unwrap();
    assert_eq!(aligned.as_ptr() as usize % 8, 0);
}

#[test]
fn a_file_that_shrinks_gives_a_short_read_and_is_reported_changed() {
    let dir = Scratch::new("file-source", "shrinks");
    let path = file_of(&dir, &[7u8; 1000]);
    let source = Source::open(&path, "a test file").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100)
        .unwrap();
    let mut buffer = Vec::new();
    assert_eq!(source.read(0..50, &mut buffer).unwrap(), &[7u8; 50][..]);
    let err = source.read(50..500, &mut buffer).unwrap_err();
    assert_eq!(
        err,
        ReadError::Short {
            range: 50..500,
            len: 1000
        }
    );
    assert_eq!(source.changed(), Some(err.to_string()));
}

#[test]
fn a_file_that_grows_is_reported_changed() {
    let dir = Scratch::new("file-source", "grows");
    let path = file_of(&dir, &[1u8; 10]);
    let source = Source::open(&path, "a test file").unwrap();
    std::fs::write(&path, [2u8; 20]).unwrap();
    let what = source.changed().unwrap();
    assert!(what.contains("from 10 to 20 bytes"), "{what}");
}

#[test]
fn directories_are_refused_by_name() {
    let dir = Scratch::new("file-source", "dir");
    let err = Source::open(&dir, "a GGUF file").unwrap_err();
    assert!(
        err.to_string().contains("not a regular file") && err.to_string().contains("a GGUF file"),
        "{err}"
    );
}
