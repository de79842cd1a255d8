//! The loader on the committed subset and on broken directories; the validation cut; the
//! statistics on the full release (ignored: needs `scripts/fetch_fashion_mnist.sh`).

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::*;
use crate::images::idx::IdxArray;
use crate::images::IdxError;
use test_support::Scratch;

/// The committed subset: 25 training and 10 test images per class.
pub(crate) fn subset_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images/fashion-mnist")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-fmnist", name)
}

/// Writes `array` gzipped to `dir/name`.
fn write(dir: &Path, name: &str, array: &IdxArray) {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(&array.to_bytes()).unwrap();
    std::fs::write(dir.join(name), encoder.finish().unwrap()).unwrap();
}

/// A test part of `n` blank images labelled by `labels`.
fn write_test_part(dir: &Path, n: usize, labels: Vec<u8>) {
    write(
        dir,
        TEST_IMAGES,
        &IdxArray::new(vec![n, 28, 28], vec![0; n * PIXELS]).unwrap(),
    );
    write(
        dir,
        TEST_LABELS,
        &IdxArray::new(vec![labels.len()], labels).unwrap(),
    );
}

#[test]
fn the_subset_loads_with_balanced_classes() {
    let data = FashionMnist::load(&subset_dir()).unwrap();
    assert_eq!(data.train.len(), 250);
    assert_eq!(data.test.len(), 100);
    assert_eq!(data.train.class_counts(), [25; 10]);
    assert_eq!(data.test.class_counts(), [10; 10]);
    assert_eq!(data.train.images().len(), 250 * PIXELS);
    // Real images: mostly background with some ink.
    let (mean, std) = data.train.pixel_stats();
    assert!(
        (0.2..0.4).contains(&mean) && (0.25..0.45).contains(&std),
        "{mean} {std}"
    );
    let planes = data.test.planes(99).unwrap();
    assert_eq!(
        (planes.channels(), planes.height(), planes.width()),
        (1, 28, 28)
    );
    assert!(data.test.planes(100).is_none());
}

#[test]
fn counts_must_agree() {
    let dir = scratch("counts");
    write_test_part(&dir, 3, vec![0, 1]);
    assert!(matches!(
        load_split(&dir, Part::Test),
        Err(DatasetError::CountMismatch {
            images: 3,
            labels: 2
        })
    ));
}

#[test]
fn labels_must_be_classes() {
    let dir = scratch("labels");
    write_test_part(&dir, 3, vec![0, 9, 10]);
    assert!(matches!(
        load_split(&dir, Part::Test),
        Err(DatasetError::BadLabel {
            index: 2,
            label: 10,
            ..
        })
    ));
}

#[test]
fn shapes_and_files_are_checked() {
    let dir = scratch("shapes");
    write(
        &dir,
        TEST_IMAGES,
        &IdxArray::new(vec![2, 27, 28], vec![0; 2 * 27 * 28]).unwrap(),
    );
    write(
        &dir,
        TEST_LABELS,
        &IdxArray::new(vec![2], vec![0, 0]).unwrap(),
    );
    assert!(matches!(
        load_split(&dir, Part::Test),
        Err(DatasetError::Dims { found, .. }) if found == [2, 27, 28]
    ));
    assert!(matches!(
        load_split(&dir, Part::Train),
        Err(DatasetError::Idx {
            source: IdxError::Io { .. },
            ..
        })
    ));
    // A lying header inside the directory is reported with the file's path.
    std::fs::write(
        dir.join(TEST_IMAGES),
        [0u8, 0, 8, 3, 0, 0, 0, 9, 0, 0, 0, 28, 0, 0, 0, 28],
    )
    .unwrap();
    let err = load_split(&dir, Part::Test).unwrap_err();
    assert!(matches!(
        &err,
        DatasetError::Idx {
            source: IdxError::Truncated { .. },
            ..
        }
    ));
    assert!(err.to_string().contains(TEST_IMAGES));
}

#[test]
fn splits_check_their_parts() {
    assert!(Split::new(vec![0; 2 * PIXELS], vec![1, 2]).is_ok());
    assert!(matches!(
        Split::new(vec![0; 2 * PIXELS + 1], vec![1, 2]),
        Err(DatasetError::CountMismatch { .. })
    ));
    assert!(matches!(
        Split::new(vec![0; PIXELS], vec![11]),
        Err(DatasetError::BadLabel { label: 11, .. })
    ));
    let split = Split::new(
        (0..3 * PIXELS).map(|i| (i / PIXELS) as u8).collect(),
        vec![4, 5, 6],
    )
    .unwrap();
    let picked = split.select(&[2, 0, 2]).unwrap();
    assert_eq!(picked.labels(), &[6, 4, 6]);
    assert_eq!(picked.image(1).unwrap()[0], 0);
    assert!(matches!(
        split.select(&[3]),
        Err(DatasetError::OutOfRange { requested: 3, .. })
    ));
    assert_eq!(
        Split::new(vec![], vec![]).unwrap().pixel_stats(),
        (0.0, 0.0)
    );
}

#[test]
fn the_validation_cut_is_a_fixed_partition() {
    let (train, valid) = validation_indices(1000, 100, 7).unwrap();
    assert_eq!((train.len(), valid.len()), (900, 100));
    let mut all: Vec<usize> = train.iter().chain(&valid).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..1000).collect::<Vec<_>>());
    assert!(valid.windows(2).all(|w| w[0] < w[1]));
    // The same on every call; another seed gives another cut; not simply the last 100.
    assert_eq!(validation_indices(1000, 100, 7).unwrap().1, valid);
    assert_ne!(validation_indices(1000, 100, 8).unwrap().1, valid);
    assert_ne!(valid, (900..1000).collect::<Vec<_>>());
    assert!(validation_indices(10, 11, 0).is_err());
    assert_eq!(
        validation_indices(10, 10, 0).unwrap().0,
        Vec::<usize>::new()
    );

    let data = load_split(&subset_dir(), Part::Train).unwrap();
    let (kept, held) = split_validation(&data, 50, VALIDATION_SEED).unwrap();
    assert_eq!((kept.len(), held.len()), (200, 50));
}

/// The release: sizes, balanced classes, and the statistics [`MEAN`] and [`STD`] state.
#[test]
#[ignore = "needs scripts/fetch_fashion_mnist.sh"]
fn the_release_matches_the_stated_numbers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/fashion-mnist");
    let data = FashionMnist::load(&dir).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (60_000, 10_000));
    assert_eq!(data.train.class_counts(), [6_000; 10]);
    assert_eq!(data.test.class_counts(), [1_000; 10]);
    let (all_mean, all_std) = data.train.pixel_stats();
    let (train, valid) = split_validation(&data.train, VALIDATION_COUNT, VALIDATION_SEED).unwrap();
    let (mean, std) = train.pixel_stats();
    eprintln!(
        "all 60000: mean {all_mean:.6} std {all_std:.6}; the 55000 kept: mean {mean:.9} std {std:.9}; \
         validation classes {:?}",
        valid.class_counts()
    );
    assert!((mean - f64::from(MEAN)).abs() < 1e-6, "{mean}");
    assert!((std - f64::from(STD)).abs() < 1e-6, "{std}");
}
