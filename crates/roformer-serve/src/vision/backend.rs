//! The loaded vision model: a classifier (`/image-classification` and `/embed_image`) or a
//! bare backbone (`/embed_image` only), with the image processor its images go through.

use candle_core::{DType, Device};
use roformer::images::processor::ImageProcessor;
use roformer::vision::{VisionForImageClassification, VisionModel, VisionModelDir};

use crate::error::ServeError;

/// The model with the head its checkpoint holds.
#[derive(Debug)]
enum VisionHead {
    /// `classifier.*` tensors: labels and embeddings.
    Classifier(VisionForImageClassification),
    /// A `DINOv3ViTModel`: embeddings only.
    Backbone(VisionModel),
}

/// Everything the image routes and their queue need of the vision model. Shared read-only.
#[derive(Debug)]
pub struct VisionBackend {
    /// How the model is named in `/info` (its directory, or the built-in model's name).
    pub model_id: String,
    /// How an image's decoded pixels become the model's input (`preprocessor_config.json`).
    pub processor: ImageProcessor,
    head: VisionHead,
}

impl VisionBackend {
    /// Loads the model of `dir` in f32 on the CPU, with its classifier head when the checkpoint
    /// holds one.
    ///
    /// # Errors
    /// [`ServeError::VisionModel`] when the checkpoint does not load.
    pub fn load(
        model_id: String,
        dir: &VisionModelDir,
        processor: ImageProcessor,
    ) -> Result<VisionBackend, ServeError> {
        let err = |source| ServeError::VisionModel {
            model: model_id.clone(),
            source,
        };
        let head = if dir.has_classifier() {
            let loaded = dir.load_classifier(DType::F32, &Device::Cpu).map_err(err)?;
            VisionHead::Classifier(loaded.model)
        } else {
            let loaded = dir.load_model(DType::F32, &Device::Cpu).map_err(err)?;
            VisionHead::Backbone(loaded.model)
        };
        Ok(VisionBackend {
            model_id,
            processor,
            head,
        })
    }

    /// The backbone (for embeddings, whatever the head).
    pub fn model(&self) -> &VisionModel {
        match &self.head {
            VisionHead::Classifier(m) => m.model(),
            VisionHead::Backbone(m) => m,
        }
    }

    /// The classifier, if the model is one.
    pub fn classifier(&self) -> Option<&VisionForImageClassification> {
        match &self.head {
            VisionHead::Classifier(m) => Some(m),
            VisionHead::Backbone(_) => None,
        }
    }

    /// The label of each class of a classifier (empty for a backbone).
    pub fn labels(&self) -> Vec<String> {
        self.classifier().map_or_else(Vec::new, |m| {
            let config = m.config();
            (0..config.num_labels).map(|i| config.label(i)).collect()
        })
    }
}
