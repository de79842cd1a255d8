//! Images through a vision model: classification (labels with softmax scores) and embeddings
//! (the pooled CLS token), one way in for the CLI and the server.
//!
//! ```text
//! bytes --decode (caps on bytes and pixels, images::decode)--> [c, h, w] u8
//!       --preprocess (preprocessor_config.json: channels, rescale, resize, normalise)--> f32
//!       --model--> logits [labels] -> softmax -> the k best (label, score)
//!               or pooler_output [hidden]
//! ```
//!
//! Each image runs as its own batch of one: a processor without a resize keeps each image's
//! size, and the patch grid follows it. Every output is checked for NaN and infinity.

use candle_core::{Device, Tensor};

use crate::error::ModelError;
use crate::images::decode::{decode_image, DecodeLimits};
use crate::images::error::{DecodeError, ImageError};
use crate::images::planes::{Channels, Planes};
use crate::images::processor::ImageProcessor;
use crate::images::tensor::image_tensor;
use crate::mode::Mode;
use crate::pipeline::scores::{softmax, top_k};
use crate::vision::{VisionError, VisionForImageClassification, VisionModel};

/// What can go wrong between an image's bytes and an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImagePipelineError {
    /// The bytes are not an image this pipeline reads, or exceed its caps.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The decoded image cannot be preprocessed (no pixels, channels, statistics).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The model refused the input (an image smaller than a patch) or failed.
    #[error(transparent)]
    Vision(#[from] VisionError),
    /// The image, as preprocessed, makes more patches than [`MAX_PATCHES`].
    #[error(
        "the image makes {patches} patches of {patch} x {patch} pixels; at most {MAX_PATCHES} \
         are run (resize it, or give the model a preprocessor_config.json that does)"
    )]
    TooManyPatches {
        /// The patches it would make.
        patches: usize,
        /// The model's patch side.
        patch: usize,
    },
    /// The model produced a NaN or an infinity.
    #[error("the model's output holds a non-finite value")]
    NonFinite,
}

/// The most patches one image may make (a 1024 x 1024 image at patch 16, 256 x 256 at patch
/// 4): attention over `n` tokens holds `n^2` scores a head, so memory is bounded by this, not
/// by what a processor without a resize lets through.
pub const MAX_PATCHES: usize = 4096;

/// Refuses pixels `[1, c, h, w]` that make more than [`MAX_PATCHES`] patches of side `patch`.
fn check_patches(pixels: &Tensor, patch: usize) -> Result<(), ImagePipelineError> {
    let dims = pixels.dims();
    let (h, w) = (
        dims[dims.len().saturating_sub(2)],
        dims[dims.len().saturating_sub(1)],
    );
    let patches = (h / patch.max(1)).saturating_mul(w / patch.max(1));
    if patches > MAX_PATCHES {
        return Err(ImagePipelineError::TooManyPatches { patches, patch });
    }
    Ok(())
}

impl From<candle_core::Error> for ImagePipelineError {
    fn from(e: candle_core::Error) -> Self {
        ImagePipelineError::Vision(VisionError::from(ModelError::Candle(e)))
    }
}

/// A label and its softmax probability.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LabelScore {
    /// The label (`id2label`, or `LABEL_i`).
    pub label: String,
    /// Its probability.
    pub score: f32,
}

/// `bytes` decoded under `limits` and preprocessed for a model of `channels` channels:
/// `[1, channels, h, w]` pixel values.
///
/// # Errors
/// [`ImagePipelineError::Decode`] and [`ImagePipelineError::Image`].
pub fn pixel_values(
    bytes: &[u8],
    processor: &ImageProcessor,
    channels: usize,
    limits: &DecodeLimits,
) -> Result<Tensor, ImagePipelineError> {
    let image = decode_image(bytes, limits)?;
    preprocessed(&image, processor, channels)
}

/// A decoded image preprocessed for a model of `channels` channels: `[1, channels, h, w]`.
/// A grey image is repeated into RGB and an RGB one averaged into grey (ITU-R BT.601 weights,
/// `Planes::with_channels`) when the model wants the other; the processor's own channel
/// setting comes after.
///
/// # Errors
/// [`ImagePipelineError::Image`], also for a model of neither 1 nor 3 channels.
pub fn preprocessed(
    image: &Planes<u8>,
    processor: &ImageProcessor,
    channels: usize,
) -> Result<Tensor, ImagePipelineError> {
    let wanted = match channels {
        1 => Channels::Grey,
        3 => Channels::Rgb,
        _ => {
            return Err(ImageError::Channels {
                found: channels,
                expected: "a model of 1 or 3 channels",
            }
            .into())
        }
    };
    let x = processor.preprocess(&image.with_channels(wanted)?)?;
    Ok(image_tensor(&x, &Device::Cpu)?)
}

/// The `k` most probable labels of the image `pixels` (`[1, c, h, w]`), best first:
/// `softmax(logits)` over the model's labels.
///
/// # Errors
/// [`ImagePipelineError::TooManyPatches`]; the model's errors;
/// [`ImagePipelineError::NonFinite`].
pub fn classify_image(
    model: &VisionForImageClassification,
    pixels: &Tensor,
    k: usize,
) -> Result<Vec<LabelScore>, ImagePipelineError> {
    check_patches(pixels, model.config().patch_size)?;
    let logits = model.forward(pixels, model.plan(Mode::Inference))?;
    let logits: Vec<f32> = logits.flatten_all()?.to_vec1()?;
    if logits.iter().any(|v| !v.is_finite()) {
        return Err(ImagePipelineError::NonFinite);
    }
    let probs = softmax(&logits);
    Ok(top_k(&probs, k)
        .into_iter()
        .map(|(i, score)| LabelScore {
            label: model.config().label(i as usize),
            score: score as f32,
        })
        .collect())
}

/// The embedding of the image `pixels` (`[1, c, h, w]`): the model's `pooler_output`, the
/// normed CLS token, `[hidden]`.
///
/// # Errors
/// [`ImagePipelineError::TooManyPatches`]; the model's errors;
/// [`ImagePipelineError::NonFinite`].
pub fn embed_image(model: &VisionModel, pixels: &Tensor) -> Result<Vec<f32>, ImagePipelineError> {
    check_patches(pixels, model.config().patch_size)?;
    let out = model.forward(pixels, model.plan(Mode::Inference))?;
    let vector: Vec<f32> = out.pooler_output.flatten_all()?.to_vec1()?;
    if vector.iter().any(|v| !v.is_finite()) {
        return Err(ImagePipelineError::NonFinite);
    }
    Ok(vector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;

    #[test]
    fn images_past_the_patch_cap_are_refused_before_the_model_runs() {
        let fits = Tensor::zeros((1, 1, 256, 256), DType::F32, &Device::Cpu).unwrap();
        assert!(check_patches(&fits, 4).is_ok()); // 64 x 64 = 4096
        let over = Tensor::zeros((1, 1, 256, 260), DType::F32, &Device::Cpu).unwrap();
        match check_patches(&over, 4) {
            Err(ImagePipelineError::TooManyPatches { patches, patch }) => {
                assert_eq!((patches, patch), (64 * 65, 4));
            }
            other => panic!("{other:?}"),
        }
    }
}
