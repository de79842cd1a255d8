//! Seeded training augmentation of one image: a random window (translation, or a
//! random-resized crop, over the image padded with background), a resize to the batch's
//! side, a horizontal flip, and random erasing after normalisation.
//!
//! Every draw comes from a ChaCha8 stream the caller passes in (the batch builder keys one by
//! `(seed, step, position in the batch)`), through `below` and `unit` of `data/rng.rs` (which
//! use nothing but the stream's `next_u64`), so an augmentation is the same on every machine
//! and thread count. The recipe for Fashion-MNIST is [`Augmentation::fashion_mnist`].

use rand_chacha::ChaCha8Rng;

use super::error::{ConfigError, ImageError};
use super::geometry::{flip_horizontal, window};
use super::planes::Planes;
use super::resize::{resize, Resample};
use crate::data::rng::{below, unit};

/// How the window of the source image is chosen before it is resized to the batch's side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crop {
    /// The whole image (evaluation).
    Whole,
    /// torchvision's `RandomCrop(size, padding=pad)`: the image padded by `pad` background
    /// pixels on every side, then a window of the image's size at offsets drawn uniformly
    /// from `0..=2 pad` on each axis: a translation by up to `pad` pixels.
    Translate {
        /// Background pixels added on each side.
        pad: usize,
    },
    /// torchvision's `RandomResizedCrop` box, drawn over the image padded by `pad`: area
    /// `A u` with `A` the padded area and `u` uniform in `scale`, aspect `w / h = exp(v)`
    /// with `v` uniform in `[ln ratio.0, ln ratio.1]`, `w = round(sqrt(area aspect))`,
    /// `h = round(sqrt(area / aspect))`, the corner uniform where the box fits; after 10
    /// misses, the centred box of the padded image clamped to the aspect range.
    ResizedCrop {
        /// Background pixels added on each side.
        pad: usize,
        /// The range of the box's share of the padded area, within `(0, 1]`.
        scale: (f64, f64),
        /// The range of the box's aspect (width over height), positive.
        ratio: (f64, f64),
    },
}

/// torchvision's `RandomErasing`, applied to the normalised image: with probability
/// `probability`, a rectangle of area `h w u` (`u` uniform in `area`) and aspect
/// `exp(v)` (`v` uniform in `[ln ratio.0, ln ratio.1]`), sides `round(sqrt(area aspect))`
/// high and `round(sqrt(area / aspect))` wide, is set to 0 (the dataset mean once
/// normalised); up to 10 draws of the rectangle, none erased if none fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Erasing {
    /// Chance that an image is erased at all.
    pub probability: f64,
    /// The range of the rectangle's share of the image's area, within `(0, 1)`.
    pub area: (f64, f64),
    /// The range of the rectangle's aspect (height over width), positive.
    pub ratio: (f64, f64),
}

/// The augmentation of a training batch. Sides are the batch's: one is drawn per batch, so
/// that the batch is one `[b, c, s, s]` tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Augmentation {
    /// The sides a batch may have, drawn uniformly; one value for a fixed size.
    pub sizes: Vec<usize>,
    /// The window cut from each image.
    pub crop: Crop,
    /// The chance of a horizontal flip (0 for none).
    pub flip: f64,
    /// Random erasing, if any.
    pub erasing: Option<Erasing>,
}

impl Augmentation {
    /// No augmentation: the whole image resized to `side` (evaluation at that size).
    pub fn none(side: usize) -> Self {
        Self {
            sizes: vec![side],
            crop: Crop::Whole,
            flip: 0.0,
            erasing: None,
        }
    }

    /// The recipe for Fashion-MNIST, one model serving sides 20 to 56:
    /// - sides 20, 24, ..., 56 (10 sizes, each batch one of them);
    /// - a random-resized crop over the image padded by 2 pixels, keeping 64 % to 100 % of the
    ///   padded area (box sides 80 % to 100 % of 32 pixels) with aspect 4:5 to 5:4: shifts of
    ///   up to about 4 pixels and scale changes of up to about 12 %, mild enough that no
    ///   garment loses its class-defining parts;
    /// - horizontal flips half the time (clothes are left-right symmetric in class);
    /// - random erasing of a quarter of the images, 2 % to 20 % of the area, aspect 0.3 to
    ///   3.3 (occlusion robustness, Zhong et al. 2020's best Fashion-MNIST setting is close).
    pub fn fashion_mnist() -> Self {
        Self {
            sizes: (20..=56).step_by(4).collect(),
            crop: Crop::ResizedCrop {
                pad: 2,
                scale: (0.64, 1.0),
                ratio: (0.8, 1.25),
            },
            flip: 0.5,
            erasing: Some(Erasing {
                probability: 0.25,
                area: (0.02, 0.2),
                ratio: (0.3, 3.3),
            }),
        }
    }

