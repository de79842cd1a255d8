//! `RotaryCore`: the native side of `roformer_rs.RotaryEmbedding`, after rotary-embedding-torch
//! (`rotate_queries_or_keys`, partial rotary, axial N-D frequencies), over the rotary crate's
//! tables and kernels.
//!
//! An array `x` of shape `[..., seq, ..., d]` (sequence axis `seq_dim`, features last) rotates
//! as a token-major `[outer, seq, inner, d]` tensor: the axes before the sequence axis are the
//! batch, those between it and the features are heads. Only the first `dim` of the `d`
//! features rotate (partial rotary); the rest pass through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use numpy::{PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use rotary::{AxisSchedule, Direction, Layout, NdPositions, NdRope, Positions, Rope, Shape};

use crate::arrays::{axis, new_array, slice, slice_mut, Floats, FloatsMut, Storage};
use crate::errors::{self, value_error};

/// The rotation of rotary-embedding-torch's `RotaryEmbedding`, for arrays of any head size.
#[pyclass(name = "RotaryCore", module = "roformer_rs._roformer_rs", frozen)]
pub struct RotaryCore {
    /// Rotated features per head (per axis, for axial rotations).
    dim: usize,
    layout: Layout,
    schedule: AxisSchedule,
    /// Positions are divided by it (position interpolation).
    interpolate_factor: f64,
    /// One cached-table rotation per head size met.
    ropes: Mutex<HashMap<usize, Arc<Rope>>>,
}

/// `[outer, seq, inner, d]` (token-major) of an array of `dims` with its sequence on axis
/// `seq_axis`.
fn sequence_shape(dims: &[usize], seq_axis: usize) -> PyResult<Shape> {
    let ndim = dims.len();
    if seq_axis + 1 >= ndim {
        return Err(value_error(format!(
            "seq_dim must not be the feature (last) axis of an array of shape {dims:?}"
        )));
    }
    let outer = dims[..seq_axis].iter().product();
    let inner = dims[seq_axis + 1..ndim - 1].iter().product();
    Ok(Shape::token_major(
        outer,
        dims[seq_axis],
        inner,
        dims[ndim - 1],
    ))
}

/// `[outer, 1, cells, d]` of an array of `dims` whose `axes` axes before the last form a grid,
/// and the grid's sizes.
fn grid_shape(dims: &[usize], axes: usize) -> PyResult<(Shape, Vec<usize>)> {
    let ndim = dims.len();
    if axes == 0 || axes + 1 > ndim {
        return Err(value_error(format!(
            "an axial rotation over {axes} axes needs an array of at least {} axes, got \
             shape {dims:?}",
            axes + 1
        )));
    }
    let grid = dims[ndim - 1 - axes..ndim - 1].to_vec();
    let outer = dims[..ndim - 1 - axes].iter().product();
    let cells = grid.iter().product();
    Ok((Shape::head_major(outer, 1, cells, dims[ndim - 1]), grid))
}

/// The positions of a 1D rotation: the plain range from an offset, or interpolated ones.
enum LinePositions {
    /// `offset + s`.
    Range(usize),
    /// `(offset + s) / interpolate_factor`.
    Fractional(Vec<f64>),
}

impl LinePositions {
    /// As the kernels take them.
    fn get(&self) -> Positions<'_> {
        match self {
            LinePositions::Range(offset) => Positions::Range { offset: *offset },
            LinePositions::Fractional(p) => Positions::Fractional(p),
        }
    }
}

/// What one call rotates by: a 1D rotation and its positions, or an N-D one and its grid.
enum Rotation {
    Line(Arc<Rope>, LinePositions),
    Grid(NdRope, NdPositions),
}

impl Rotation {
    /// `dst = R src`.
    fn apply<S: Storage>(&self, src: &[S], dst: &mut [S], shape: Shape) -> rotary::Result<()> {
        let (src, dst) = (S::view(src), S::view_mut(dst));
        match self {
            Rotation::Line(rope, p) => rope.apply(src, dst, shape, p.get(), Direction::Forward),
            Rotation::Grid(rope, p) => rope.apply(src, dst, shape, p, Direction::Forward),
        }
    }

    /// `x = R x`.
    fn apply_inplace<S: Storage>(&self, x: &mut [S], shape: Shape) -> rotary::Result<()> {
        let x = S::view_mut(x);
        match self {
            Rotation::Line(rope, p) => rope.apply_inplace(x, shape, p.get(), Direction::Forward),
            Rotation::Grid(rope, p) => rope.apply_inplace(x, shape, p, Direction::Forward),
        }
    }
}

