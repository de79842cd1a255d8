//! The native module `roformer_rs._roformer_rs`: a thin layer over the crates' public API.
//! The Python package (`python/roformer_rs/`) wraps it: array types in and out, defaults and
//! docstrings. Every error becomes a Python exception in [`errors`]; compute runs without the
//! GIL.

mod arrays;
mod errors;
mod half_rotation;
mod rotary_core;
mod scaling;
mod text_model;
mod train;
mod vision_model;

use pyo3::prelude::*;

/// The module's contents.
#[pymodule]
fn _roformer_rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ModelError", m.py().get_type::<errors::ModelError>())?;
    m.add_class::<rotary_core::RotaryCore>()?;
    m.add_class::<scaling::RopeScaling>()?;
    m.add_class::<text_model::NativeModel>()?;
    m.add_class::<vision_model::NativeVisionModel>()?;
    m.add_function(wrap_pyfunction!(half_rotation::apply_rotary_pos_emb, m)?)?;
    m.add_function(wrap_pyfunction!(half_rotation::apply_rotary_pos_emb_, m)?)?;
    m.add_function(wrap_pyfunction!(train::train_mlm, m)?)?;
    m.add_function(wrap_pyfunction!(bf16_products_on_openmp, m)?)?;
    Ok(())
}

/// Whether this process's bf16 products will run on oneDNN's OpenMP threads
/// (`roformer::bf16_products_on_openmp`); the package sets `OMP_WAIT_POLICY=passive` at import
/// when so.
#[pyfunction]
fn bf16_products_on_openmp() -> bool {
    roformer::bf16_products_on_openmp()
}
