//! `roformer llama logits`: the logits of every position for token ids from a JSON file.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{bail, Context};
use candle_core::{Device, Tensor};
use llama::Logits;
use rotary::finite::first_non_finite_in;

use super::ModelArgs;
use crate::inputs::{refuse_output_among_inputs, InputPath};
use crate::output;
use crate::output::outln;

/// Arguments of `roformer llama logits`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// JSON object with `input_ids`: a list of equal-length lists of token ids, run from
    /// position 0 (no BOS is added).
    #[arg(long, value_name = "IDS.json")]
    input: PathBuf,
    /// Output safetensors file with f32 `logits` [batch, seq, vocab]. `-` is standard output.
    /// It may not be the --input or the --gguf file.
    #[arg(long, value_name = "OUT.safetensors")]
    output: PathBuf,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    input_ids: Vec<Vec<u32>>,
}

/// Runs the ids and writes the logits.
pub fn run(args: Args) -> anyhow::Result<()> {
    refuse_output_among_inputs(
        "--output",
        &args.output,
        &[
            InputPath::File("--input", args.input.clone()),
            InputPath::File("--gguf", args.model.gguf.clone()),
        ],
    )?;
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("cannot read the input file {}", args.input.display()))?;
    let input: Input = serde_json::from_str(&text)
        .with_context(|| format!("{}: malformed input JSON", args.input.display()))?;
    let Some(first) = input.input_ids.first() else {
        bail!("input_ids is empty: give at least one sequence");
    };
    let width = first.len();
    if width == 0 {
        bail!("input_ids[0] is empty: give at least one token per sequence");
    }
    if let Some((i, row)) = input
        .input_ids
        .iter()
        .enumerate()
        .find(|(_, r)| r.len() != width)
    {
        bail!(
            "input_ids is ragged: row {i} has {} ids, row 0 has {width}",
            row.len()
        );
    }
    let (_, model) = args.model.open()?;
    let context = model.config().context_length;
    if width > context {
        bail!("{width} tokens exceed the model's context of {context}");
    }
    let batch = input.input_ids.len();
    let flat: Vec<u32> = input.input_ids.into_iter().flatten().collect();
    let ids = Tensor::from_vec(flat, (batch, width), &Device::Cpu)?;
    let mut cache = model.cache(batch, width);
    let logits = model.forward(&ids, &mut cache, Logits::All)?;
    if let Some(bad) = first_non_finite_in(&logits)? {
        let index = bad.position(logits.dims());
        bail!(
            "the model produced a non-finite logit: logits{index:?} = {}",
            bad.value
        );
    }
    let dims = logits.dims().to_vec();
    let outputs = HashMap::from([("logits".to_string(), logits)]);
    let bytes = safetensors::serialize(&outputs, None)
        .with_context(|| format!("cannot serialise the logits for {}", args.output.display()))?;
    output::write(&args.output, &bytes)?;
    let line = format!("{}: logits {dims:?}", args.output.display());
    if output::is_stdout(&args.output) {
        eprintln!("{line}");
    } else {
        outln!("{line}")?;
    }
    Ok(())
}
