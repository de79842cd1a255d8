//! The loaded model: its tokenizer, its encoder and, if it has one, its head (masked LM or
//! sequence classifier), and the routes it can serve.

use candle_core::Device;
use roformer::{
    HeadModel, ModelDir, Precision, RoFormerForMaskedLM, RoFormerForSequenceClassification,
    RoFormerModel, RoFormerTokenizer,
};

use crate::error::ServeError;

/// The model with the head its checkpoint holds.
#[derive(Debug)]
pub enum Head {
    /// A masked LM (`cls.predictions.*` tensors): embeddings and fill-mask.
    MaskedLm(RoFormerForMaskedLM),
    /// A sequence classifier (`classifier.*` tensors): embeddings and `/predict`.
    Classifier(RoFormerForSequenceClassification),
    /// A bare encoder: embeddings only.
    Encoder(RoFormerModel),
}

/// Everything the routes and the batcher need of the model. Shared read-only.
#[derive(Debug)]
pub struct Backend {
    /// How the model is named in `/info` and `/v1/embeddings` (its directory, or the
    /// built-in model's name).
    pub model_id: String,
    /// The tokenizer.
    pub tokenizer: RoFormerTokenizer,
    /// The model.
    pub head: Head,
    /// Label names of a classifier (empty otherwise).
    pub labels: Vec<String>,
    /// The precision the encoder runs in.
    pub precision: Precision,
    /// The config's `max_position_embeddings` (the default input limit).
    pub max_position_embeddings: usize,
}

impl Backend {
    /// Loads the model of `dir` with the head its checkpoint holds, in f32 on the CPU, and sets
    /// the encoder's precision (bf16 only where the CPU has a native bf16 dot product).
    ///
    /// # Errors
    /// [`ServeError::Model`] when the checkpoint does not load.
    pub fn load(
        model_id: String,
        dir: &ModelDir,
        tokenizer: RoFormerTokenizer,
        precision: Precision,
    ) -> Result<Backend, ServeError> {
        let precision = precision.effective();
        let err = |source| ServeError::Model {
            model: model_id.clone(),
            source,
        };
        let device = Device::Cpu;
        let is_classifier = dir
            .checkpoint
            .tensors()
            .keys()
            .any(|k| k.starts_with("classifier."));
        let head = if dir.checkpoint.has_mlm_head() {
            Head::MaskedLm(dir.load(&device, precision).map_err(err)?.model)
        } else if is_classifier {
            Head::Classifier(dir.load(&device, precision).map_err(err)?.model)
        } else {
            Head::Encoder(dir.load(&device, precision).map_err(err)?.model)
        };
        let labels = match &head {
            Head::Classifier(_) => roformer::pipeline::labels(&dir.config),
            _ => Vec::new(),
        };
        tokenizer.warm_up();
        Ok(Backend {
            model_id,
            tokenizer,
            head,
            labels,
            precision,
            max_position_embeddings: dir.config.max_position_embeddings,
        })
    }

    /// The encoder (for embeddings, whatever the head).
    pub fn encoder(&self) -> &RoFormerModel {
        match &self.head {
            Head::MaskedLm(m) => m.roformer(),
            Head::Classifier(m) => m.roformer(),
            Head::Encoder(m) => m,
        }
    }

    /// The masked LM, if the model is one.
    pub fn masked_lm(&self) -> Option<&RoFormerForMaskedLM> {
        match &self.head {
            Head::MaskedLm(m) => Some(m),
            _ => None,
        }
    }

    /// The classifier, if the model is one.
    pub fn classifier(&self) -> Option<&RoFormerForSequenceClassification> {
        match &self.head {
            Head::Classifier(m) => Some(m),
            _ => None,
        }
    }

    /// The pad token's id.
    pub fn pad_id(&self) -> u32 {
        self.tokenizer.special_tokens().pad
    }
}