/// A new array `R x`, computed without the GIL.
fn rotated<'py, S: Storage>(
    py: Python<'py>,
    x: &PyReadonlyArrayDyn<'py, S>,
    rotation: &Rotation,
    shape: Shape,
) -> PyResult<Bound<'py, PyAny>> {
    let src = slice(x, "x")?;
    let out = new_array::<S>(py, x.shape());
    {
        let mut rw = out.readwrite();
        let dst = slice_mut(&mut rw, "the output")?;
        py.detach(|| rotation.apply(src, dst, shape))
            .map_err(errors::rope)?;
    }
    Ok(out.into_any())
}

/// `x = R x` in place, computed without the GIL.
fn rotate_in_place<S: Storage>(
    py: Python<'_>,
    x: &mut PyReadwriteArrayDyn<'_, S>,
    rotation: &Rotation,
    shape: Shape,
) -> PyResult<()> {
    let data = slice_mut(x, "x")?;
    py.detach(|| rotation.apply_inplace(data, shape))
        .map_err(errors::rope)
}

/// `R x` for any accepted storage type.
fn rotated_any<'py>(
    py: Python<'py>,
    x: &Floats<'py>,
    rotation: &Rotation,
    shape: Shape,
) -> PyResult<Bound<'py, PyAny>> {
    match x {
        Floats::F32(a) => rotated(py, a, rotation, shape),
        Floats::F16(a) => rotated(py, a, rotation, shape),
        Floats::Bf16(a) => rotated(py, a, rotation, shape),
    }
}

/// `x = R x` for any accepted storage type.
fn rotate_any_in_place(
    py: Python<'_>,
    x: &mut FloatsMut<'_>,
    rotation: &Rotation,
    shape: Shape,
) -> PyResult<()> {
    match x {
        FloatsMut::F32(a) => rotate_in_place(py, a, rotation, shape),
        FloatsMut::F16(a) => rotate_in_place(py, a, rotation, shape),
        FloatsMut::Bf16(a) => rotate_in_place(py, a, rotation, shape),
    }
}

/// The shape of an accepted array.
fn dims_of(x: &Floats<'_>) -> Vec<usize> {
    match x {
        Floats::F32(a) => a.shape().to_vec(),
        Floats::F16(a) => a.shape().to_vec(),
        Floats::Bf16(a) => a.shape().to_vec(),
    }
}

/// The shape of an accepted writable array.
fn dims_of_mut(x: &FloatsMut<'_>) -> Vec<usize> {
    match x {
        FloatsMut::F32(a) => a.shape().to_vec(),
        FloatsMut::F16(a) => a.shape().to_vec(),
        FloatsMut::Bf16(a) => a.shape().to_vec(),
    }
}

impl RotaryCore {
    /// The 1D rotation for heads of `head_dim` features (cached per head size).
    fn rope(&self, head_dim: usize) -> PyResult<Arc<Rope>> {
        let mut ropes = self.ropes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rope) = ropes.get(&head_dim) {
            return Ok(Arc::clone(rope));
        }
        let inv_freq = self.schedule.inv_freqs(self.dim).map_err(errors::rope)?;
        let rope = Arc::new(
            Rope::from_inv_freq(head_dim, self.layout, inv_freq, 1.0).map_err(errors::rope)?,
        );
        ropes.insert(head_dim, Arc::clone(&rope));
        Ok(rope)
    }

    /// The 1D rotation of an array of `dims` along `seq_dim`, from position `offset`
    /// (divided by `interpolate_factor`).
    fn line_rotation(
        &self,
        dims: &[usize],
        seq_dim: isize,
        offset: usize,
    ) -> PyResult<(Rotation, Shape)> {
        let shape = sequence_shape(dims, axis(seq_dim, dims.len(), "seq_dim")?)?;
        let positions = if self.interpolate_factor == 1.0 {
            LinePositions::Range(offset)
        } else {
            LinePositions::Fractional(
                (0..shape.seq)
                    .map(|s| (offset + s) as f64 / self.interpolate_factor)
                    .collect(),
            )
        };
        Ok((Rotation::Line(self.rope(shape.head_dim)?, positions), shape))
    }

    /// The grid rotation of an array of `dims` over its `axes` axes before the last, shifted by
    /// `offsets` (one per axis).
    fn grid_rotation(
        &self,
        dims: &[usize],
        axes: usize,
        offsets: Option<Vec<f64>>,
    ) -> PyResult<(Rotation, Shape)> {
        let (shape, grid) = grid_shape(dims, axes)?;
        let rope = NdRope::axial(
            shape.head_dim,
            self.layout,
            &vec![self.dim; axes],
            self.schedule,
        )
        .map_err(errors::rope)?;
        let positions = match self.schedule {
            AxisSchedule::Pixel { .. } => NdPositions::pixel_grid(&grid),
            AxisSchedule::Lang { .. } => NdPositions::grid(&grid),
        }
        .map_err(errors::rope)?;
        let positions = match offsets {
            None => positions,
            Some(offsets) if offsets.len() == axes => {
                let mut coords = positions.as_slice().to_vec();
                for row in coords.chunks_mut(axes) {
                    row.iter_mut().zip(&offsets).for_each(|(c, o)| *c += o);
                }
                NdPositions::new(axes, coords).map_err(errors::rope)?
            }
            Some(offsets) => {
                return Err(value_error(format!(
                    "{} offsets given for {axes} axes",
                    offsets.len()
                )))
            }
        };
        Ok((Rotation::Grid(rope, positions), shape))
    }
}

