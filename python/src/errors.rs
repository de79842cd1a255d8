//! Every Rust error becomes a Python exception here, and only here:
//!
//! | Rust error | Python exception |
//! |---|---|
//! | bad shapes, dtypes or arguments (`rotary::RopeError`, `ModelError::Input`, ...) | `ValueError` |
//! | a file or directory that is not there | `FileNotFoundError` |
//! | any other I/O failure | `OSError` |
//! | a checkpoint or config that cannot be loaded | `roformer_rs.ModelError` |
//! | an image that cannot be decoded | `ValueError` |
//!
//! The message is the library's, with its chain of causes.

use std::error::Error;
use std::io;

use pyo3::exceptions::{PyException, PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use roformer::pipeline::image::ImagePipelineError;
use roformer::pipeline::PipelineError;
use roformer::vision::VisionError;
use roformer::TokenizerError;

pyo3::create_exception!(
    roformer_rs,
    ModelError,
    PyException,
    "A checkpoint or config that cannot be loaded: malformed config.json, missing, mis-shaped or \
     unreadable tensors, a broken vocabulary."
);

/// The error's message followed by each cause's (`a: b: c`), skipping a cause whose message
/// the previous one already ends with.
fn message(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// `FileNotFoundError` for a missing file, `OSError` otherwise.
fn io_error(e: &dyn Error, cause: &io::Error) -> PyErr {
    if cause.kind() == io::ErrorKind::NotFound {
        PyFileNotFoundError::new_err(message(e))
    } else {
        PyOSError::new_err(message(e))
    }
}

/// A `ValueError` with `text`: bad shapes or arguments found on the Python side.
pub fn value_error(text: impl Into<String>) -> PyErr {
    PyValueError::new_err(text.into())
}

/// A `FileNotFoundError` with `text`.
pub fn not_found(text: impl Into<String>) -> PyErr {
    PyFileNotFoundError::new_err(text.into())
}

/// The rotary core's errors are all about the arguments: `ValueError`.
pub fn rope(e: rotary::RopeError) -> PyErr {
    PyValueError::new_err(message(&e))
}

/// A rotary scaling that a `config.json` declares wrongly: `ValueError`.
pub fn rope_config(e: rotary::ConfigError) -> PyErr {
    PyValueError::new_err(message(&e))
}

/// Loading and running a text model.
pub fn model(e: roformer::ModelError) -> PyErr {
    use roformer::ModelError as E;
    match &e {
        E::Io { source, .. } => io_error(&e, source),
        E::MissingFile { .. } => PyFileNotFoundError::new_err(message(&e)),
        E::Input(_) => PyValueError::new_err(message(&e)),
        E::Candle(_) => PyRuntimeError::new_err(message(&e)),
        _ => ModelError::new_err(message(&e)),
    }
}

/// Loading a tokenizer: file errors as such, a broken vocabulary as [`ModelError`].
pub fn tokenizer(e: TokenizerError) -> PyErr {
    match &e {
        TokenizerError::Io { source, .. } => io_error(&e, source),
        _ => ModelError::new_err(message(&e)),
    }
}

/// Running a text pipeline.
pub fn pipeline(e: PipelineError) -> PyErr {
    match e {
        PipelineError::Model(m) => model(m),
        PipelineError::NoMask { .. } | PipelineError::NoMaskedLmHead { .. } => {
            PyValueError::new_err(message(&e))
        }
        other => PyRuntimeError::new_err(message(&other)),
    }
}

/// Loading and running a vision model.
pub fn vision(e: VisionError) -> PyErr {
    match e {
        VisionError::Model(m) => model(m),
        VisionError::Config { .. } => ModelError::new_err(message(&e)),
        VisionError::Candle(_) => PyRuntimeError::new_err(message(&e)),
        other => PyValueError::new_err(message(&other)),
    }
}

/// One image through the image pipeline: undecodable or unusable images are `ValueError`.
pub fn image(e: ImagePipelineError) -> PyErr {
    match e {
        ImagePipelineError::Vision(v) => vision(v),
        ImagePipelineError::NonFinite => PyRuntimeError::new_err(message(&e)),
        other => PyValueError::new_err(message(&other)),
    }
}

/// A training run: its files, data and model errors as above, the rest `RuntimeError`.
pub fn train(e: roformer::train::TrainError) -> PyErr {
    use roformer::train::TrainError as E;
    match e {
        E::Model(m) => model(m),
        E::Tokenizer(t) => tokenizer(t),
        E::Io { ref source, .. } => io_error(&e, source),
        E::Data(_) | E::TooLarge(_) => PyValueError::new_err(message(&e)),
        other => PyRuntimeError::new_err(message(&other)),
    }
}

/// An image processor config that does not parse: the checkpoint's fault.
pub fn processor(e: roformer::images::ConfigError) -> PyErr {
    ModelError::new_err(message(&e))
}
