//! `roformer vision forward`: run a vision checkpoint on pixel values read from a safetensors
//! file and write its outputs as safetensors, as `roformer forward` does for text.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use roformer::vision::{VisionModel, VisionModelDir};
use roformer::Mode;

use crate::forward::write_outputs;
use crate::inputs::{checkpoint_files, refuse_output_among_inputs, InputPath};

/// The tensor the input file must hold.
const PIXELS: &str = "pixel_values";

/// Arguments of `roformer vision forward`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint directory: config.json (a DINOv3ViTModel's, or one of this crate's vision
    /// configs) and model.safetensors (or pytorch_model.bin).
    #[arg(long)]
    model: PathBuf,
    /// safetensors file holding `pixel_values`: f32 [batch, channels, height, width], already
    /// normalised as the model expects. Any height and width of at least one patch; the pixels
    /// past the last whole patch are dropped, as the model's convolution drops them.
    #[arg(long, value_name = "PIXELS.safetensors")]
    input: PathBuf,
    /// Output safetensors file: f32 `last_hidden_state` [batch, 1 + registers + patches,
    /// hidden] (CLS, registers, then the patches row-major) and `pooler_output` [batch,
    /// hidden] (the normed CLS token). `-` is standard output; a FIFO or device is written as a
    /// stream, a regular file is replaced atomically. It may not be the --input file or a file
    /// of the --model checkpoint.
    #[arg(long, value_name = "OUT.safetensors")]
    output: PathBuf,
}

/// `pixel_values` of the input file, on the CPU.
fn read_pixels(path: &Path) -> anyhow::Result<Tensor> {
    let bytes = roformer::memory::read_input_file(path)
        .with_context(|| format!("cannot read the input file {}", path.display()))?;
    let mut tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .with_context(|| format!("{}: not a safetensors file", path.display()))?;
    let Some(pixels) = tensors.remove(PIXELS) else {
        let mut names: Vec<&String> = tensors.keys().collect();
        names.sort();
        bail!(
            "{}: no {PIXELS} tensor (it holds {names:?}); write the images as {PIXELS}, f32 \
             [batch, channels, height, width]",
            path.display()
        );
    };
    Ok(pixels)
}

/// The model of `dir`, in f32 on the CPU (the backbone of a classifier's checkpoint, its head
/// noted as unused).
fn load(dir: &Path) -> anyhow::Result<VisionModel> {
    let context = || format!("loading the vision model in {}", dir.display());
    let model_dir = VisionModelDir::open(dir).with_context(context)?;
    let loaded = model_dir
        .load_model(DType::F32, &Device::Cpu)
        .with_context(context)?;
    if model_dir.has_classifier() {
        eprintln!("note: `vision forward` runs the backbone; the classifier head is not used");
    }
    Ok(loaded.model)
}

/// Runs the model on the input file and writes the outputs.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut inputs = vec![InputPath::File("--input", args.input.clone())];
    inputs.extend(checkpoint_files("--model", &args.model));
    refuse_output_among_inputs("--output", &args.output, &inputs)?;
    let pixels = read_pixels(&args.input)?;
    let model = load(&args.model)?;
    let out = model
        .forward(&pixels, model.plan(Mode::Inference))
        .with_context(|| format!("running the model on {}", args.input.display()))?;
    let outputs = HashMap::from([
        ("last_hidden_state".to_string(), out.last_hidden_state),
        ("pooler_output".to_string(), out.pooler_output),
    ]);
    write_outputs(outputs, &args.output)
}
