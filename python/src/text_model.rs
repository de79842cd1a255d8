//! `NativeModel`: the native side of `roformer_rs.Model`, a RoFormer checkpoint and its
//! tokenizer, with the library's pipelines (fill-mask, embed, tokenize) and the raw forward
//! pass.

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use roformer::pipeline::{self, MaskedLm, Pooling, Prediction};
use roformer::{HeadModel, ModelDir, Precision, RoFormerModel, RoFormerTokenizer};
use roformer_builtin::poetry;

use crate::arrays::to_numpy;
use crate::errors::{self, not_found, value_error};

/// The network and its tokenizer: the library's [`MaskedLm`] when the checkpoint has the
/// masked-LM head.
enum Network {
    /// `RoFormerForMaskedLM` with its tokenizer, the library's front door.
    MaskedLm(MaskedLm),
    /// The bare encoder and its tokenizer.
    Encoder(RoFormerModel, RoFormerTokenizer),
}

impl Network {
    /// The encoder.
    fn encoder(&self) -> &RoFormerModel {
        match self {
            Network::MaskedLm(m) => m.model().roformer(),
            Network::Encoder(m, _) => m,
        }
    }

    /// The tokenizer.
    fn tokenizer(&self) -> &RoFormerTokenizer {
        match self {
            Network::MaskedLm(m) => m.tokenizer(),
            Network::Encoder(_, t) => t,
        }
    }
}

/// One fill-mask candidate: `(score, token id, token text, filled text)`, the texts `None`
/// for an id past the vocabulary (a `vocab.txt` smaller than the model's vocabulary).
type Candidate = (f64, u32, Option<String>, Option<String>);

/// An encoding: `(ids, token texts, char offsets, type ids, attention mask)`.
type Tokenized = (
    Vec<u32>,
    Vec<String>,
    Vec<(usize, usize)>,
    Vec<u32>,
    Vec<u32>,
);

/// A RoFormer checkpoint, its tokenizer and the precision its products run in.
#[pyclass(name = "NativeModel", module = "roformer_rs._roformer_rs", frozen)]
pub struct NativeModel {
    network: Network,
    precision: Precision,
    name: String,
}

/// `f32` or `bf16` (bf16 only where the CPU has a native bf16 dot product; f32 elsewhere).
pub(crate) fn precision(name: &str) -> PyResult<Precision> {
    match name {
        "f32" => Ok(Precision::F32),
        "bf16" => Ok(Precision::Bf16.effective()),
        other => Err(value_error(format!(
            "precision must be 'f32' or 'bf16', got {other:?}"
        ))),
    }
}

impl NativeModel {
    /// Loads the network of `dir` in `precision`, with `tokenizer`.
    fn load(
        dir: &ModelDir,
        tokenizer: RoFormerTokenizer,
        precision: Precision,
        name: String,
    ) -> PyResult<NativeModel> {
        let network = if dir.checkpoint.has_mlm_head() {
            Network::MaskedLm(MaskedLm::new(dir, tokenizer, precision).map_err(errors::pipeline)?)
        } else {
            let encoder = dir.load(&Device::Cpu, precision).map_err(errors::model)?;
            Network::Encoder(encoder.model, tokenizer)
        };
        Ok(NativeModel {
            network,
            precision,
            name,
        })
    }

    /// The masked LM, or a `ValueError` saying the checkpoint has no head.
    fn masked_lm(&self) -> PyResult<&MaskedLm> {
        match &self.network {
            Network::MaskedLm(m) => Ok(m),
            Network::Encoder(..) => Err(value_error(format!(
                "{} has no masked-LM head (no cls.predictions.* tensors): fill_mask needs a \
                 checkpoint saved from RoFormerForMaskedLM",
                self.name
            ))),
        }
    }
}

/// An `[b, t]` integer array as an i64 tensor.
fn ids_tensor(a: &PyReadonlyArray2<'_, i64>) -> PyResult<Tensor> {
    let view = a.as_array();
    let (b, t) = view.dim();
    let data: Vec<i64> = view.iter().copied().collect();
    Tensor::from_vec(data, (b, t), &Device::Cpu).map_err(|e| errors::model(e.into()))
}

#[pymethods]
impl NativeModel {
    /// Loads `config.json`, the weights and `vocab.txt` of a Hugging Face RoFormer directory.
    #[staticmethod]
    #[pyo3(signature = (dir, precision = "f32"))]
    fn from_pretrained(py: Python<'_>, dir: PathBuf, precision: &str) -> PyResult<Self> {
        let precision = self::precision(precision)?;
        if !dir.is_dir() {
            return Err(not_found(format!("{}: no such directory", dir.display())));
        }
        py.detach(|| {
            let tokenizer = RoFormerTokenizer::from_dir(&dir).map_err(errors::tokenizer)?;
            let model_dir = ModelDir::open(&dir).map_err(errors::model)?;
            NativeModel::load(&model_dir, tokenizer, precision, dir.display().to_string())
        })
    }

