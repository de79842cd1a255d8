//! The image queue: admitted image requests queue here, and one thread decodes, preprocesses
//! and runs them on the vision model, then answers each on its own channel.
//!
//! The thread takes the oldest request with every request already queued behind it (at most
//! [`MAX_BATCH_IMAGES`]), as the text batcher does: a request alone waits for no one, and under
//! load the batches grow by themselves. Each image is decoded under the server's
//! [`DecodeLimits`] (bytes and pixels checked before any pixel buffer exists) and preprocessed
//! one at a time, so at most one decoded image is in memory; an image that fails is answered
//! at once and leaves the batch. The others are grouped by task and by preprocessed size, since
//! images of different sizes cannot share one tensor, and each group runs as one forward pass
//! `[b, c, h, w]`. When a group's pass fails, each of its images runs again alone, so that one
//! bad image fails only its own request. Each pass is counted in the metrics' batch histograms,
//! its tokens being the images' CLS, register and patch tokens.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use candle_core::Tensor;
use roformer::images::decode::DecodeLimits;
use roformer::images::error::DecodeError;
use roformer::pipeline::image::{
    classify_images, embed_images, pixel_values, ImagePipelineError, LabelScore,
};
use roformer::pipeline::Pooling;
use roformer::vision::VisionError;
use tokio::sync::oneshot;

use super::backend::VisionBackend;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// The most images one pass of the model takes.
pub const MAX_BATCH_IMAGES: usize = 32;

/// What to compute for an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageTask {
    /// The classifier's labels, best first (the model must be a classifier).
    Classify {
        /// How many labels to answer.
        top_k: usize,
    },
    /// One vector.
    Embed {
        /// The CLS token, or the mean of the patch tokens.
        pooling: Pooling,
        /// L2-normalise.
        normalize: bool,
    },
}

impl ImageTask {
    /// Images that can share one forward pass share a key (classifications of any `top_k`:
    /// the pass ranks every label and each request keeps its own prefix).
    fn key(self) -> ImageTask {
        match self {
            ImageTask::Classify { .. } => ImageTask::Classify { top_k: 0 },
            other => other,
        }
    }
}

/// The answer for one image.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageOutput {
    /// Labels with their softmax scores, best first ([`ImageTask::Classify`]).
    Labels(Vec<LabelScore>),
    /// The vector ([`ImageTask::Embed`]).
    Vector(Vec<f32>),
}

/// An image's answer and the tokens the model ran on it (CLS, registers and patches).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageAnswer {
    /// The answer.
    pub output: ImageOutput,
    /// The image's tokens.
    pub tokens: usize,
}

/// One queued request.
struct Item {
    task: ImageTask,
    bytes: Bytes,
    reply: oneshot::Sender<Result<ImageAnswer, ApiError>>,
}

/// A request whose image is decoded and preprocessed: `pixels` `[1, c, h, w]`.
struct Ready {
    item: Item,
    pixels: Tensor,
}

/// Where image handlers queue work; cheap to clone. The thread ends when every clone is
/// dropped and the queue is empty.
#[derive(Debug, Clone)]
pub struct ImageQueue {
    queue: Sender<Item>,
    backend: Arc<VisionBackend>,
    limits: DecodeLimits,
}

