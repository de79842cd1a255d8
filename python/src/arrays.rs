//! numpy arrays in and out of the rotary kernels: which storage types are accepted, and the
//! shape checks that turn an array into a contiguous slice.
//!
//! The Python layer (`roformer_rs/_arrays.py`) hands over C-contiguous arrays of f32, f16, or
//! bf16 viewed as its `uint16` bits (numpy has no bf16 of its own; `ml_dtypes.bfloat16` and
//! `torch.bfloat16` are both viewed so), and views the result back.

use candle_core::{DType, Tensor};
use half::slice::HalfBitsSliceExt;
use half::{bf16, f16};
use numpy::{PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn};
use pyo3::prelude::*;

use crate::errors::{self, value_error};

/// A numpy storage type and the element the kernels compute on.
pub trait Storage: numpy::Element + Copy + Send + Sync {
    /// The element type the rotary kernels read.
    type E: rotary::Element;
    /// The data as kernel elements.
    fn view(s: &[Self]) -> &[Self::E];
    /// The data as kernel elements, writable.
    fn view_mut(s: &mut [Self]) -> &mut [Self::E];
}

impl Storage for f32 {
    type E = f32;
    fn view(s: &[f32]) -> &[f32] {
        s
    }
    fn view_mut(s: &mut [f32]) -> &mut [f32] {
        s
    }
}

impl Storage for f16 {
    type E = f16;
    fn view(s: &[f16]) -> &[f16] {
        s
    }
    fn view_mut(s: &mut [f16]) -> &mut [f16] {
        s
    }
}

/// bf16 as its bits: the Python layer views `bfloat16` arrays as `uint16`.
impl Storage for u16 {
    type E = bf16;
    fn view(s: &[u16]) -> &[bf16] {
        s.reinterpret_cast()
    }
    fn view_mut(s: &mut [u16]) -> &mut [bf16] {
        s.reinterpret_cast_mut()
    }
}

/// A read-only float array of one of the accepted storage types.
#[derive(FromPyObject)]
pub enum Floats<'py> {
    /// float32.
    F32(PyReadonlyArrayDyn<'py, f32>),
    /// float16.
    F16(PyReadonlyArrayDyn<'py, f16>),
    /// bfloat16, as its bits.
    Bf16(PyReadonlyArrayDyn<'py, u16>),
}

/// A writable float array of one of the accepted storage types.
#[derive(FromPyObject)]
pub enum FloatsMut<'py> {
    /// float32.
    F32(PyReadwriteArrayDyn<'py, f32>),
    /// float16.
    F16(PyReadwriteArrayDyn<'py, f16>),
    /// bfloat16, as its bits.
    Bf16(PyReadwriteArrayDyn<'py, u16>),
}

/// The C-contiguous data of `a`, or a `ValueError` naming `what`.
pub fn slice<'a, S: Storage>(a: &'a PyReadonlyArrayDyn<'_, S>, what: &str) -> PyResult<&'a [S]> {
    a.as_slice()
        .map_err(|_| value_error(format!("{what} must be C-contiguous")))
}

/// The C-contiguous writable data of `a`, or a `ValueError` naming `what`.
pub fn slice_mut<'a, S: Storage>(
    a: &'a mut PyReadwriteArrayDyn<'_, S>,
    what: &str,
) -> PyResult<&'a mut [S]> {
    a.as_slice_mut()
        .map_err(|_| value_error(format!("{what} must be C-contiguous")))
}

/// A new C-ordered array of `shape`, zero-filled, for a result.
pub fn new_array<'py, S: Storage>(py: Python<'py>, shape: &[usize]) -> Bound<'py, PyArrayDyn<S>> {
    PyArrayDyn::<S>::zeros(py, shape, false)
}

/// The axis `axis` (negative counts from the end) of an array of `ndim` axes, or a
/// `ValueError` naming `what`.
pub fn axis(axis: isize, ndim: usize, what: &str) -> PyResult<usize> {
    let n = ndim as isize;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(value_error(format!(
            "{what} {axis} is out of range for an array of {ndim} axes"
        )));
    }
    Ok(a as usize)
}

/// A model's output tensor as a numpy float32 array of its shape.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let dims = t.dims().to_vec();
    let data = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| errors::model(e.into()))?;
    numpy::PyArray1::from_vec(py, data).reshape(dims)
}
