//! `roformer vision embed`: one vector per image, the model's `pooler_output` (the normed CLS
//! token, `[hidden]`), printed as JSON lines or written as a `.npy` file `[images, hidden]`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use candle_core::{DType, Device};
use roformer::images::decode::{read_image, DecodeLimits};
use roformer::pipeline::image::{embed_image, preprocessed};

use crate::default_vision_model;
use crate::embed::npy_bytes;
use crate::output::{self, outln};

/// Arguments of `roformer vision embed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A vision model directory (a DINOv3ViTModel, or a classifier whose backbone is used);
    /// the built-in Fashion-MNIST model when not given.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Write the vectors as a NumPy .npy file (f32, [images, hidden]) instead of printing one
    /// JSON line `{"image", "embedding"}` per image.
    #[arg(long)]
    output: Option<PathBuf>,
    /// The images (PNG or JPEG; at most 16 MiB and 4096 x 4096 pixels each).
    #[arg(value_name = "IMAGE", required = true)]
    images: Vec<PathBuf>,
}

/// Runs `roformer vision embed`.
///
/// # Errors
/// A model that does not load; an image that cannot be read or decoded (named).
pub fn run(args: Args) -> anyhow::Result<()> {
    let name = default_vision_model::describe(args.model.as_deref());
    if let Some(out) = &args.output {
        if !output::is_stdout(out) && out.extension().is_none_or(|e| e != "npy") {
            bail!("{}: the output must be a .npy file", out.display());
        }
    }
    let dir = default_vision_model::model_dir(args.model.as_deref())?;
    let loaded = if dir.has_classifier() {
        dir.load_classifier(DType::F32, &Device::Cpu)
            .map(|l| l.model.model().clone())
    } else {
        dir.load_model(DType::F32, &Device::Cpu).map(|l| l.model)
    };
    let model = loaded.with_context(|| format!("loading {name}"))?;
    let processor = default_vision_model::processor(args.model.as_deref())?;
    let channels = model.config().num_channels;
    let limits = DecodeLimits::default();
    let mut vectors = Vec::with_capacity(args.images.len());
    for path in &args.images {
        let image =
            read_image(path, &limits).with_context(|| format!("reading {}", path.display()))?;
        let pixels = preprocessed(&image, &processor, channels)
            .with_context(|| format!("preparing {}", path.display()))?;
        let vector = embed_image(&model, &pixels)
            .with_context(|| format!("embedding {}", path.display()))?;
        if args.output.is_none() {
            let line = serde_json::json!({"image": path, "embedding": vector});
            outln!("{line}")?;
        }
        vectors.push(vector);
    }
    if let Some(out) = &args.output {
        output::write(out, &npy_bytes(&vectors, model.config().hidden_size)?)?;
    }
    Ok(())
}
