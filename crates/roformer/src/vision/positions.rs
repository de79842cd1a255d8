//! Where the tokens of an image sit: its patch grid (from the image, never from the config),
//! the coordinates of the patches, and the position rows of one pass, the prefix tokens
//! (CLS, registers) first, at the origin, so that every rotation leaves them as they are.

use std::f64::consts::TAU;

use rotary::NdPositions;
use serde::{Deserialize, Serialize};

use crate::vision::error::{Result, VisionError};

/// The whole patches of an image: `rows = floor(height / p)`, `cols = floor(width / p)`. The
/// pixels past the last whole patch of each axis are dropped, as a convolution of stride `p`
/// drops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PatchGrid {
    /// Patches down the image.
    pub rows: usize,
    /// Patches across the image.
    pub cols: usize,
}

impl PatchGrid {
    /// The grid of a `height x width` image cut into `patch x patch` patches.
    ///
    /// # Errors
    /// [`VisionError::ImageTooSmall`] when an axis holds no whole patch (or `patch` is 0).
    pub fn of_image(height: usize, width: usize, patch: usize) -> Result<PatchGrid> {
        if patch == 0 || height < patch || width < patch {
            return Err(VisionError::ImageTooSmall {
                height,
                width,
                patch,
            });
        }
        Ok(PatchGrid {
            rows: height / patch,
            cols: width / patch,
        })
    }

    /// `rows * cols`.
    pub fn patches(&self) -> usize {
        self.rows * self.cols
    }
}

/// The coordinates of the patches along an axis of `n` of them, as the rotary kinds read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Coordinates {
    /// DINOv3's: the patch centres normalised to `[-1, 1]`, `c_i = 2 (i + 1/2) / n - 1`, read in
    /// turns: the angle of frequency `theta_j` is `2 pi c_i theta_j`. An image of any size
    /// spans the same range.
    #[serde(alias = "normalized")]
    Normalised,
    /// The seed's: the patch index `i` itself, in radians: the angle is `i theta_j`. A larger
    /// image reaches positions training never saw.
    Indices,
    /// The seed's indices on the config's grid (`image_size / patch_size`, `n0` patches along
    /// the axis), and any other grid of `n` stretched onto the same span:
    /// `p_i = (i + 1/2) n0 / n - 1/2` (position interpolation, as DINOv3's normalised centres
    /// do, in the units of the config grid's indices). On the config grid, `p_i = i`: a model
    /// trained with `indices` there is read at another size by interpolation rather than
    /// extrapolation.
    Interpolated,
}

impl Coordinates {
    /// The position of patch `i` of `n` along an axis whose config grid has `n0` patches,
    /// scaled so that the angle of frequency `theta_j` is `position * theta_j`:
    /// `2 pi (2 (i + 1/2) / n - 1)`, `i`, or `(i + 1/2) n0 / n - 1/2`.
    pub fn position(self, i: usize, n: usize, n0: usize) -> f64 {
        match self {
            // In this order, as transformers computes it: (i + 0.5) / n, then 2 c - 1.
            Coordinates::Normalised => TAU * (2.0 * ((i as f64 + 0.5) / n as f64) - 1.0),
            Coordinates::Indices => i as f64,
            Coordinates::Interpolated => (i as f64 + 0.5) * n0 as f64 / n as f64 - 0.5,
        }
    }
}

/// How a pass places its patches: the coordinate convention and the config's grid (which
/// [`Coordinates::Interpolated`] stretches every grid onto).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The convention.
    pub coordinates: Coordinates,
    /// The config's grid, `image_size / patch_size`.
    pub config_grid: PatchGrid,
}

/// The 2-axis positions `(y, x)` of a pass over `grid`: `prefix` rows at `(0, 0)`, then patch
/// `r * cols + c` at `(position(r, rows, rows0), position(c, cols, cols0))` (row-major, as the
/// patches are flattened; `rows0 x cols0` the config's grid).
///
/// # Errors
/// [`VisionError::Rope`] for more rows than memory can hold.
pub fn grid_positions(grid: PatchGrid, prefix: usize, placement: Placement) -> Result<NdPositions> {
    let (coordinates, reference) = (placement.coordinates, placement.config_grid);
    let mut coords = Vec::with_capacity(2 * (prefix + grid.patches()));
    coords.resize(2 * prefix, 0.0);
    for r in 0..grid.rows {
        let y = coordinates.position(r, grid.rows, reference.rows);
        for c in 0..grid.cols {
            coords.extend([y, coordinates.position(c, grid.cols, reference.cols)]);
        }
    }
    Ok(NdPositions::new(2, coords)?)
}

/// The 1-axis positions of a pass over `grid` for `rope_flat`: `prefix` rows at 0, then patch
/// `k = r * cols + c` at `position(k, rows * cols, rows0 * cols0)`: the seed's flattened index,
/// under which the patches below and beside a patch lie `cols` and 1 apart.
///
/// # Errors
/// As [`grid_positions`].
pub fn flat_positions(grid: PatchGrid, prefix: usize, placement: Placement) -> Result<NdPositions> {
    let (n, n0) = (grid.patches(), placement.config_grid.patches());
    let mut coords = vec![0.0; prefix];
    coords.extend((0..n).map(|k| placement.coordinates.position(k, n, n0)));
    Ok(NdPositions::new(1, coords)?)
}