    /// Checks the settings: at least one side, no side of 0; probabilities in `[0, 1]`;
    /// ranges ordered, finite and positive, shares within `(0, 1]`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.into(),
            })
        };
        if self.sizes.is_empty() || self.sizes.contains(&0) {
            return invalid("sizes", "needs at least one side, none of 0");
        }
        if !(0.0..=1.0).contains(&self.flip) {
            return invalid("flip", "a probability is in [0, 1]");
        }
        let range_ok =
            |(lo, hi): (f64, f64), max: f64| lo.is_finite() && lo > 0.0 && lo <= hi && hi <= max;
        if let Crop::ResizedCrop { scale, ratio, .. } = self.crop {
            if !range_ok(scale, 1.0) {
                return invalid("crop.scale", "an ordered range within (0, 1]");
            }
            if !range_ok(ratio, f64::MAX) {
                return invalid("crop.ratio", "an ordered range of positive aspects");
            }
        }
        if let Some(e) = self.erasing {
            if !(0.0..=1.0).contains(&e.probability) {
                return invalid("erasing.probability", "a probability is in [0, 1]");
            }
            if !range_ok(e.area, 1.0) {
                return invalid("erasing.area", "an ordered range within (0, 1]");
            }
            if !range_ok(e.ratio, f64::MAX) {
                return invalid("erasing.ratio", "an ordered range of positive aspects");
            }
        }
        Ok(())
    }

    /// Draws the batch's side: `sizes[below(len)]`.
    pub(crate) fn draw_side(&self, rng: &mut ChaCha8Rng) -> usize {
        self.sizes[below(rng, self.sizes.len())]
    }

    /// One augmented image: the window, resized to `side x side` (plain bilinear), maybe
    /// flipped, normalised by `(x - mean) / std` per channel, maybe erased. `image` holds
    /// values in `[0, 1]`; the background fill of the padding is 0.
    ///
    /// # Errors
    /// [`ImageError::Empty`] for an empty image or a side of 0; [`ImageError::StatsLength`]
    /// when `mean` or `std` does not match the channels.
    pub fn apply(
        &self,
        image: &Planes<f32>,
        side: usize,
        mean: &[f32],
        std: &[f32],
        rng: &mut ChaCha8Rng,
    ) -> Result<Planes<f32>, ImageError> {
        let (h, w) = (image.height(), image.width());
        let (top, left, bh, bw) = match self.crop {
            Crop::Whole => (0, 0, h, w),
            Crop::Translate { pad } => {
                let dy = below(rng, 2 * pad + 1) as isize;
                let dx = below(rng, 2 * pad + 1) as isize;
                (dy - pad as isize, dx - pad as isize, h, w)
            }
            Crop::ResizedCrop { pad, scale, ratio } => {
                let (i, j, bh, bw) = resized_crop_box(h + 2 * pad, w + 2 * pad, scale, ratio, rng);
                (i as isize - pad as isize, j as isize - pad as isize, bh, bw)
            }
        };
        let cut = if (top, left, bh, bw) == (0, 0, h, w) {
            image.clone()
        } else {
            window(image, top, left, bh, bw, 0.0)?
        };
        let mut out = resize(&cut, side, side, Resample::Bilinear)?;
        if self.flip > 0.0 && unit(rng) < self.flip {
            out = flip_horizontal(&out);
        }
        out.normalise(mean, std)?;
        if let Some(erasing) = self.erasing {
            erase(&mut out, &erasing, rng);
        }
        Ok(out)
    }
}

/// `lo + (hi - lo) u`, `u` uniform in `[0, 1)`.
fn uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    lo + (hi - lo) * unit(rng)
}

/// A `RandomResizedCrop` box `(top, left, height, width)` in an `h x w` image (see
/// [`Crop::ResizedCrop`]).
fn resized_crop_box(
    h: usize,
    w: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut ChaCha8Rng,
) -> (usize, usize, usize, usize) {
    let area = (h * w) as f64;
    let log_ratio = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * uniform(rng, scale);
        let aspect = uniform(rng, log_ratio).exp();
        let bw = (target * aspect).sqrt().round() as usize;
        let bh = (target / aspect).sqrt().round() as usize;
        if (1..=w).contains(&bw) && (1..=h).contains(&bh) {
            let top = below(rng, h - bh + 1);
            let left = below(rng, w - bw + 1);
            return (top, left, bh, bw);
        }
    }
    // The centred box of the whole image, narrowed to the aspect range.
    let aspect = w as f64 / h as f64;
    let (bh, bw) = if aspect < ratio.0 {
        (((w as f64 / ratio.0).round() as usize).clamp(1, h), w)
    } else if aspect > ratio.1 {
        (h, ((h as f64 * ratio.1).round() as usize).clamp(1, w))
    } else {
        (h, w)
    };
    ((h - bh) / 2, (w - bw) / 2, bh, bw)
}

/// Random erasing in place (see [`Erasing`]): the rectangle set to 0 in every channel.
fn erase(image: &mut Planes<f32>, erasing: &Erasing, rng: &mut ChaCha8Rng) {
    if unit(rng) >= erasing.probability {
        return;
    }
    let (h, w) = (image.height(), image.width());
    let area = (h * w) as f64;
    let log_ratio = (erasing.ratio.0.ln(), erasing.ratio.1.ln());
    for _ in 0..10 {
        let target = area * uniform(rng, erasing.area);
        let aspect = uniform(rng, log_ratio).exp();
        let eh = (target * aspect).sqrt().round() as usize;
        let ew = (target / aspect).sqrt().round() as usize;
        if eh == 0 || ew == 0 || eh >= h || ew >= w {
            continue;
        }
        let top = below(rng, h - eh + 1);
        let left = below(rng, w - ew + 1);
        for plane in image.data_mut().chunks_exact_mut(h * w) {
            for row in plane.chunks_exact_mut(w).skip(top).take(eh) {
                row[left..left + ew].fill(0.0);
            }
        }
        return;
    }
}

#[cfg(test)]
#[path = "augment_tests.rs"]
mod tests;
