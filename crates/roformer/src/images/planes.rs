//! An image as channel planes, the layout every function of [`images`](super) takes and
//! returns: `[channels, height, width]`, row-major, so the value of channel `c` at row `y`,
//! column `x` is `data[(c * height + y) * width + x]` (PyTorch's `CHW`).

use super::error::ImageError;

/// The colour layout a model wants: one grey plane or three RGB planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channels {
    /// One plane of luminance.
    Grey,
    /// Red, green and blue planes, in that order.
    Rgb,
}

impl Channels {
    /// The number of planes: 1 or 3.
    pub fn count(self) -> usize {
        match self {
            Self::Grey => 1,
            Self::Rgb => 3,
        }
    }
}

/// ITU-R BT.601 luma weights of red, green and blue: `L = 0.299 R + 0.587 G + 0.114 B`, the
/// conversion of PIL's `Image.convert("L")` and torchvision's `rgb_to_grayscale`.
pub const LUMA: [f32; 3] = [0.299, 0.587, 0.114];

/// An image of `channels` planes of `height x width` values of type `T` (`u8` as decoded,
/// `f32` for arithmetic), laid out `[c, h, w]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Planes<T = f32> {
    channels: usize,
    height: usize,
    width: usize,
    data: Vec<T>,
}

impl<T: Copy> Planes<T> {
    /// Wraps `data` laid out `[channels, height, width]`.
    ///
    /// # Errors
    /// [`ImageError::Shape`] when `data.len() != channels * height * width` (or the product
    /// overflows). Empty images (a zero dimension) are allowed here; operations that need
    /// pixels refuse them.
    pub fn new(
        channels: usize,
        height: usize,
        width: usize,
        data: Vec<T>,
    ) -> Result<Self, ImageError> {
        let expected = channels
            .checked_mul(height)
            .and_then(|n| n.checked_mul(width));
        if expected != Some(data.len()) {
            return Err(ImageError::Shape {
                channels,
                height,
                width,
                len: data.len(),
            });
        }
        Ok(Self {
            channels,
            height,
            width,
            data,
        })
    }

    /// The number of planes.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Rows per plane.
    pub fn height(&self) -> usize {
        self.height
    }

    /// Columns per plane.
    pub fn width(&self) -> usize {
        self.width
    }

    /// All values, `[c, h, w]` row-major.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// All values, mutable, `[c, h, w]` row-major.
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// The values, `[c, h, w]` row-major.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// Plane `c` as a `height * width` slice (row-major).
    ///
    /// # Panics
    /// When `c >= channels` (a programming error, not bad data).
    pub fn plane(&self, c: usize) -> &[T] {
        let area = self.height * self.width;
        &self.data[c * area..(c + 1) * area]
    }

    /// Whether the image has no value (a zero channel count, height or width).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The image with its values mapped one by one.
    pub fn map<U: Copy>(&self, f: impl Fn(T) -> U) -> Planes<U> {
        Planes {
            channels: self.channels,
            height: self.height,
            width: self.width,
            data: self.data.iter().map(|&v| f(v)).collect(),
        }
    }

    /// Three planes from one: the grey plane copied into red, green and blue; an RGB image is
    /// returned as it is.
    ///
    /// # Errors
    /// [`ImageError::Channels`] for any other channel count.
    pub fn to_rgb(&self) -> Result<Self, ImageError> {
        match self.channels {
            3 => Ok(self.clone()),
            1 => Ok(Self {
                channels: 3,
                height: self.height,
                width: self.width,
                data: self.data.repeat(3),
            }),
            found => Err(ImageError::Channels {
                found,
                expected: "1 or 3",
            }),
        }
    }
}

impl Planes<u8> {
    /// Values scaled to `[0, 1]`: `v / 255` (as f32).
    pub fn to_unit(&self) -> Planes<f32> {
        self.map(|v| f32::from(v) / 255.0)
    }

    /// One grey plane from three: `round(0.299 R + 0.587 G + 0.114 B)` ([`LUMA`]); a grey image
    /// is returned as it is.
    ///
    /// # Errors
    /// [`ImageError::Channels`] for a channel count other than 1 or 3.
    pub fn to_grey(&self) -> Result<Self, ImageError> {
        let grey = self.to_unit().to_grey()?;
        Ok(grey.map(|v| (v * 255.0).round().clamp(0.0, 255.0) as u8))
    }

