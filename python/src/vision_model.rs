//! `VisionModel`: the native side of `roformer_rs.VisionModel`, a ViT with 2D RoPE (DINOv3's
//! architecture) and its image processor, with the library's image pipelines.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use numpy::{
    PyArray2, PyArrayMethods, PyReadonlyArray4, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use roformer::images::processor::ImageProcessor;
use roformer::images::{DecodeLimits, Planes};
use roformer::pipeline::image::{self, ImagePipelineError};
use roformer::vision::{
    VisionError, VisionForImageClassification, VisionModel as Vit, VisionModelDir,
};
use roformer::Mode;
use roformer_builtin::fashion;

use crate::arrays::to_numpy;
use crate::errors::{self, not_found, value_error};

/// The network: a classifier (whose backbone embeds) or a bare backbone.
enum Network {
    /// `Dinov3ViTForImageClassification`-like: backbone and head.
    Classifier(VisionForImageClassification),
    /// The backbone alone.
    Backbone(Vit),
}

impl Network {
    /// The backbone.
    fn backbone(&self) -> &Vit {
        match self {
            Network::Classifier(m) => m.model(),
            Network::Backbone(m) => m,
        }
    }
}

/// One image from Python: encoded bytes (PNG, JPEG) or uint8 pixels `[h, w]` or `[h, w, c]`.
#[derive(FromPyObject)]
pub enum ImageInput<'py> {
    /// An encoded file's bytes.
    Encoded(Bound<'py, PyBytes>),
    /// Decoded pixels.
    Pixels(PyReadonlyArrayDyn<'py, u8>),
}

/// A vision checkpoint and its image processor.
#[pyclass(
    name = "NativeVisionModel",
    module = "roformer_rs._roformer_rs",
    frozen
)]
pub struct NativeVisionModel {
    network: Network,
    processor: ImageProcessor,
    name: String,
}

impl NativeVisionModel {
    /// Loads the classifier when the checkpoint has one, else the backbone.
    fn load(dir: &VisionModelDir, processor: ImageProcessor, name: String) -> PyResult<Self> {
        let device = Device::Cpu;
        let network = if dir.has_classifier() {
            let loaded = dir.load_classifier(DType::F32, &device);
            Network::Classifier(loaded.map_err(errors::vision)?.model)
        } else {
            Network::Backbone(
                dir.load_model(DType::F32, &device)
                    .map_err(errors::vision)?
                    .model,
            )
        };
        Ok(NativeVisionModel {
            network,
            processor,
            name,
        })
    }

    /// An image's `[1, c, h, w]` pixel values, preprocessed for the model.
    fn pixels(&self, image: &OwnedImage) -> Result<Tensor, ImagePipelineError> {
        let channels = self.network.backbone().config().num_channels;
        match image {
            OwnedImage::Encoded(bytes) => {
                image::pixel_values(bytes, &self.processor, channels, &DecodeLimits::default())
            }
            OwnedImage::Planes(planes) => image::preprocessed(planes, &self.processor, channels),
        }
    }
}

/// An image taken out of its Python object, so that decoding and preprocessing run without
/// the GIL.
enum OwnedImage {
    /// An encoded file's bytes.
    Encoded(Vec<u8>),
    /// Decoded pixels.
    Planes(Planes<u8>),
}

/// The images' contents, copied out of Python (a `ValueError` for arrays of a wrong shape).
fn owned(images: &[ImageInput<'_>]) -> PyResult<Vec<OwnedImage>> {
    images
        .iter()
        .map(|i| match i {
            ImageInput::Encoded(b) => Ok(OwnedImage::Encoded(b.as_bytes().to_vec())),
            ImageInput::Pixels(a) => planes(a).map(OwnedImage::Planes),
        })
        .collect()
}

/// `[h, w]` (grey) or `[h, w, 1 or 3]` uint8 pixels as `[c, h, w]` planes.
fn planes(a: &PyReadonlyArrayDyn<'_, u8>) -> PyResult<Planes<u8>> {
    let view = a.as_array();
    let (h, w, c) = match *a.shape() {
        [h, w] => (h, w, 1),
        [h, w, c] if c == 1 || c == 3 => (h, w, c),
        _ => {
            return Err(value_error(format!(
                "an image array must be [h, w] or [h, w, 1 or 3] uint8, got shape {:?}",
                a.shape()
            )))
        }
    };
    let mut data = Vec::with_capacity(c * h * w);
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                let v = if view.ndim() == 2 {
                    view[[y, x]]
                } else {
                    view[[y, x, ch]]
                };
                data.push(v);
            }
        }
    }
    Planes::new(c, h, w, data).map_err(|e| value_error(e.to_string()))
}

