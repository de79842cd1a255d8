//! [`NdPositions`]: one real vector per token, and grids of them.

use crate::error::{checked_product, try_with_capacity, Result, RopeError};

/// The positions of a list of tokens in `R^axes`: token `t` sits at
/// `p_t = (coords[t * axes], .., coords[t * axes + axes - 1])`.
///
/// Rows are laid out as for [`crate::Positions::Explicit`]: `seq` rows shared by every sequence
/// of a batch, or `batch * seq` rows, sequence-major.
#[derive(Debug, Clone, PartialEq)]
pub struct NdPositions {
    axes: usize,
    coords: Vec<f64>,
}

impl NdPositions {
    /// Positions from a flat, row-major list of `rows * axes` coordinates.
    ///
    /// # Errors
    /// [`RopeError::NdPositions`] for zero axes or a length that is not a multiple of `axes`;
    /// [`RopeError::NonFinitePosition`] (with the flat index) for a NaN or infinite coordinate.
    pub fn new(axes: usize, coords: Vec<f64>) -> Result<Self> {
        if axes == 0 {
            return Err(RopeError::NdPositions("zero axes".into()));
        }
        if !coords.len().is_multiple_of(axes) {
            return Err(RopeError::NdPositions(format!(
                "{} coordinates do not make whole rows of {axes} axes",
                coords.len()
            )));
        }
        if let Some(index) = coords.iter().position(|v| !v.is_finite()) {
            return Err(RopeError::NonFinitePosition {
                index,
                value: coords[index],
            });
        }
        Ok(NdPositions { axes, coords })
    }

    /// Positions from rows of `K` coordinates.
    ///
    /// # Errors
    /// As [`NdPositions::new`].
    pub fn from_rows<const K: usize>(rows: &[[f64; K]]) -> Result<Self> {
        NdPositions::new(K, rows.iter().flatten().copied().collect())
    }

    /// Every axis at the same position `positions[t]` for token `t`: text tokens of M-RoPE,
    /// which then rotate exactly as 1D RoPE at `positions[t]`.
    ///
    /// # Errors
    /// As [`NdPositions::new`]; [`RopeError::TooLarge`] or [`RopeError::Allocation`] for more
    /// coordinates than memory can hold.
    pub fn shared(axes: usize, positions: &[f64]) -> Result<Self> {
        let len = checked_product("coordinates", positions.len(), axes, usize::MAX)?;
        let mut coords = try_with_capacity("coordinates", len)?;
        coords.extend(positions.iter().flat_map(|&p| std::iter::repeat_n(p, axes)));
        NdPositions::new(axes, coords)
    }

    /// Integer coordinates of every cell of a grid with `dims[k]` cells along axis `k`, in
    /// row-major order (the last axis varies fastest). For an image of `h x w` patches,
    /// `grid(&[h, w])` puts patch `r * w + c` at `(r, c)`; for a video of `t x h x w`,
    /// `grid(&[t, h, w])` puts cell `(i * h + r) * w + c` at `(i, r, c)`.
    ///
    /// # Errors
    /// [`RopeError::NdPositions`] for no axes or a cell count that overflows,
    /// [`RopeError::Allocation`] for more cells than memory can hold.
    pub fn grid(dims: &[usize]) -> Result<Self> {
        NdPositions::grid_with(dims, |_, i| i as f64)
    }

    /// [`NdPositions::grid`] for an `h x w` image: patch `r * w + c` at `(r, c)`.
    ///
    /// # Errors
    /// As [`NdPositions::grid`].
    pub fn grid_2d(h: usize, w: usize) -> Result<Self> {
        NdPositions::grid(&[h, w])
    }

    /// [`NdPositions::grid`] for a `t x h x w` video: cell `(i * h + r) * w + c` at `(i, r, c)`.
    ///
    /// # Errors
    /// As [`NdPositions::grid`].
    pub fn grid_3d(t: usize, h: usize, w: usize) -> Result<Self> {
        NdPositions::grid(&[t, h, w])
    }

    /// A grid as [`NdPositions::grid`] with coordinates in `[-1, 1]`: axis `k` takes the
    /// `dims[k]` evenly spaced values `-1 + 2 i / (dims[k] - 1)` (just `-1` for a single cell),
    /// the coordinates the "pixel" schedule expects.
    ///
    /// # Errors
    /// As [`NdPositions::grid`].
    pub fn pixel_grid(dims: &[usize]) -> Result<Self> {
        NdPositions::grid_with(dims, |n, i| {
            if n <= 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (n - 1) as f64
            }
        })
    }

    /// A row-major grid whose coordinate along an axis of `n` cells at index `i` is `coord(n, i)`.
    fn grid_with(dims: &[usize], coord: impl Fn(usize, usize) -> f64) -> Result<Self> {
        let axes = dims.len();
        let cells = dims.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
        let Some(len) = cells.and_then(|c| c.checked_mul(axes)) else {
            return Err(RopeError::NdPositions(format!("grid {dims:?} overflows")));
        };
        if axes == 0 {
            return Err(RopeError::NdPositions(
                "a grid needs at least one axis".into(),
            ));
        }
        let mut coords = try_with_capacity("grid coordinates", len)?;
        let mut index = vec![0usize; axes];
        for _ in 0..len / axes {
            coords.extend(index.iter().zip(dims).map(|(&i, &n)| coord(n, i)));
            for k in (0..axes).rev() {
                index[k] += 1;
                if index[k] < dims[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        NdPositions::new(axes, coords)
    }

    /// Appends the rows of `other` (same number of axes): e.g. an image grid after text tokens.
    ///
    /// # Errors
    /// [`RopeError::NdPositions`] if the axes differ.
    pub fn extend(&mut self, other: &NdPositions) -> Result<()> {
        if other.axes != self.axes {
            return Err(RopeError::NdPositions(format!(
                "cannot append {}-axis positions to {}-axis ones",
                other.axes, self.axes
            )));
        }
        self.coords.extend_from_slice(&other.coords);
        Ok(())
    }

    /// Number of axes (coordinates per token).
    pub fn axes(&self) -> usize {
        self.axes
    }

    /// Number of tokens.
    pub fn rows(&self) -> usize {
        self.coords.len() / self.axes
    }

    /// The position of token `row`, or `None` past the end.
    pub fn row(&self, row: usize) -> Option<&[f64]> {
        let start = row.checked_mul(self.axes)?;
        self.coords.get(start..start.checked_add(self.axes)?)
    }

    /// All coordinates, row-major (`rows * axes`).
    pub fn as_slice(&self) -> &[f64] {
        &self.coords
    }
}
