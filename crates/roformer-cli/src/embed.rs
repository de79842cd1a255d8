//! `roformer embed`: one vector per input text, pooled from the encoder's last hidden states.
//!
//! Texts are encoded as `[CLS] text [SEP]`, sorted by length and run in batches padded to the
//! longest text of the batch (the attention mask hides the padding), then written in input
//! order. With `h` the last hidden states `[t, hidden]` of a text and `m` its attention mask:
//! - `cls`: `h[0]`, the [CLS] token's state;
//! - `mean`: `sum_i m_i h[i] / sum_i m_i`, the mean over the text's tokens, [CLS] and [SEP]
//!   included, padding excluded.
//!
//! Empty texts (an empty or all-whitespace line, or `"text": ""`) are an error naming the line:
//! skipping them would silently shift every later vector to the wrong row.

use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use roformer::{Encoding, RoFormerModel};

use crate::default_model;

/// How a text's token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pooling {
    /// The last hidden state of the [CLS] token.
    Cls,
    /// The mean of the last hidden states of the text's tokens ([CLS] and [SEP] included).
    Mean,
}

/// How the input file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// JSON lines for .jsonl, .ndjson and .json files, plain text otherwise.
    Auto,
    /// One text per line.
    Text,
    /// One JSON object per line with a string field "text" (other fields are ignored).
    Jsonl,
}

/// Arguments of `roformer embed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint directory: config.json, model.safetensors (or pytorch_model.bin), vocab.txt
    /// and, if present, tokenizer_config.json [default: the built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// How token states are pooled into one vector.
    #[arg(long, value_enum, default_value_t = Pooling::Mean)]
    pooling: Pooling,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// Cut each text to at most this many tokens, [CLS] and [SEP] included [default: no cut;
    /// any length runs, at a cost growing with its square]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    max_length: Option<u32>,
    /// The texts: one per line. Empty lines are an error.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// How to read the input.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    input_format: InputFormat,
    /// Output file: .npy (f32, shape [texts, hidden]) or .jsonl/.ndjson/.json (one JSON array
    /// per line), one vector per input line, in input order.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    /// No progress bar (it is only drawn when stderr is a terminal anyway).
    #[arg(long)]
    quiet: bool,
}

/// What the output extension asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputFormat {
    Npy,
    JsonLines,
}

impl OutputFormat {
    fn of(path: &Path) -> anyhow::Result<OutputFormat> {
        match extension(path).as_deref() {
            Some("npy") => Ok(OutputFormat::Npy),
            Some("jsonl" | "ndjson" | "json") => Ok(OutputFormat::JsonLines),
            _ => bail!(
                "{}: the output extension must be .npy, .jsonl, .ndjson or .json",
                path.display()
            ),
        }
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
}

/// Embeds every input text and writes the vectors.
pub fn run(args: Args) -> anyhow::Result<()> {
    let output_format = OutputFormat::of(&args.output)?;
    let texts = read_texts(&args.input, args.input_format)?;
    if texts.is_empty() {
        bail!("{}: no text to embed", args.input.display());
    }

    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let dir = default_model::model_dir(args.model.as_deref())?;
    let model = dir.load::<RoFormerModel>(DType::F32, &Device::Cpu)?.model;

    let encodings = texts
        .iter()
        .map(|text| match args.max_length {
            Some(n) => tokenizer.encode_truncated(text, None, n as usize),
            None => Ok(tokenizer.encode(text)),
        })
        .collect::<Result<Vec<_>, _>>()?;

    let progress = progress_bar(encodings.len(), args.batch_size as usize, args.quiet);
    let vectors = embed_all(
        &model,
        &encodings,
        args.batch_size as usize,
        args.pooling,
        tokenizer.special_tokens().pad,
        &progress,
    )?;
    progress.finish_and_clear();

    let hidden = model.config().hidden_size;
    match output_format {
        OutputFormat::Npy => write_npy(&args.output, &vectors, hidden)?,
        OutputFormat::JsonLines => write_json_lines(&args.output, &vectors)?,
    }
    println!(
        "{}: {} vectors of {hidden} ({} pooling)",
        args.output.display(),
        vectors.len(),
        match args.pooling {
            Pooling::Cls => "cls",
            Pooling::Mean => "mean",
        }
    );
    Ok(())
}

/// The texts of the input file, one per line, with their line numbers checked.
fn read_texts(path: &Path, format: InputFormat) -> anyhow::Result<Vec<String>> {
    let content = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the input file {}", path.display()))?;
    let jsonl = match format {
        InputFormat::Auto => matches!(
            extension(path).as_deref(),
            Some("jsonl" | "ndjson" | "json")
        ),
        InputFormat::Text => false,
        InputFormat::Jsonl => true,
    };
    #[derive(serde::Deserialize)]
    struct Line {
        text: String,
    }
    content
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let at = || format!("{} line {}", path.display(), i + 1);
            let text = if jsonl {
                serde_json::from_str::<Line>(line)
                    .with_context(|| {
                        format!("{}: expected a JSON object with a string \"text\"", at())
                    })?
                    .text
            } else {
                line.to_owned()
            };
            if text.trim().is_empty() {
                bail!(
                    "{}: empty text (every line must hold a text to embed)",
                    at()
                );
            }
            Ok(text)
        })
        .collect()
}

