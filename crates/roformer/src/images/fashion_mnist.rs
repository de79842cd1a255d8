//! Fashion-MNIST (Zalando, MIT licence): 28 x 28 grey images of clothing in 10 classes,
//! 60,000 for training and 10,000 for testing, as four gzipped IDX files.
//!
//! The directory layout is the one of the Debian package `dataset-fashion-mnist`
//! (`/usr/share/datasets/fashion-mnist/`, installed into `data/fashion-mnist/` by
//! `scripts/fetch_fashion_mnist.sh`) and of the original release: [`TRAIN_IMAGES`],
//! [`TRAIN_LABELS`], [`TEST_IMAGES`], [`TEST_LABELS`]. A committed subset with the same names
//! (250 training and 100 test images, cut by `scripts/cut_fashion_mnist_subset.py`) is in
//! `crates/roformer/tests/fixtures/images/fashion-mnist`.
//!
//! Hyper-parameters are chosen on a validation set cut from the training images
//! ([`split_validation`]: the last [`VALIDATION_COUNT`] of a seeded shuffle), never on test.

use std::path::Path;

use super::error::DatasetError;
use super::idx::read_idx_file;
use super::planes::Planes;
use crate::data::rng::{shuffle, stream, Purpose};

/// The side of an image, in pixels.
pub const SIDE: usize = 28;

/// Pixels per image: `28 * 28`.
pub const PIXELS: usize = SIDE * SIDE;

/// The class names, indexed by label (the dataset's README order).
pub const CLASS_NAMES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// The training images file: IDX `[60000, 28, 28]` unsigned bytes, gzipped.
pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte.gz";
/// The training labels file: IDX `[60000]` unsigned bytes, gzipped.
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte.gz";
/// The test images file: IDX `[10000, 28, 28]` unsigned bytes, gzipped.
pub const TEST_IMAGES: &str = "t10k-images-idx3-ubyte.gz";
/// The test labels file: IDX `[10000]` unsigned bytes, gzipped.
pub const TEST_LABELS: &str = "t10k-labels-idx1-ubyte.gz";

/// Where Debian's `dataset-fashion-mnist` installs the files.
pub const SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// The cap on one decompressed file: the training images take 47,040,016 bytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The size of the validation set cut from the 60,000 training images.
pub const VALIDATION_COUNT: usize = 5_000;

/// The seed of the validation cut (any fixed number; changing it changes the split).
pub const VALIDATION_SEED: u64 = 20_250_101;

/// The mean of the training pixels scaled to `[0, 1]`, over the 55,000 images left for
/// training by [`split_validation`] with [`VALIDATION_COUNT`] and [`VALIDATION_SEED`]
/// (measured by [`Split::pixel_stats`]: 0.285882; over all 60,000 training images it is
/// 0.286041).
pub const MEAN: f32 = 0.285_881_7;

/// The standard deviation (population, over every pixel of every image) of the same 55,000
/// training images scaled to `[0, 1]`: 0.352991 (over all 60,000: 0.353024).
pub const STD: f32 = 0.352_991_2;

/// Which half of the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// 60,000 images for training (and validation).
    Train,
    /// 10,000 images for the final test.
    Test,
}

impl Part {
    /// The image and label file names of this part.
    pub fn files(self) -> (&'static str, &'static str) {
        match self {
            Self::Train => (TRAIN_IMAGES, TRAIN_LABELS),
            Self::Test => (TEST_IMAGES, TEST_LABELS),
        }
    }
}

/// A set of labelled 28 x 28 grey images: `images[(i * 28 + y) * 28 + x]` is the pixel of
/// example `i` at row `y`, column `x` (0 background, 255 ink), `labels[i] < 10`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    images: Vec<u8>,
    labels: Vec<u8>,
}

impl Split {
    /// Wraps `labels.len()` images laid out `[n, 28, 28]`.
    ///
    /// # Errors
    /// [`DatasetError::CountMismatch`] when `images.len() != 784 * labels.len()`;
    /// [`DatasetError::BadLabel`] (with an empty path) for a label of 10 or more.
    pub fn new(images: Vec<u8>, labels: Vec<u8>) -> Result<Self, DatasetError> {
        if labels.len().checked_mul(PIXELS) != Some(images.len()) {
            return Err(DatasetError::CountMismatch {
                images: images.len() / PIXELS,
                labels: labels.len(),
            });
        }
        check_labels(&labels, Path::new(""))?;
        Ok(Self { images, labels })
    }

    /// The number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split has no example.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// All images, `[n, 28, 28]` row-major.
    pub fn images(&self) -> &[u8] {
        &self.images
    }

    /// All labels, one per image.
    pub fn labels(&self) -> &[u8] {
        &self.labels
    }

    /// The 784 pixels of example `index`, row-major, or `None` past the end.
    pub fn image(&self, index: usize) -> Option<&[u8]> {
        self.images.get(index * PIXELS..(index + 1) * PIXELS)
    }

    /// Example `index` as one `28 x 28` plane, or `None` past the end.
    pub fn planes(&self, index: usize) -> Option<Planes<u8>> {
        let pixels = self.image(index)?.to_vec();
        Planes::new(1, SIDE, SIDE, pixels).ok()
    }