impl ImageQueue {
    /// Starts the thread that runs `backend` on queued images, decoded under `limits`.
    pub fn start(
        backend: Arc<VisionBackend>,
        metrics: Arc<Metrics>,
        limits: DecodeLimits,
    ) -> ImageQueue {
        let (queue, rx) = mpsc::channel();
        let model = backend.clone();
        std::thread::Builder::new()
            .name("roformer-vision".into())
            .spawn(move || run(&rx, &model, &metrics, &limits))
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("error: cannot start the image thread: {e}"));
        ImageQueue {
            queue,
            backend,
            limits,
        }
    }

    /// The model the queue runs.
    pub fn backend(&self) -> &VisionBackend {
        &self.backend
    }

    /// The caps each image is decoded under.
    pub fn limits(&self) -> DecodeLimits {
        self.limits
    }

    /// Queues the image file `bytes` for `task` and waits for the answer.
    ///
    /// # Errors
    /// The image's or the model's failure (4xx for an image that is not one, too large, or
    /// smaller than a patch), or [`ApiError::Backend`] when the thread is gone.
    pub async fn submit(&self, task: ImageTask, bytes: Bytes) -> Result<ImageAnswer, ApiError> {
        let (reply, answer) = oneshot::channel();
        let gone = || ApiError::Backend("the image thread has stopped".into());
        self.queue
            .send(Item { task, bytes, reply })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// The thread's loop: take the oldest request and those queued behind it, prepare each, run
/// them in groups, repeat until the queue closes.
fn run(rx: &Receiver<Item>, backend: &VisionBackend, metrics: &Metrics, limits: &DecodeLimits) {
    while let Ok(first) = rx.recv() {
        let mut items = vec![first];
        while items.len() < MAX_BATCH_IMAGES {
            match rx.try_recv() {
                Ok(item) => items.push(item),
                Err(_) => break,
            }
        }
        let ready: Vec<Ready> = items
            .into_iter()
            .filter_map(|item| prepare(item, backend, limits))
            .collect();
        for (key, members) in groups(ready) {
            run_group(key, members, backend, metrics);
        }
    }
}

/// Decodes and preprocesses the image of `item`; a failure is answered here. A request whose
/// client has gone (or timed out) is dropped unanswered.
fn prepare(item: Item, backend: &VisionBackend, limits: &DecodeLimits) -> Option<Ready> {
    if item.reply.is_closed() {
        return None;
    }
    let channels = backend.model().config().num_channels;
    let pixels = guarded(|| {
        pixel_values(&item.bytes, &backend.processor, channels, limits).map_err(api_error)
    });
    match pixels {
        Ok(pixels) => Some(Ready { item, pixels }),
        Err(e) => {
            let _ = item.reply.send(Err(e));
            None
        }
    }
}

/// `ready` grouped by task key and pixel shape, in order of first appearance.
fn groups(ready: Vec<Ready>) -> Vec<(ImageTask, Vec<Ready>)> {
    let mut groups: Vec<(ImageTask, Vec<usize>, Vec<Ready>)> = Vec::new();
    for r in ready {
        let (key, dims) = (r.item.task.key(), r.pixels.dims().to_vec());
        match groups.iter_mut().find(|(k, d, _)| *k == key && *d == dims) {
            Some((_, _, members)) => members.push(r),
            None => groups.push((key, dims, vec![r])),
        }
    }
    groups.into_iter().map(|(k, _, m)| (k, m)).collect()
}

/// Runs one group as one pass and answers its requests; after a failed pass of several
/// images, each runs again alone.
fn run_group(key: ImageTask, members: Vec<Ready>, backend: &VisionBackend, metrics: &Metrics) {
    let started = Instant::now();
    let tokens = members
        .first()
        .map_or(0, |r| image_tokens(backend, &r.pixels));
    let outputs = guarded(|| {
        let pixels: Vec<&Tensor> = members.iter().map(|r| &r.pixels).collect();
        let stacked = Tensor::cat(&pixels, 0).map_err(|e| ApiError::Backend(e.to_string()))?;
        compute(backend, key, &stacked)
    });
    metrics.batch(members.len(), members.len() * tokens, started.elapsed());
    match outputs {
        Ok(outputs) if outputs.len() == members.len() => {
            for (r, output) in members.into_iter().zip(outputs) {
                answer(r.item, Ok(output), tokens);
            }
        }
        Ok(_) => {
            for r in members {
                let wrong = ApiError::Backend("the model answered for the wrong count".into());
                answer(r.item, Err(wrong), tokens);
            }
        }
        Err(_) if members.len() > 1 => {
            for r in members {
                let alone = guarded(|| compute(backend, key, &r.pixels));
                let output = alone.and_then(|mut o| o.pop().ok_or_else(empty_answer));
                answer(r.item, output, tokens);
            }
        }
        Err(e) => {
            for r in members {
                answer(r.item, Err(e.clone()), tokens);
            }
        }
    }
}

/// Answers `item` with `output`, cut to its own `top_k`.
fn answer(item: Item, output: Result<ImageOutput, ApiError>, tokens: usize) {
    let output = output.map(|mut output| {
        if let (ImageTask::Classify { top_k }, ImageOutput::Labels(labels)) =
            (item.task, &mut output)
        {
            labels.truncate(top_k);
        }
        ImageAnswer { output, tokens }
    });
    let _ = item.reply.send(output);
}

/// The error of a pass that answered for no image (a bug, never a user's doing).
fn empty_answer() -> ApiError {
    ApiError::Backend("the model answered for no image".into())
}

/// The tokens of an image `[1, c, h, w]`: CLS, registers, and one per whole patch.
fn image_tokens(backend: &VisionBackend, pixels: &Tensor) -> usize {
    let config = backend.model().config();
    let dims = pixels.dims();
    let side = |i: usize| dims.get(i).copied().unwrap_or(0) / config.patch_size.max(1);
    config.prefix_tokens() + side(2) * side(3)
}

/// Runs the task `key` on `pixels` `[b, c, h, w]`: one output per image.
fn compute(
    backend: &VisionBackend,
    key: ImageTask,
    pixels: &Tensor,
) -> Result<Vec<ImageOutput>, ApiError> {
    match key {
        ImageTask::Classify { .. } => {
            let model = backend
                .classifier()
                .ok_or_else(|| ApiError::NotFound("the vision model is not a classifier".into()))?;
            let all = model.config().num_labels;
            let labels = classify_images(model, pixels, all).map_err(api_error)?;
            Ok(labels.into_iter().map(ImageOutput::Labels).collect())
        }
        ImageTask::Embed { pooling, normalize } => {
            let vectors =
                embed_images(backend.model(), pixels, pooling, normalize).map_err(api_error)?;
            Ok(vectors.into_iter().map(ImageOutput::Vector).collect())
        }
    }
}

/// Runs `f`; a panic is an error, not a dead thread.
fn guarded<T>(f: impl FnOnce() -> Result<T, ApiError>) -> Result<T, ApiError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(ApiError::Backend(
            "the vision model panicked on this image (a bug: please report it)".into(),
        ))
    })
}

