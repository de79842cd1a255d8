//! Batches of Fashion-MNIST examples as a model takes them: `[b, c, s, s]` f32 pixels,
//! normalised, and the labels, a pure function of `(seed, step, indices)` so that a resumed
//! training sees the same batches.
//!
//! Randomness is keyed by purpose (the crate's ChaCha8 streams): the batch's side by
//! `(seed, ImageSize, step)`, each image's augmentation by `(seed, ImageAugment, step,
//! position in the batch)`, an epoch's order by `(seed, ImageOrder, epoch)`. Images are
//! augmented in parallel; the result does not depend on the thread count.

use rayon::prelude::*;

use super::augment::Augmentation;
use super::error::{ConfigError, DatasetError, ImageError};
use super::fashion_mnist::{Split, MEAN, PIXELS, SIDE, STD};
use super::planes::{Channels, Planes};
use crate::data::rng::{shuffle, stream, Purpose};

/// A batch: `pixels` laid out `[batch, channels, side, side]`, `labels[i]` the class of
/// image `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageBatch {
    /// Normalised pixels, `[batch, channels, side, side]` row-major.
    pub pixels: Vec<f32>,
    /// Classes, one per image (u32, as a cross-entropy takes them).
    pub labels: Vec<u32>,
    /// Images in the batch.
    pub batch: usize,
    /// Channels per image (1 grey, 3 for a model that wants RGB: the grey plane repeated).
    pub channels: usize,
    /// The side of every image.
    pub side: usize,
}

/// Builds training batches (augmented) and evaluation batches (resized only) from a
/// [`Split`], normalising by `(x / 255 - mean) / std`.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchBuilder {
    augmentation: Augmentation,
    channels: Channels,
    mean: f32,
    std: f32,
    seed: u64,
}

impl BatchBuilder {
    /// A builder with the training statistics of Fashion-MNIST ([`MEAN`], [`STD`]).
    ///
    /// # Errors
    /// Those of [`Augmentation::validate`].
    pub fn new(
        augmentation: Augmentation,
        channels: Channels,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        Self::with_stats(augmentation, channels, seed, MEAN, STD)
    }

    /// A builder normalising by other statistics (of pixels scaled to `[0, 1]`).
    ///
    /// # Errors
    /// Those of [`Augmentation::validate`]; [`ConfigError::Invalid`] for a non-finite mean or
    /// a std that is not finite and positive.
    pub fn with_stats(
        augmentation: Augmentation,
        channels: Channels,
        seed: u64,
        mean: f32,
        std: f32,
    ) -> Result<Self, ConfigError> {
        augmentation.validate()?;
        if !(mean.is_finite() && std.is_finite() && std > 0.0) {
            return Err(ConfigError::Invalid {
                field: "mean/std",
                reason: format!("mean {mean}, std {std}"),
            });
        }
        Ok(Self {
            augmentation,
            channels,
            mean,
            std,
            seed,
        })
    }

    /// The augmentation in use.
    pub fn augmentation(&self) -> &Augmentation {
        &self.augmentation
    }

    /// The training batch of `step` over the examples `indices` of `split`: one side drawn
    /// for the batch, each image augmented by its own stream.
    ///
    /// # Errors
    /// [`DatasetError::OutOfRange`] for an index past the end of `split`.
    pub fn train_batch(
        &self,
        split: &Split,
        indices: &[usize],
        step: u64,
    ) -> Result<ImageBatch, DatasetError> {
        let side = self
            .augmentation
            .draw_side(&mut stream(self.seed, Purpose::ImageSize, step, 0));
        self.build(split, indices, side, |image, position| {
            let mut rng = stream(self.seed, Purpose::ImageAugment, step, position as u64);
            let (mean, std) = ([self.mean], [self.std]);
            self.augmentation.apply(image, side, &mean, &std, &mut rng)
        })
    }

    /// The evaluation batch of `indices` at `side`: each whole image resized to `side x side`
    /// (plain bilinear) and normalised; no randomness.
    ///
    /// # Errors
    /// [`DatasetError::OutOfRange`] for an index past the end of `split`;
    /// [`DatasetError::Image`] for a side of 0.
    pub fn eval_batch(
        &self,
        split: &Split,
        indices: &[usize],
        side: usize,
    ) -> Result<ImageBatch, DatasetError> {
        let plain = Augmentation::none(side);
        self.build(split, indices, side, |image, _| {
            let mut unused = stream(self.seed, Purpose::ImageAugment, u64::MAX, 0);
            plain.apply(image, side, &[self.mean], &[self.std], &mut unused)
        })
    }

    /// The batch of `indices`, each image made by `make(image in [0, 1], position)`.
    fn build(
        &self,
        split: &Split,
        indices: &[usize],
        side: usize,
        make: impl Fn(&Planes<f32>, usize) -> Result<Planes<f32>, ImageError> + Sync,
    ) -> Result<ImageBatch, DatasetError> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= split.len()) {
            return Err(DatasetError::OutOfRange {
                what: "example index",
                requested: bad,
                available: split.len(),
            });
        }
        let c = self.channels.count();
        if side == 0 {
            return Err(ImageError::Empty {
                channels: c,
                height: 0,
                width: 0,
            }
            .into());
        }
        let per_image = c * side * side;
        let mut pixels = vec![0.0f32; indices.len() * per_image];
        pixels
            .par_chunks_mut(per_image)
            .zip(indices.par_iter())
            .enumerate()
            .try_for_each(|(position, (out, &index))| -> Result<(), ImageError> {
                let source = &split.images()[index * PIXELS..(index + 1) * PIXELS];
                let image = Planes::new(
                    1,
                    SIDE,
                    SIDE,
                    source.iter().map(|&p| f32::from(p) / 255.0).collect(),
                )?;
                let made = make(&image, position)?;
                for plane in out.chunks_exact_mut(side * side) {
                    plane.copy_from_slice(made.data());
                }
                Ok(())
            })?;
        let labels = indices
            .iter()
            .map(|&i| u32::from(split.labels()[i]))
            .collect();
        Ok(ImageBatch {
            pixels,
            labels,
            batch: indices.len(),
            channels: c,
            side,
        })
    }
}

/// The order of the examples `0..n` in epoch `epoch`: a Fisher-Yates shuffle keyed by
/// `(seed, epoch)`, the same on every machine. Cut it into consecutive `indices` for
/// [`BatchBuilder::train_batch`].
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut order, &mut stream(seed, Purpose::ImageOrder, epoch, 0));
    order
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
