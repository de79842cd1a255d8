//! `roformer vision classify`: the five most probable labels of each image (PNG or JPEG),
//! `softmax(logits)` of an image classifier, through [`roformer::pipeline::image`].

use std::path::PathBuf;

use anyhow::{bail, Context};
use candle_core::{DType, Device};
use roformer::images::decode::{read_image, DecodeLimits};
use roformer::pipeline::image::{classify_image, preprocessed, LabelScore};
use serde::Serialize;

use crate::default_vision_model;
use crate::output::{outln, OutputArgs};

/// Arguments of `roformer vision classify`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per image: {\"image\", \"labels\": [{\"label\", \"score\"}]}"
)))]
pub struct Args {
    /// A classifier directory; the built-in Fashion-MNIST model when not given.
    #[arg(long)]
    model: Option<PathBuf>,
    /// How many labels to show per image.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    #[command(flatten)]
    stdout: OutputArgs,
    /// The images (PNG or JPEG; at most 16 MiB and 4096 x 4096 pixels each).
    #[arg(value_name = "IMAGE", required = true)]
    images: Vec<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Prediction<'a> {
    image: &'a std::path::Path,
    labels: Vec<LabelScore>,
}

/// Runs `roformer vision classify`.
///
/// # Errors
/// A model that does not load; an image that cannot be read or decoded (named).
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.top_k == 0 {
        bail!("--top-k must be at least 1");
    }
    let name = default_vision_model::describe(args.model.as_deref());
    let dir = default_vision_model::model_dir(args.model.as_deref())?;
    if !dir.has_classifier() {
        bail!("{name} has no classifier head (classifier.weight); `vision embed` runs it");
    }
    let model = dir
        .load_classifier(DType::F32, &Device::Cpu)
        .with_context(|| format!("loading the classifier of {name}"))?
        .model;
    let processor = default_vision_model::processor(args.model.as_deref())?;
    let channels = model.config().num_channels;
    let limits = DecodeLimits::default();
    for path in &args.images {
        let image =
            read_image(path, &limits).with_context(|| format!("reading {}", path.display()))?;
        let pixels = preprocessed(&image, &processor, channels)
            .with_context(|| format!("preparing {}", path.display()))?;
        let labels = classify_image(&model, &pixels, args.top_k)
            .with_context(|| format!("classifying {}", path.display()))?;
        if args.stdout.json {
            let line = serde_json::to_string(&Prediction {
                image: path,
                labels,
            })?;
            outln!("{line}")?;
            continue;
        }
        outln!("{}", path.display())?;
        for l in &labels {
            outln!("  {:<12} {:.4}", l.label, l.score)?;
        }
    }
    Ok(())
}