#[pymethods]
impl RotaryCore {
    /// The rotation of `dim` features with rotary-embedding-torch's frequencies: `lang`
    /// (`theta^(-2i / dim)`, `theta` rescaled by `theta_rescale_factor^(dim / (dim - 2))`) or
    /// `pixel` (`pi` to `pi * max_freq / 2`, linearly).
    #[new]
    #[pyo3(signature = (dim, theta = 10000.0, interleaved = true, freqs_for = "lang", max_freq = 10.0, interpolate_factor = 1.0, theta_rescale_factor = 1.0))]
    fn new(
        dim: usize,
        theta: f64,
        interleaved: bool,
        freqs_for: &str,
        max_freq: f64,
        interpolate_factor: f64,
        theta_rescale_factor: f64,
    ) -> PyResult<Self> {
        if !(interpolate_factor.is_finite() && interpolate_factor >= 1.0) {
            return Err(value_error(format!(
                "interpolate_factor must be at least 1, got {interpolate_factor}"
            )));
        }
        let mut base = theta;
        if theta_rescale_factor != 1.0 && dim > 2 {
            base *= theta_rescale_factor.powf(dim as f64 / (dim as f64 - 2.0));
        }
        let schedule = match freqs_for {
            "lang" => AxisSchedule::Lang { base },
            "pixel" => AxisSchedule::Pixel { max_freq },
            other => {
                return Err(value_error(format!(
                    "freqs_for must be 'lang' or 'pixel', got {other:?}"
                )))
            }
        };
        // Checks dim (even, non-zero, not too large) and the base now, not at the first call.
        schedule.inv_freqs(dim).map_err(errors::rope)?;
        Ok(RotaryCore {
            dim,
            layout: if interleaved {
                Layout::Interleaved
            } else {
                Layout::Half
            },
            schedule,
            interpolate_factor,
            ropes: Mutex::new(HashMap::new()),
        })
    }

    /// The inverse frequencies, `dim / 2` values.
    fn inv_freq(&self) -> PyResult<Vec<f64>> {
        self.schedule.inv_freqs(self.dim).map_err(errors::rope)
    }

    /// `x` rotated by the positions `offset + s` along `seq_dim`, as a new array.
    #[pyo3(signature = (x, seq_dim, offset = 0))]
    fn rotate<'py>(
        &self,
        py: Python<'py>,
        x: Floats<'py>,
        seq_dim: isize,
        offset: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (rotation, shape) = self.line_rotation(&dims_of(&x), seq_dim, offset)?;
        rotated_any(py, &x, &rotation, shape)
    }

    /// [`RotaryCore::rotate`] in place.
    #[pyo3(signature = (x, seq_dim, offset = 0))]
    fn rotate_(
        &self,
        py: Python<'_>,
        mut x: FloatsMut<'_>,
        seq_dim: isize,
        offset: usize,
    ) -> PyResult<()> {
        let (rotation, shape) = self.line_rotation(&dims_of_mut(&x), seq_dim, offset)?;
        rotate_any_in_place(py, &mut x, &rotation, shape)
    }

    /// `x` rotated by the grid positions of its `axes` axes before the last (axial
    /// frequencies: `dim` features per axis), as a new array.
    #[pyo3(signature = (x, axes, offsets = None))]
    fn rotate_axial<'py>(
        &self,
        py: Python<'py>,
        x: Floats<'py>,
        axes: usize,
        offsets: Option<Vec<f64>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (rotation, shape) = self.grid_rotation(&dims_of(&x), axes, offsets)?;
        rotated_any(py, &x, &rotation, shape)
    }

    /// [`RotaryCore::rotate_axial`] in place.
    #[pyo3(signature = (x, axes, offsets = None))]
    fn rotate_axial_(
        &self,
        py: Python<'_>,
        mut x: FloatsMut<'_>,
        axes: usize,
        offsets: Option<Vec<f64>>,
    ) -> PyResult<()> {
        let (rotation, shape) = self.grid_rotation(&dims_of_mut(&x), axes, offsets)?;
        rotate_any_in_place(py, &mut x, &rotation, shape)
    }
}