/// The status of an image's failure: 413 for one too large to decode or to run, 400 for bytes
/// that are not a whole PNG or JPEG, 422 for an image that decodes but cannot be run (smaller
/// than a patch), 500 for the model's own failure.
fn api_error(e: ImagePipelineError) -> ApiError {
    let message = e.to_string();
    match e {
        ImagePipelineError::Decode(
            DecodeError::TooManyBytes { .. }
            | DecodeError::TooManyPixels { .. }
            | DecodeError::Limits(_),
        )
        | ImagePipelineError::TooManyPatches { .. } => ApiError::TooLarge(message),
        ImagePipelineError::Decode(_) => ApiError::Malformed(message),
        ImagePipelineError::Image(_)
        | ImagePipelineError::Vision(VisionError::ImageTooSmall { .. }) => {
            ApiError::Validation(message)
        }
        _ => ApiError::Backend(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifications_of_any_top_k_share_a_pass_and_embeddings_by_pooling() {
        let classify = |top_k| ImageTask::Classify { top_k }.key();
        assert_eq!(classify(1), classify(10));
        let embed = |pooling| {
            ImageTask::Embed {
                pooling,
                normalize: true,
            }
            .key()
        };
        assert_ne!(embed(Pooling::Cls), embed(Pooling::Mean));
        assert_ne!(classify(1), embed(Pooling::Cls));
    }

    #[test]
    fn failures_map_to_their_statuses() {
        let status = |e| api_error(e).status().as_u16();
        assert_eq!(status(DecodeError::UnsupportedFormat.into()), 400);
        assert_eq!(status(DecodeError::Truncated.into()), 400);
        let pixels = DecodeError::TooManyPixels {
            width: 5000,
            height: 5000,
            limit: 100,
        };
        assert_eq!(status(pixels.into()), 413);
        let patches = ImagePipelineError::TooManyPatches {
            patches: 5000,
            patch: 4,
        };
        assert_eq!(status(patches), 413);
        let small = VisionError::ImageTooSmall {
            height: 2,
            width: 2,
            patch: 4,
        };
        assert_eq!(status(small.into()), 422);
        assert_eq!(status(ImagePipelineError::NonFinite), 500);
    }
}