/// A bar counting texts, drawn on stderr when it is a terminal, the input spans more than one
/// batch and `--quiet` is not given; hidden otherwise.
fn progress_bar(texts: usize, batch_size: usize, quiet: bool) -> ProgressBar {
    if quiet || texts <= batch_size || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(texts as u64), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} texts, {per_sec}, eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// The vectors of all encodings (in their order), computed in batches of similar lengths.
fn embed_all(
    model: &RoFormerModel,
    encodings: &[Encoding],
    batch_size: usize,
    pooling: Pooling,
    pad_id: u32,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut order: Vec<usize> = (0..encodings.len()).collect();
    order.sort_by_key(|&i| encodings[i].len());
    let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
    for chunk in order.chunks(batch_size) {
        let batch: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
        let pooled = embed_batch(model, &batch, pooling, pad_id)?;
        for (&i, v) in chunk.iter().zip(pooled) {
            vectors[i] = v;
        }
        progress.inc(chunk.len() as u64);
    }
    Ok(vectors)
}

/// Pads `batch` to its longest encoding, runs the encoder and pools each text.
fn embed_batch(
    model: &RoFormerModel,
    batch: &[&Encoding],
    pooling: Pooling,
    pad_id: u32,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let device = model.device();
    let (b, t) = (
        batch.len(),
        batch.iter().map(|e| e.len()).max().unwrap_or(0),
    );
    let mut ids = Vec::with_capacity(b * t);
    let mut mask = Vec::with_capacity(b * t);
    for e in batch {
        ids.extend_from_slice(&e.ids);
        ids.extend(std::iter::repeat_n(pad_id, t - e.len()));
        mask.extend(e.attention_mask.iter().map(|&m| m as f32));
        mask.extend(std::iter::repeat_n(0f32, t - e.len()));
    }
    let ids = Tensor::from_vec(ids, (b, t), device)?;
    let mask = Tensor::from_vec(mask, (b, t), device)?;
    let padded = batch.iter().any(|e| e.len() < t);
    let hidden = model.forward(&ids, None, padded.then_some(&mask), None)?; // [b, t, hidden]
    let pooled = match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        Pooling::Mean => {
            let sum = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?; // [b, hidden]
            sum.broadcast_div(&mask.sum_keepdim(1)?)?
        }
    };
    Ok(pooled.to_dtype(DType::F32)?.to_vec2()?)
}

/// Writes `vectors` (`n` rows of `hidden`) as a NumPy `.npy` file, format 1.0: magic,
/// version, header length (u16 LE), a header dict padded with spaces to a multiple of 64
/// bytes in all (ending in a newline), then the f32 values little-endian, row-major.
fn write_npy(path: &Path, vectors: &[Vec<f32>], hidden: usize) -> anyhow::Result<()> {
    let dict = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {hidden}), }}",
        vectors.len()
    );
    let preamble = 6 + 2 + 2; // magic, version, header length
    let unpadded = preamble + dict.len() + 1;
    let header = format!(
        "{dict}{}\n",
        " ".repeat(unpadded.next_multiple_of(64) - unpadded)
    );
    let header_len = u16::try_from(header.len()).context("npy header too long")?;
    let mut out = BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&header_len.to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for v in vectors {
        for x in v {
            out.write_all(&x.to_le_bytes())?;
        }
    }
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Writes one JSON array of numbers per line.
fn write_json_lines(path: &Path, vectors: &[Vec<f32>]) -> anyhow::Result<()> {
    let mut out = BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    for v in vectors {
        serde_json::to_writer(&mut out, v)?;
        out.write_all(b"\n")?;
    }
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}
