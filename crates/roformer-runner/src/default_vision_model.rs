//! The vision model of `--model DIR`, or the built-in Fashion-MNIST model
//! ([`roformer_builtin::fashion`]) when no model is given: `vision eval`, `vision classify`,
//! `vision embed` read it through here, and `serve --vision` serves the built-in one.

use std::path::Path;

use anyhow::Context;
use roformer::images::processor::ImageProcessor;
use roformer::vision::VisionModelDir;
use roformer_builtin::fashion;

/// How the built-in vision model is named in messages.
pub const NAME: &str = fashion::NAME;

/// The config and weights of `--model DIR`, or of the built-in model when `model` is `None`.
///
/// # Errors
/// The errors of [`VisionModelDir::open`] for a directory.
pub fn model_dir(model: Option<&Path>) -> anyhow::Result<VisionModelDir> {
    match model {
        Some(dir) => VisionModelDir::open(dir)
            .with_context(|| format!("loading the vision model in {}", dir.display())),
        None => fashion::model_dir().with_context(|| format!("loading the {NAME}")),
    }
}

/// The image processor of `--model DIR` (its `preprocessor_config.json`, DINOv3's defaults
/// when it has none), or of the built-in model.
///
/// # Errors
/// A `preprocessor_config.json` that does not parse or asks for what is not supported.
pub fn processor(model: Option<&Path>) -> anyhow::Result<ImageProcessor> {
    let Some(dir) = model else {
        return fashion::processor().with_context(|| format!("the preprocessor of the {NAME}"));
    };
    let path = dir.join("preprocessor_config.json");
    if !path.exists() {
        return Ok(ImageProcessor::default());
    }
    ImageProcessor::from_path(&path).with_context(|| format!("reading {}", path.display()))
}

/// How a model is named in messages: the directory, or [`NAME`].
pub fn describe(model: Option<&Path>) -> String {
    model.map_or_else(|| NAME.to_owned(), |dir| dir.display().to_string())
}
