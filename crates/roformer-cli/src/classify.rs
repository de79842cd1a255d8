//! `roformer classify`: the label of each text by a fine-tuned sequence classifier.
//!
//! Each text (or tab-separated pair) is encoded as `[CLS] text [SEP]` (`[CLS] a [SEP] b [SEP]`),
//! cut to `--max-length`, run through [`RoFormerForSequenceClassification`] by
//! [`pipeline::classify()`], and its logits `z` become probabilities
//! `p_i = exp(z_i - max z) / sum_j exp(z_j - max z)` (in f64).

use std::io::Write;
use std::path::PathBuf;

use crate::output::OutputArgs;
use crate::precision::PrecisionArg;
use anyhow::{bail, Context};
use candle_core::Device;
use roformer::{
    pipeline, HeadModel, ModelDir, RoFormerForSequenceClassification, RoFormerTokenizer,
};
use serde::Serialize;

/// Arguments of `roformer classify`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per text: {\"text\", \"label\", \"probabilities\": {label: p}}"
)))]
pub struct Args {
    /// A classifier checkpoint (e.g. `best/` or `checkpoint/` of `roformer train classify`).
    #[arg(long)]
    model: PathBuf,
    /// Most tokens per text.
    #[arg(long, default_value_t = 512)]
    max_length: usize,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// The texts; a tab separates the two texts of a pair.
    #[arg(value_name = "TEXT", required = true)]
    texts: Vec<String>,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

#[derive(Debug, Serialize)]
struct Prediction<'a> {
    text: &'a str,
    label: String,
    probabilities: Vec<(String, f64)>,
}

/// Classifies each text and prints its label and probabilities.
pub fn run(args: Args) -> anyhow::Result<()> {
    let tokenizer = RoFormerTokenizer::from_dir(&args.model)
        .with_context(|| format!("loading the tokenizer of {}", args.model.display()))?;
    let precision = args.precision.resolve();
    let model = ModelDir::open(&args.model)
        .and_then(|dir| dir.load::<RoFormerForSequenceClassification>(&Device::Cpu, precision))
        .with_context(|| format!("loading the classifier in {}", args.model.display()))?
        .model;
    let names = pipeline::labels(model.roformer().config());
    let pad_id = tokenizer.special_tokens().pad;
    let mut out = std::io::stdout().lock();
    for text in &args.texts {
        let (first, second) = match text.split_once('\t') {
            Some((a, b)) => (a, Some(b)),
            None => (text.as_str(), None),
        };
        let e = tokenizer.encode_truncated(first, second, args.max_length)?;
        let z = match pipeline::classify(&model, &[&e], pad_id) {
            Ok(mut logits) => logits.pop().unwrap_or_default(),
            Err(pipeline::PipelineError::NonFinite { index, .. }) => {
                bail!("the model gave a non-finite logit for label {index} of {text:?}")
            }
            Err(e) => return Err(e.into()),
        };
        let p = pipeline::softmax(&z);
        let best = p
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i);
        let prediction = Prediction {
            text,
            label: names[best].clone(),
            probabilities: names.iter().cloned().zip(p.iter().copied()).collect(),
        };
        if args.stdout.json {
            writeln!(out, "{}", crate::json::to_string(&prediction)?)?;
        } else {
            let rest: Vec<String> = prediction
                .probabilities
                .iter()
                .map(|(l, p)| format!("{l} {p:.3}"))
                .collect();
            writeln!(out, "{}\t{}\t({})", prediction.label, text, rest.join(", "))?;
        }
    }
    Ok(())
}