    /// The image in the layout a model wants ([`to_rgb`](Self::to_rgb) or
    /// [`to_grey`](Self::to_grey)).
    ///
    /// # Errors
    /// [`ImageError::Channels`] for a channel count other than 1 or 3.
    pub fn with_channels(&self, channels: Channels) -> Result<Self, ImageError> {
        match channels {
            Channels::Grey => self.to_grey(),
            Channels::Rgb => self.to_rgb(),
        }
    }
}

impl Planes<f32> {
    /// One grey plane from three: `0.299 R + 0.587 G + 0.114 B` ([`LUMA`]); a grey image is
    /// returned as it is.
    ///
    /// # Errors
    /// [`ImageError::Channels`] for a channel count other than 1 or 3.
    pub fn to_grey(&self) -> Result<Self, ImageError> {
        match self.channels {
            1 => Ok(self.clone()),
            3 => {
                let (r, g, b) = (self.plane(0), self.plane(1), self.plane(2));
                let data = r
                    .iter()
                    .zip(g)
                    .zip(b)
                    .map(|((&r, &g), &b)| LUMA[0] * r + LUMA[1] * g + LUMA[2] * b)
                    .collect();
                Ok(Self {
                    channels: 1,
                    height: self.height,
                    width: self.width,
                    data,
                })
            }
            found => Err(ImageError::Channels {
                found,
                expected: "1 or 3",
            }),
        }
    }

    /// The image in the layout a model wants ([`to_rgb`](Self::to_rgb) or
    /// [`to_grey`](Self::to_grey)).
    ///
    /// # Errors
    /// [`ImageError::Channels`] for a channel count other than 1 or 3.
    pub fn with_channels(&self, channels: Channels) -> Result<Self, ImageError> {
        match channels {
            Channels::Grey => self.to_grey(),
            Channels::Rgb => self.to_rgb(),
        }
    }

    /// Per-channel normalisation in place: `x[c] = (x[c] - mean[c]) / std[c]`.
    ///
    /// # Errors
    /// [`ImageError::StatsLength`] when `mean` or `std` does not have one value per channel.
    pub fn normalise(&mut self, mean: &[f32], std: &[f32]) -> Result<(), ImageError> {
        for (what, stats) in [("mean", mean), ("std", std)] {
            if stats.len() != self.channels {
                return Err(ImageError::StatsLength {
                    what,
                    found: stats.len(),
                    channels: self.channels,
                });
            }
        }
        let area = self.height * self.width;
        if area == 0 {
            return Ok(());
        }
        for ((plane, &m), &s) in self.data.chunks_exact_mut(area).zip(mean).zip(std) {
            for v in plane {
                *v = (*v - m) / s;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_checked() {
        assert!(Planes::new(3, 2, 2, vec![0u8; 12]).is_ok());
        assert!(matches!(
            Planes::new(3, 2, 2, vec![0u8; 11]),
            Err(ImageError::Shape { len: 11, .. })
        ));
        assert!(Planes::<u8>::new(usize::MAX, 2, 2, vec![]).is_err());
        assert!(Planes::<u8>::new(1, 0, 5, vec![]).unwrap().is_empty());
    }

    #[test]
    fn grey_and_rgb_convert_both_ways() {
        let grey = Planes::new(1, 1, 2, vec![10u8, 200]).unwrap();
        let rgb = grey.to_rgb().unwrap();
        assert_eq!(rgb.data(), &[10, 200, 10, 200, 10, 200]);
        // Equal channels give back the grey value (the weights sum to 1).
        assert_eq!(rgb.to_grey().unwrap(), grey);
        let red = Planes::new(3, 1, 1, vec![255u8, 0, 0]).unwrap();
        assert_eq!(red.to_grey().unwrap().data(), &[76]); // round(0.299 * 255) = round(76.245)
        let two = Planes::new(2, 1, 1, vec![0.0f32, 0.0]).unwrap();
        assert!(matches!(
            two.to_grey(),
            Err(ImageError::Channels { found: 2, .. })
        ));
        assert!(two.to_rgb().is_err());
    }

    #[test]
    fn normalise_is_per_channel() {
        let mut p = Planes::new(2, 1, 2, vec![1.0f32, 3.0, 10.0, 20.0]).unwrap();
        p.normalise(&[1.0, 10.0], &[2.0, 5.0]).unwrap();
        assert_eq!(p.data(), &[0.0, 1.0, 0.0, 2.0]);
        assert!(matches!(
            p.normalise(&[0.0], &[1.0, 1.0]),
            Err(ImageError::StatsLength { what: "mean", .. })
        ));
    }
}
