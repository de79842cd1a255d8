//! `roformer forward`: run a checkpoint on token ids from a JSON file and write its outputs as
//! safetensors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use roformer::{
    ForwardInput, ForwardTensors, HeadModel, ModelDir, RoFormerForMaskedLM, RoFormerModel,
};
use rotary::finite::first_non_finite_in;

use crate::inputs::{checkpoint_files, refuse_output_among_inputs, InputPath};
use crate::output;
use crate::output::outln;
use crate::precision::PrecisionArg;

/// Arguments of `roformer forward`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint directory: config.json and model.safetensors (or pytorch_model.bin).
    #[arg(long)]
    model: PathBuf,
    /// JSON object with `input_ids` (list of equal-length lists of ids) and optionally
    /// `attention_mask` (1 attend, 0 padding), `token_type_ids` and `position_ids` (the rotary
    /// position of each token; default 0, 1, ... per sequence), each of the same shape.
    #[arg(long, value_name = "INPUT.json")]
    input: PathBuf,
    /// Output safetensors file: f32 `last_hidden_state` [batch, seq, hidden] and, when the
    /// checkpoint has a masked-LM head (`cls.predictions.*` tensors), `logits`
    /// [batch, seq, vocab]. `-` is standard output; a FIFO or device is written as a stream,
    /// a regular file is replaced atomically. Non-finite values are kept, with a warning. It
    /// may not be the --input file or a file of the --model checkpoint.
    #[arg(long, value_name = "OUT.safetensors")]
    output: PathBuf,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// The input file, parsed.
fn read_input(path: &Path) -> anyhow::Result<ForwardInput> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the input file {}", path.display()))?;
    ForwardInput::from_json(text.as_bytes())
        .with_context(|| format!("{}: malformed input JSON", path.display()))
}

/// Runs the model on the input file and writes the outputs.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut inputs = vec![InputPath::File("--input", args.input.clone())];
    inputs.extend(checkpoint_files("--model", &args.model));
    refuse_output_among_inputs("--output", &args.output, &inputs)?;
    let ForwardTensors {
        input_ids: ids,
        token_type_ids: types,
        attention_mask: mask,
        position_ids: positions,
    } = read_input(&args.input)?.tensors()?;

    let dir = ModelDir::open(&args.model)
        .with_context(|| format!("loading the model in {}", args.model.display()))?;
    let device = Device::Cpu;
    let mut outputs: HashMap<String, Tensor> = HashMap::new();
    let precision = args.precision.resolve();
    let unused = if dir.checkpoint.has_mlm_head() {
        let loaded = dir.load::<RoFormerForMaskedLM>(&device, precision)?;
        let out = loaded
            .model
            .forward(&ids, types.as_ref(), mask.as_ref(), positions.as_ref())?;
        outputs.insert("last_hidden_state".into(), out.last_hidden_state);
        outputs.insert("logits".into(), out.logits);
        loaded.unused
    } else {
        let loaded = dir.load::<RoFormerModel>(&device, precision)?;
        let h = loaded
            .model
            .forward(&ids, types.as_ref(), mask.as_ref(), positions.as_ref())?;
        outputs.insert("last_hidden_state".into(), h);
        loaded.unused
    };
    if !unused.is_empty() {
        eprintln!(
            "note: {} checkpoint tensor(s) not used by this model: {}",
            unused.len(),
            unused.join(", ")
        );
    }
    write_outputs(outputs, &args.output)
}

/// Writes `outputs` (as f32, contiguous) to `path` as safetensors, after warning about
/// non-finite values, and names each output with its shape (on stderr when the file goes to
/// stdout).
pub(crate) fn write_outputs(
    mut outputs: HashMap<String, Tensor>,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let mut summary: Vec<String> = Vec::new();
    for (name, t) in outputs.iter_mut() {
        *t = t.to_dtype(DType::F32)?.contiguous()?;
        summary.push(format!("{name} {:?}", t.dims()));
    }
    summary.sort();
    warn_non_finite(&outputs)?;
    let bytes = safetensors::serialize(&outputs, None)
        .with_context(|| format!("cannot serialise the outputs for {}", path.display()))?;
    output::write(path, &bytes)?;
    let line = format!("{}: {}", path.display(), summary.join(", "));
    if output::is_stdout(path) {
        eprintln!("{line}");
    } else {
        outln!("{line}")?;
    }
    Ok(())
}

/// Warns on stderr, per output tensor (by name), about its first non-finite value: a NaN or
/// an infinity means the weights overflow on this input. The file keeps the raw values.
pub(crate) fn warn_non_finite(outputs: &HashMap<String, Tensor>) -> anyhow::Result<()> {
    let mut names: Vec<&String> = outputs.keys().collect();
    names.sort();
    for name in names {
        let tensor = &outputs[name];
        if let Some(bad) = first_non_finite_in(tensor)? {
            let (index, value) = (bad.position(tensor.dims()), bad.value);
            eprintln!(
                "warning: {name} is not finite: {name}{index:?} = {value} (sequence {}, token \
                 {}); the weights overflow f32 on this input, and the output file holds the \
                 raw values",
                index.first().copied().unwrap_or(0),
                index.get(1).copied().unwrap_or(0),
            );
        }
    }
    Ok(())
}
