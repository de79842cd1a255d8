//! `RopeScaling`: the rotary schedule a Hugging Face `config.json` declares (default, linear,
//! dynamic NTK, YaRN, Llama 3, LongRoPE), and the cos/sin tables transformers' rotary modules
//! return for it.

use numpy::{PyArray3, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;
use rotary::RopeSpec;

use crate::errors::{self, value_error};

/// A cos or sin table, `[batch, seq, 2 * pairs]`.
type Table<'py> = Bound<'py, PyArray3<f32>>;

/// A checkpoint's rotary schedule, from its `config.json`.
#[pyclass(name = "RopeScaling", module = "roformer_rs._roformer_rs", frozen)]
pub struct RopeScaling {
    spec: RopeSpec,
}

#[pymethods]
impl RopeScaling {
    /// Reads the schedule from the text of a `config.json`.
    #[staticmethod]
    fn from_config_json(text: &str) -> PyResult<Self> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| value_error(format!("config.json is not JSON: {e}")))?;
        let spec = RopeSpec::from_hf_config(&value).map_err(errors::rope_config)?;
        Ok(RopeScaling { spec })
    }

    /// transformers' `rope_type`.
    #[getter]
    fn rope_type(&self) -> &'static str {
        self.spec.scaling.name()
    }

    /// Features per head.
    #[getter]
    fn head_dim(&self) -> usize {
        self.spec.head_dim
    }

    /// Rotated features, `head_dim * partial_rotary_factor`.
    #[getter]
    fn dim(&self) -> usize {
        self.spec.dim
    }

    /// The frequency base, `rope_theta`.
    #[getter]
    fn base(&self) -> f64 {
        self.spec.base
    }

    /// The inverse frequencies at `seq_len` (dynamic NTK and LongRoPE depend on it).
    #[pyo3(signature = (seq_len = None))]
    fn inv_freq(&self, seq_len: Option<usize>) -> PyResult<Vec<f64>> {
        Ok(self.spec.freqs(seq_len).map_err(errors::rope)?.inv_freq)
    }

    /// The factor on every cos and sin at `seq_len`.
    #[pyo3(signature = (seq_len = None))]
    fn attention_factor(&self, seq_len: Option<usize>) -> PyResult<f64> {
        Ok(self
            .spec
            .freqs(seq_len)
            .map_err(errors::rope)?
            .attention_factor)
    }

    /// `(cos, sin)`, float32 `[batch, seq, 2 * pairs]` in the half layout, for integer
    /// `position_ids` `[batch, seq]`: what transformers' rotary embedding module returns (the
    /// angles in f64, each value rounded once). The sequence length the schedule sees is
    /// `max(position_ids) + 1`, as transformers' dynamic update reads it.
    fn cos_sin<'py>(
        &self,
        py: Python<'py>,
        position_ids: PyReadonlyArray2<'py, i64>,
    ) -> PyResult<(Table<'py>, Table<'py>)> {
        let ids = position_ids.as_array();
        if let Some(bad) = ids.iter().find(|&&p| p < 0) {
            return Err(value_error(format!("position_ids must be >= 0, got {bad}")));
        }
        let seq_len = ids.iter().max().map(|&m| m as usize + 1);
        let freqs = self.spec.freqs(seq_len).map_err(errors::rope)?;
        let (b, s) = ids.dim();
        let pairs = freqs.inv_freq.len();
        let (cos, sin) = (
            PyArray3::<f32>::zeros(py, [b, s, 2 * pairs], false),
            PyArray3::<f32>::zeros(py, [b, s, 2 * pairs], false),
        );
        {
            let (mut c, mut sn) = (cos.readwrite(), sin.readwrite());
            let (mut c, mut sn) = (c.as_array_mut(), sn.as_array_mut());
            for ((bi, si), &p) in ids.indexed_iter() {
                for (i, w) in freqs.inv_freq.iter().enumerate() {
                    let angle = p as f64 * w;
                    let (cv, sv) = (
                        (angle.cos() * freqs.attention_factor) as f32,
                        (angle.sin() * freqs.attention_factor) as f32,
                    );
                    for j in [i, i + pairs] {
                        c[[bi, si, j]] = cv;
                        sn[[bi, si, j]] = sv;
                    }
                }
            }
        }
        Ok((cos, sin))
    }
}
