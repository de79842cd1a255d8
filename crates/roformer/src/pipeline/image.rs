//! Images through a vision model: classification (labels with softmax scores) and embeddings
//! (the pooled CLS token, or the mean patch token), one way in for the CLI and the server.
//!
//! ```text
//! bytes --decode (caps on bytes and pixels, images::decode)--> [c, h, w] u8
//!       --preprocess (preprocessor_config.json: channels, rescale, resize, normalise)--> f32
//!       --model--> logits [b, labels] -> softmax -> the k best (label, score) per image
//!               or [b, hidden]: pooler_output (Cls) or the mean patch token (Mean)
//! ```
//!
//! A batch is images of one size stacked into `[b, c, h, w]`: a processor without a resize
//! keeps each image's size, and the patch grid follows it, so images of different sizes run
//! in different batches (there is no padding, so an image's answer does not depend on its
//! batch beyond the products' rounding). Every output is checked for NaN and infinity.

use candle_core::{DType, Device, Tensor};

use crate::error::ModelError;
use crate::images::decode::{decode_image, DecodeLimits};
use crate::images::error::{DecodeError, ImageError};
use crate::images::planes::{Channels, Planes};
use crate::images::processor::ImageProcessor;
use crate::images::tensor::image_tensor;
use crate::mode::Mode;
use crate::pipeline::embed::{l2_normalized, Pooling};
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
/// As [`classify_images`].
pub fn classify_image(
    model: &VisionForImageClassification,
    pixels: &Tensor,
    k: usize,
) -> Result<Vec<LabelScore>, ImagePipelineError> {
    first(classify_images(model, pixels, k)?)
}

/// The `k` most probable labels of each image of `pixels` (`[b, c, h, w]`), best first:
/// `softmax(logits)` over the model's labels, one list per image in batch order.
///
/// # Errors
/// [`ImagePipelineError::TooManyPatches`]; the model's errors;
/// [`ImagePipelineError::NonFinite`] when any image's logits are not finite.
pub fn classify_images(
    model: &VisionForImageClassification,
    pixels: &Tensor,
    k: usize,
) -> Result<Vec<Vec<LabelScore>>, ImagePipelineError> {
    check_patches(pixels, model.config().patch_size)?;
    let logits = model.forward(pixels, model.plan(Mode::Inference))?; // [b, labels]
    let logits: Vec<Vec<f32>> = logits.to_dtype(DType::F32)?.to_vec2()?;
    logits
        .iter()
        .map(|row| {
            if row.iter().any(|v| !v.is_finite()) {
                return Err(ImagePipelineError::NonFinite);
            }
            Ok(top_k(&softmax(row), k)
                .into_iter()
                .map(|(i, score)| LabelScore {
                    label: model.config().label(i as usize),
                    score: score as f32,
                })
                .collect())
        })
        .collect()
}

/// The embedding of the image `pixels` (`[1, c, h, w]`): the model's `pooler_output`, the
/// normed CLS token, `[hidden]`, not normalised.
///
/// # Errors
/// As [`embed_images`].
pub fn embed_image(model: &VisionModel, pixels: &Tensor) -> Result<Vec<f32>, ImagePipelineError> {
    first(embed_images(model, pixels, Pooling::Cls, false)?)
}