    /// The built-in poetry model.
    #[staticmethod]
    #[pyo3(signature = (precision = "f32"))]
    fn builtin(py: Python<'_>, precision: &str) -> PyResult<Self> {
        let precision = self::precision(precision)?;
        py.detach(|| {
            let tokenizer = poetry::tokenizer().map_err(errors::tokenizer)?;
            let dir = poetry::model_dir().map_err(errors::model)?;
            NativeModel::load(&dir, tokenizer, precision, poetry::NAME.to_owned())
        })
    }

    /// Where the model came from.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The precision the products run in (`bf16` falls back to `f32` on CPUs without a native
    /// bf16 dot product).
    #[getter]
    fn precision(&self) -> &'static str {
        self.precision.name()
    }

    /// The hidden size.
    #[getter]
    fn hidden_size(&self) -> usize {
        self.network.encoder().config().hidden_size
    }

    /// Whether the checkpoint has a masked-LM head.
    #[getter]
    fn has_mlm_head(&self) -> bool {
        matches!(self.network, Network::MaskedLm(_))
    }

    /// `{"last_hidden_state": [b, t, hidden]}`, plus `"logits": [b, t, vocab]` with a
    /// masked-LM head.
    #[pyo3(signature = (input_ids, attention_mask = None, token_type_ids = None))]
    fn forward<'py>(
        &self,
        py: Python<'py>,
        input_ids: PyReadonlyArray2<'py, i64>,
        attention_mask: Option<PyReadonlyArray2<'py, i64>>,
        token_type_ids: Option<PyReadonlyArray2<'py, i64>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let ids = ids_tensor(&input_ids)?;
        let mask = attention_mask.as_ref().map(ids_tensor).transpose()?;
        let types = token_type_ids.as_ref().map(ids_tensor).transpose()?;
        let (hidden, logits) = py
            .detach(|| -> Result<_, roformer::ModelError> {
                let encoder = self.network.encoder();
                let hidden = encoder.forward(&ids, types.as_ref(), mask.as_ref(), None)?;
                let logits = match &self.network {
                    Network::MaskedLm(m) => Some(
                        m.model()
                            .head_forward(&hidden, encoder.plan(roformer::Mode::Inference))?,
                    ),
                    Network::Encoder(..) => None,
                };
                Ok((hidden, logits))
            })
            .map_err(errors::model)?;
        let out = PyDict::new(py);
        out.set_item("last_hidden_state", to_numpy(py, &hidden)?)?;
        if let Some(logits) = logits {
            out.set_item("logits", to_numpy(py, &logits)?)?;
        }
        Ok(out)
    }

    /// The `top_k` candidates of each mask of `text` (the library's [`MaskedLm::fill_mask`]):
    /// one list per mask of `(score, token id, token text, filled text)`.
    #[pyo3(signature = (text, top_k = 5))]
    fn fill_mask(&self, py: Python<'_>, text: &str, top_k: usize) -> PyResult<Vec<Vec<Candidate>>> {
        if top_k == 0 {
            return Err(value_error("top_k must be at least 1"));
        }
        let lm = self.masked_lm()?;
        let filled = py
            .detach(|| lm.fill_mask(text, top_k))
            .map_err(errors::pipeline)?;
        let candidate = |p: Prediction| (p.probability, p.id, p.token, p.sequence);
        Ok(filled
            .into_iter()
            .map(|mask| mask.predictions.into_iter().map(candidate).collect())
            .collect())
    }

    /// One vector per text, `[n, hidden]` float32: `mean` or `cls` pooling, L2-normalised with
    /// `normalize`.
    #[pyo3(signature = (texts, pooling = "mean", normalize = true))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        pooling: &str,
        normalize: bool,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let pooling = match pooling {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            other => {
                return Err(value_error(format!(
                    "pooling must be 'mean' or 'cls', got {other:?}"
                )))
            }
        };
        let hidden = self.hidden_size();
        let limit = self.network.encoder().config().max_position_embeddings;
        let vectors = py.detach(|| -> PyResult<Vec<f32>> {
            let mut encodings = Vec::with_capacity(texts.len());
            for text in &texts {
                let e = (self.network.tokenizer())
                    .encode_truncated(text, None, limit)
                    .map_err(errors::tokenizer)?;
                encodings.push(e);
            }
            let batch: Vec<_> = encodings.iter().collect();
            let pad = self.network.tokenizer().special_tokens().pad;
            let pooled = pipeline::embed(self.network.encoder(), &batch, pooling, normalize, pad)
                .map_err(errors::pipeline)?;
            let mut flat = Vec::with_capacity(texts.len() * hidden);
            for (i, v) in pooled.into_iter().enumerate() {
                let v = v.map_err(|bad| {
                    pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "text {i}: the hidden states are not finite ({} at token {}, dim {})",
                        bad.value, bad.token, bad.dim
                    ))
                })?;
                flat.extend(v);
            }
            Ok(flat)
        })?;
        numpy::PyArray1::from_vec(py, vectors).reshape([texts.len(), hidden])
    }

    /// `text` as `[CLS] text [SEP]`: ids, token texts, char offsets, type ids and mask.
    fn tokenize(&self, text: &str) -> Tokenized {
        let e = self.network.tokenizer().encode(text);
        (e.ids, e.tokens, e.offsets, e.type_ids, e.attention_mask)
    }
}