#[pymethods]
impl NativeVisionModel {
    /// Loads `config.json`, `model.safetensors` and `preprocessor_config.json` (DINOv3's
    /// defaults without one) of a Hugging Face DINOv3 ViT directory.
    #[staticmethod]
    fn from_pretrained(py: Python<'_>, dir: PathBuf) -> PyResult<Self> {
        if !dir.is_dir() {
            return Err(not_found(format!("{}: no such directory", dir.display())));
        }
        py.detach(|| {
            let path = dir.join("preprocessor_config.json");
            let processor = if path.exists() {
                ImageProcessor::from_path(&path).map_err(errors::processor)?
            } else {
                ImageProcessor::default()
            };
            let model_dir = VisionModelDir::open(&dir).map_err(errors::vision)?;
            NativeVisionModel::load(&model_dir, processor, dir.display().to_string())
        })
    }

    /// The built-in Fashion-MNIST model.
    #[staticmethod]
    fn builtin(py: Python<'_>) -> PyResult<Self> {
        py.detach(|| {
            let processor = fashion::processor().map_err(errors::processor)?;
            let dir = fashion::model_dir().map_err(errors::vision)?;
            NativeVisionModel::load(&dir, processor, fashion::NAME.to_owned())
        })
    }

    /// Where the model came from.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The embedding size.
    #[getter]
    fn hidden_size(&self) -> usize {
        self.network.backbone().config().hidden_size
    }

    /// The labels of the classifier, in id order (empty without one).
    #[getter]
    fn labels(&self) -> Vec<String> {
        match &self.network {
            Network::Classifier(m) => {
                let config = m.config();
                (0..config.num_labels).map(|i| config.label(i)).collect()
            }
            Network::Backbone(_) => Vec::new(),
        }
    }

    /// `{"last_hidden_state": [b, tokens, hidden], "pooler_output": [b, hidden]}` (and
    /// `"logits": [b, labels]` with a classifier) for preprocessed `pixel_values`
    /// `[b, c, h, w]`, as transformers' DINOv3 models return them.
    fn forward<'py>(
        &self,
        py: Python<'py>,
        pixel_values: PyReadonlyArray4<'py, f32>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let view = pixel_values.as_array();
        let dims = view.dim();
        let data: Vec<f32> = view.iter().copied().collect();
        let pixels =
            Tensor::from_vec(data, dims, &Device::Cpu).map_err(|e| errors::model(e.into()))?;
        let vit = self.network.backbone();
        let (out, logits) = py
            .detach(|| -> Result<_, VisionError> {
                let out = vit.forward(&pixels, vit.plan(Mode::Inference))?;
                let logits = match &self.network {
                    Network::Classifier(m) => Some(m.forward(&pixels, m.plan(Mode::Inference))?),
                    Network::Backbone(_) => None,
                };
                Ok((out, logits))
            })
            .map_err(errors::vision)?;
        let dict = PyDict::new(py);
        dict.set_item("last_hidden_state", to_numpy(py, &out.last_hidden_state)?)?;
        dict.set_item("pooler_output", to_numpy(py, &out.pooler_output)?)?;
        if let Some(logits) = logits {
            dict.set_item("logits", to_numpy(py, &logits)?)?;
        }
        Ok(dict)
    }

    /// One embedding per image (the normed CLS token, `pooler_output`): `[n, hidden]`.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        images: Vec<ImageInput<'py>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let images = owned(&images)?;
        let vit = self.network.backbone();
        let flat = py.detach(|| -> Result<Vec<f32>, ImagePipelineError> {
            let mut flat = Vec::new();
            for i in &images {
                flat.extend(image::embed_image(vit, &self.pixels(i)?)?);
            }
            Ok(flat)
        });
        let flat = flat.map_err(errors::image)?;
        numpy::PyArray1::from_vec(py, flat).reshape([images.len(), self.hidden_size()])
    }

    /// The `top_k` most probable labels of each image, `(label, score)`, best first.
    #[pyo3(signature = (images, top_k = 5))]
    fn classify(
        &self,
        py: Python<'_>,
        images: Vec<ImageInput<'_>>,
        top_k: usize,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        let Network::Classifier(model) = &self.network else {
            return Err(value_error(format!(
                "{} has no classifier head (no classifier.* tensors)",
                self.name
            )));
        };
        if top_k == 0 {
            return Err(value_error("top_k must be at least 1"));
        }
        let images = owned(&images)?;
        let found = py.detach(|| {
            images
                .iter()
                .map(|i| image::classify_image(model, &self.pixels(i)?, top_k))
                .collect::<Result<Vec<_>, _>>()
        });
        Ok(found
            .map_err(errors::image)?
            .into_iter()
            .map(|labels| labels.into_iter().map(|l| (l.label, l.score)).collect())
            .collect())
    }
}