/// One vector `[hidden]` per image of `pixels` (`[b, c, h, w]`), in batch order, pooled from
/// the normed hidden states `last_hidden_state` `[b, 1 + R + patches, hidden]`:
/// - [`Pooling::Cls`]: the CLS token, the model's `pooler_output`;
/// - [`Pooling::Mean`]: the mean of the patch tokens, the CLS and the `R` register tokens
///   left out (the second half of the classifier's features).
///
/// With `normalize`, each vector is divided by its L2 norm (in f64; a zero vector stays zero).
///
/// # Errors
/// [`ImagePipelineError::TooManyPatches`]; the model's errors;
/// [`ImagePipelineError::NonFinite`] when any image's vector is not finite.
pub fn embed_images(
    model: &VisionModel,
    pixels: &Tensor,
    pooling: Pooling,
    normalize: bool,
) -> Result<Vec<Vec<f32>>, ImagePipelineError> {
    check_patches(pixels, model.config().patch_size)?;
    let out = model.forward(pixels, model.plan(Mode::Inference))?;
    let pooled = match pooling {
        Pooling::Cls => out.pooler_output,
        Pooling::Mean => {
            let prefix = model.config().prefix_tokens();
            let (_, t, _) = out.last_hidden_state.dims3()?;
            out.last_hidden_state
                .narrow(1, prefix, t - prefix)?
                .mean(1)? // [b, hidden]
        }
    };
    let vectors: Vec<Vec<f32>> = pooled.to_dtype(DType::F32)?.to_vec2()?;
    vectors
        .into_iter()
        .map(|v| {
            if v.iter().any(|x| !x.is_finite()) {
                Err(ImagePipelineError::NonFinite)
            } else if normalize {
                Ok(l2_normalized(v))
            } else {
                Ok(v)
            }
        })
        .collect()
}

/// The answer of a batch of one.
fn first<T>(answers: Vec<T>) -> Result<T, ImagePipelineError> {
    answers
        .into_iter()
        .next()
        .ok_or_else(|| ImagePipelineError::Vision(VisionError::Input("the batch is empty".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A batch of three 8 x 12 images answers as the three images alone do: the same labels in
    /// the same order, scores and vectors within 1e-5 (the products' blocking may round a
    /// batch differently).
    #[test]
    fn a_batch_answers_as_its_images_alone() {
        use crate::vision::config::PositionKind;
        use crate::vision::tests::{classifier, random, tiny};
        let cfg = tiny(PositionKind::RopeAxial, "");
        let (model, _vars) = classifier(&cfg, DType::F32, 7);
        let pixels = random(&[3, 2, 8, 12], 11);
        let batched = classify_images(&model, &pixels, 3).unwrap();
        for pooling in [Pooling::Cls, Pooling::Mean] {
            let vectors = embed_images(model.model(), &pixels, pooling, false).unwrap();
            for (i, vector) in vectors.iter().enumerate() {
                let one = pixels.narrow(0, i, 1).unwrap();
                let alone = embed_images(model.model(), &one, pooling, false).unwrap();
                let diff = test_support::max_abs_diff(vector, &alone[0]);
                assert!(diff < 1e-5, "{pooling:?} image {i}: {diff}");
            }
        }
        for (i, labels) in batched.iter().enumerate() {
            let one = pixels.narrow(0, i, 1).unwrap();
            let alone = classify_image(&model, &one, 3).unwrap();
            let names = |l: &[LabelScore]| l.iter().map(|s| s.label.clone()).collect::<Vec<_>>();
            assert_eq!(names(labels), names(&alone), "image {i}");
            for (a, b) in labels.iter().zip(&alone) {
                assert!((a.score - b.score).abs() < 1e-5, "image {i}: {a:?} {b:?}");
            }
        }
    }

    /// Mean pooling is not the CLS token, and `normalize` gives unit vectors pointing the same
    /// way.
    #[test]
    fn mean_pooling_and_normalising() {
        use crate::vision::config::PositionKind;
        use crate::vision::tests::{classifier, random, tiny};
        let cfg = tiny(PositionKind::RopeAxial, "");
        let (model, _vars) = classifier(&cfg, DType::F32, 3);
        let pixels = random(&[1, 2, 8, 12], 5);
        let cls = embed_image(model.model(), &pixels).unwrap();
        let mean = embed_images(model.model(), &pixels, Pooling::Mean, false).unwrap();
        assert!(test_support::max_abs_diff(&cls, &mean[0]) > 1e-3);
        let unit = embed_images(model.model(), &pixels, Pooling::Mean, true).unwrap();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm(&unit[0]) - 1.0).abs() < 1e-6);
        let scaled: Vec<f32> = mean[0]
            .iter()
            .map(|x| (f64::from(*x) / norm(&mean[0])) as f32)
            .collect();
        assert!(test_support::max_abs_diff(&scaled, &unit[0]) < 1e-6);
    }
}
