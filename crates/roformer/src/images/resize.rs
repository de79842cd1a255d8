//! Bilinear resizing of `[c, h, w]` f32 planes, with and without antialiasing, as PyTorch
//! computes it.
//!
//! Both filters use half-pixel centres: output pixel `i` of an axis resized from `n_in` to
//! `n_out` samples the input at `x = s (i + 0.5) - 0.5`, `s = n_in / n_out`, in input pixel
//! units whose pixel `k` has its centre at `x = k`.
//!
//! - [`Resample::Bilinear`] is `F.interpolate(mode="bilinear", align_corners=False,
//!   antialias=False)`: `x` is clamped to `>= 0`, `k = floor(x)`, the weights are `1 - t` on
//!   `k` and `t = x - k` on `min(k + 1, n_in - 1)`. Shrinking by more than 2 skips pixels (it
//!   aliases), as PyTorch's does.
//! - [`Resample::BilinearAntialiased`] is `F.interpolate(..., antialias=True)` (torchvision's
//!   and transformers' resize): the triangle filter `f(d) = max(0, 1 - |d|)` stretched by
//!   `max(s, 1)`, so that a shrunk image averages every input pixel under it. Output `i`
//!   weighs input `k` by `f((k + 0.5 - c) / max(s, 1))` with `c = s (i + 0.5)`, over `k` in
//!   `[trunc(c - r + 0.5), trunc(c + r + 0.5))` (clamped to the image), `r = max(s, 1)`, the
//!   weights then divided by their sum. When enlarging it equals [`Resample::Bilinear`].
//!
//! Both are separable: rows are resampled first, then columns, each output value a weighted
//! sum of at most `2 max(s, 1) + 1` inputs. Weights sum to 1, so a constant image stays
//! constant and every output lies between the input's minimum and maximum.

use super::error::ImageError;
use super::planes::Planes;

/// How to resample when resizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// Plain bilinear (PyTorch `antialias=False`): two taps per axis, whatever the scale.
    Bilinear,
    /// Bilinear with the filter widened by the shrink factor (PyTorch `antialias=True`).
    BilinearAntialiased,
}

/// The taps of one axis: output `i` is `sum_j weights[j] * input[index[j]]` over
/// `j in offsets[i]..offsets[i + 1]`.
#[derive(Debug, Clone)]
struct Taps {
    offsets: Vec<usize>,
    index: Vec<usize>,
    weights: Vec<f32>,
}

impl Taps {
    /// The taps of `resample` from `n_in` to `n_out` pixels (both at least 1).
    fn new(n_in: usize, n_out: usize, resample: Resample) -> Self {
        let mut taps = Self {
            offsets: vec![0],
            index: Vec::new(),
            weights: Vec::new(),
        };
        let scale = n_in as f32 / n_out as f32;
        for i in 0..n_out {
            match resample {
                Resample::Bilinear => taps.push_bilinear(scale, i, n_in),
                Resample::BilinearAntialiased => taps.push_antialiased(scale, i, n_in),
            }
            taps.offsets.push(taps.index.len());
        }
        taps
    }

    /// PyTorch's `area_pixel_compute_source_index` then two taps (the second clamped to the
    /// last pixel, where both taps read the same one).
    fn push_bilinear(&mut self, scale: f32, i: usize, n_in: usize) {
        let x = (scale * (i as f32 + 0.5) - 0.5).max(0.0);
        let k = (x as usize).min(n_in - 1);
        let t = (x - k as f32).clamp(0.0, 1.0);
        let next = if k + 1 < n_in { k + 1 } else { k };
        self.index.extend([k, next]);
        self.weights.extend([1.0 - t, t]);
    }

    /// The stretched triangle filter over the input pixels under it, normalised.
    fn push_antialiased(&mut self, scale: f32, i: usize, n_in: usize) {
        let (support, inv) = if scale >= 1.0 {
            (scale, 1.0 / scale)
        } else {
            (1.0, 1.0)
        };
        let centre = scale * (i as f32 + 0.5);
        // `as` truncates toward zero, as PyTorch's int64 cast does; negatives end at 0.
        let first = ((centre - support + 0.5) as i64).max(0) as usize;
        let end = ((centre + support + 0.5) as i64).clamp(0, n_in as i64) as usize;
        let start = self.weights.len();
        for k in first..end.max(first) {
            let d = (k as f32 - centre + 0.5) * inv;
            self.index.push(k);
            self.weights.push((1.0 - d.abs()).max(0.0));
        }
        let total: f32 = self.weights[start..].iter().sum();
        if total != 0.0 {
            for w in &mut self.weights[start..] {
                *w /= total;
            }
        }
    }

    /// Output `i` from `input`, read at `input[index * stride]`.
    fn apply(&self, i: usize, input: &[f32], stride: usize) -> f32 {
        let range = self.offsets[i]..self.offsets[i + 1];
        self.index[range.clone()]
            .iter()
            .zip(&self.weights[range])
            .map(|(&k, &w)| w * input[k * stride])
            .sum()
    }
}

/// `planes` resized to `height x width` by `resample` (see the module doc for the formulas).
/// A same-size resize returns the values unchanged.
///
/// # Errors
/// [`ImageError::Empty`] when the input has no pixel or the requested size has a zero side.
pub fn resize(
    planes: &Planes<f32>,
    height: usize,
    width: usize,
    resample: Resample,
) -> Result<Planes<f32>, ImageError> {
    let (c, h, w) = (planes.channels(), planes.height(), planes.width());
    if planes.is_empty() || height == 0 || width == 0 {
        return Err(ImageError::Empty {
            channels: c,
            height: if planes.is_empty() { h } else { height },
            width: if planes.is_empty() { w } else { width },
        });
    }
    if (h, w) == (height, width) {
        return Ok(planes.clone());
    }
    let across = Taps::new(w, width, resample);
    let down = Taps::new(h, height, resample);
    // Rows first: [c, h, w] -> [c, h, width].
    let mut wide = Vec::with_capacity(c * h * width);
    for row in planes.data().chunks_exact(w) {
        wide.extend((0..width).map(|x| across.apply(x, row, 1)));
    }
    // Then columns: [c, h, width] -> [c, height, width].
    let mut out = Vec::with_capacity(c * height * width);
    for plane in wide.chunks_exact(h * width) {
        for y in 0..height {
            out.extend((0..width).map(|x| down.apply(y, &plane[x..], width)));
        }
    }
    Planes::new(c, height, width, out)
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