    /// The examples at `indices`, in that order (repeats allowed).
    ///
    /// # Errors
    /// [`DatasetError::OutOfRange`] for an index past the end.
    pub fn select(&self, indices: &[usize]) -> Result<Self, DatasetError> {
        let mut images = Vec::with_capacity(indices.len() * PIXELS);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let image = self.image(i).ok_or(DatasetError::OutOfRange {
                what: "example index",
                requested: i,
                available: self.len(),
            })?;
            images.extend_from_slice(image);
            labels.push(self.labels[i]);
        }
        Ok(Self { images, labels })
    }

    /// How many examples each class has.
    pub fn class_counts(&self) -> [usize; 10] {
        let mut counts = [0; 10];
        for &label in &self.labels {
            counts[usize::from(label)] += 1;
        }
        counts
    }

    /// The mean and population standard deviation of every pixel of every image, scaled to
    /// `[0, 1]`: `mean = sum(p) / (255 N)`, `std = sqrt(sum(p^2) / N - (sum(p) / N)^2) / 255`
    /// over the `N = 784 n` pixels `p` (sums exact in integers). `(0, 0)` for an empty split.
    pub fn pixel_stats(&self) -> (f64, f64) {
        if self.images.is_empty() {
            return (0.0, 0.0);
        }
        let (sum, squares) = self.images.iter().fold((0u64, 0u64), |(s, q), &p| {
            let p = u64::from(p);
            (s + p, q + p * p)
        });
        let n = self.images.len() as f64;
        let mean = sum as f64 / n;
        let var = (squares as f64 / n - mean * mean).max(0.0);
        (mean / 255.0, var.sqrt() / 255.0)
    }
}

/// Both parts of the release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FashionMnist {
    /// The training images (60,000 in the release).
    pub train: Split,
    /// The test images (10,000 in the release).
    pub test: Split,
}

impl FashionMnist {
    /// Loads both parts from `dir` (see [`load_split`]).
    ///
    /// # Errors
    /// Those of [`load_split`].
    pub fn load(dir: &Path) -> Result<Self, DatasetError> {
        Ok(Self {
            train: load_split(dir, Part::Train)?,
            test: load_split(dir, Part::Test)?,
        })
    }
}

/// Loads one part from `dir`: its image file must be IDX `[n, 28, 28]`, its label file IDX
/// `[n]` with the same `n` (any `n`, so subsets load too), every label below 10, each file at
/// most [`MAX_FILE_BYTES`] once decompressed.
///
/// # Errors
/// [`DatasetError::Idx`] for a missing or malformed file, [`DatasetError::Dims`] for a file of
/// the wrong shape, [`DatasetError::CountMismatch`] and [`DatasetError::BadLabel`].
pub fn load_split(dir: &Path, part: Part) -> Result<Split, DatasetError> {
    let (image_file, label_file) = part.files();
    let images = read(&dir.join(image_file), "[n, 28, 28]", |d| {
        matches!(d, [_, SIDE, SIDE])
    })?;
    let label_path = dir.join(label_file);
    let labels = read(&label_path, "[n]", |d| d.len() == 1)?;
    if images.len() / PIXELS != labels.len() {
        return Err(DatasetError::CountMismatch {
            images: images.len() / PIXELS,
            labels: labels.len(),
        });
    }
    check_labels(&labels, &label_path)?;
    Ok(Split { images, labels })
}

/// Reads the IDX file at `path` and checks its dimensions with `fits`.
fn read(
    path: &Path,
    expected: &'static str,
    fits: impl Fn(&[usize]) -> bool,
) -> Result<Vec<u8>, DatasetError> {
    let array = read_idx_file(path, MAX_FILE_BYTES).map_err(|source| DatasetError::Idx {
        path: path.to_owned(),
        source,
    })?;
    let (dims, data) = array.into_parts();
    if !fits(&dims) {
        return Err(DatasetError::Dims {
            path: path.to_owned(),
            found: dims,
            expected,
        });
    }
    Ok(data)
}

/// The first label of 10 or more, as an error naming `path`.
fn check_labels(labels: &[u8], path: &Path) -> Result<(), DatasetError> {
    match labels
        .iter()
        .position(|&l| usize::from(l) >= CLASS_NAMES.len())
    {
        Some(index) => Err(DatasetError::BadLabel {
            path: path.to_owned(),
            index,
            label: labels[index],
        }),
        None => Ok(()),
    }
}

/// The validation cut of `n` examples, as `(train, validation)` index lists, each ascending:
/// the permutation of `0..n` by a Fisher-Yates shuffle keyed `(seed, n)` (the crate's ChaCha8
/// streams, so the cut is the same on every machine and version), its last `count` entries
/// for validation, the rest for training.
///
/// # Errors
/// [`DatasetError::OutOfRange`] when `count > n`.
pub fn validation_indices(
    n: usize,
    count: usize,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>), DatasetError> {
    if count > n {
        return Err(DatasetError::OutOfRange {
            what: "validation examples",
            requested: count,
            available: n,
        });
    }
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(
        &mut order,
        &mut stream(seed, Purpose::ValidationCut, n as u64, 0),
    );
    let mut validation = order.split_off(n - count);
    order.sort_unstable();
    validation.sort_unstable();
    Ok((order, validation))
}

/// Cuts `count` validation examples from `train` ([`validation_indices`]); returns
/// `(train, validation)`. The release's cut is `split_validation(&train, VALIDATION_COUNT,
/// VALIDATION_SEED)`: 55,000 and 5,000 images.
///
/// # Errors
/// [`DatasetError::OutOfRange`] when `count > train.len()`.
pub fn split_validation(
    train: &Split,
    count: usize,
    seed: u64,
) -> Result<(Split, Split), DatasetError> {
    let (kept, validation) = validation_indices(train.len(), count, seed)?;
    Ok((train.select(&kept)?, train.select(&validation)?))
}

#[cfg(test)]
#[path = "fashion_mnist_tests.rs"]
mod tests;
