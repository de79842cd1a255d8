//! `roformer embed`: one vector per input text, pooled from the encoder's last hidden states.
//!
//! Texts are encoded as `[CLS] text [SEP]`, sorted by length and run in batches padded to the
//! longest text of the batch (the attention mask hides the padding), then written in input
//! order. With `h` the last hidden states `[t, hidden]` of a text and `m` its attention mask:
//! - `cls`: `h[0]`, the `[CLS]` token's state;
//! - `mean`: `sum_i m_i h[i] / sum_i m_i`, the mean over the text's tokens, `[CLS]` and `[SEP]`
//!   included, padding excluded.
//!
//! Empty texts (an empty or all-whitespace line, or `"text": ""`) are an error naming the line:
//! skipping them would silently shift every later vector to the wrong row. Texts longer than
//! `--max-length` are cut (see [`truncation`]); a vector that is not finite (weights that
//! overflow f32 on a text) is an error naming the line and the token.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use roformer::{pipeline, Encoding, RoFormerModel, RoFormerTokenizer};
use serde::Serialize;

use crate::inputs::{checkpoint_files, refuse_output_among_inputs, InputPath};
use crate::output::outln;
use crate::output::OutputArgs;
use crate::precision::PrecisionArg;
use crate::truncation::{self, Cut, Limit};
use crate::{default_model, json, output};

/// How a text's token states become one vector ([`pipeline::Pooling`] as a flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pooling {
    /// The last hidden state of the `[CLS]` token.
    Cls,
    /// The mean of the last hidden states of the text's tokens (`[CLS]` and `[SEP]` included).
    Mean,
}

impl Pooling {
    /// The library's pooling.
    fn library(self) -> pipeline::Pooling {
        match self {
            Pooling::Cls => pipeline::Pooling::Cls,
            Pooling::Mean => pipeline::Pooling::Mean,
        }
    }
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
#[command(mut_arg("json", |a| a.help(
    "Print the summary as one JSON object: {\"output\", \"vectors\", \"dim\", \"pooling\", \
     \"max_length\" (0: no limit), \"truncated\": [{\"line\", \"tokens\", \"kept\"}]}"
)))]
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
    /// Cut each text to at most N tokens, `[CLS]` and `[SEP]` included, and say so on stderr
    /// [default: the checkpoint's max_position_embeddings]. 0 keeps every token: rotary
    /// positions have no length limit, but the cost grows with the square of the length.
    #[arg(long, value_name = "N", value_parser = truncation::parse)]
    max_length: Option<u32>,
    /// The texts: one per line. Empty lines are an error.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// How to read the input.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    input_format: InputFormat,
    /// Output file: .npy (f32, shape [texts, hidden]) or .jsonl/.ndjson/.json (one JSON array
    /// per line), one vector per input line, in input order. `-` writes JSON lines to standard
    /// output; a FIFO or device is written as a stream, a regular file replaced atomically. It
    /// may not be the --input file or a file of the --model checkpoint.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// No progress bar (it is only drawn when stderr is a terminal anyway).
    #[arg(long)]
    quiet: bool,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
}

/// What the output extension asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputFormat {
    Npy,
    JsonLines,
}

impl OutputFormat {
    fn of(path: &Path) -> anyhow::Result<OutputFormat> {
        if output::is_stdout(path) {
            return Ok(OutputFormat::JsonLines);
        }
        match extension(path).as_deref() {
            Some("npy") => Ok(OutputFormat::Npy),
            Some("jsonl" | "ndjson" | "json") => Ok(OutputFormat::JsonLines),
            _ => bail!(
                "{}: the output extension must be .npy, .jsonl, .ndjson or .json (or give - for \
                 JSON lines on standard output)",
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

/// A text cut by `--max-length`, in the `--json` summary.
#[derive(Debug, Serialize)]
struct LineCut {
    /// 1-based line of the input.
    line: usize,
    #[serde(flatten)]
    cut: Cut,
}

/// The `--json` summary.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    output: &'a Path,
    vectors: usize,
    dim: usize,
    pooling: &'static str,
    max_length: usize,
    truncated: Vec<LineCut>,
}

/// Embeds every input text and writes the vectors.
pub fn run(args: Args) -> anyhow::Result<()> {
    let output_format = OutputFormat::of(&args.output)?;
    let mut inputs = vec![InputPath::File("--input", args.input.clone())];
    if let Some(model) = &args.model {
        inputs.extend(checkpoint_files("--model", model));
    }
    refuse_output_among_inputs("--output", &args.output, &inputs)?;
    let texts = read_texts(&args.input, args.input_format)?;
    if texts.is_empty() {
        bail!("{}: no text to embed", args.input.display());
    }

    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let dir = default_model::model_dir(args.model.as_deref())?;
    let limit = Limit::new(args.max_length, dir.config.max_position_embeddings);
    let precision = args.precision.resolve();
    let model = dir.load::<RoFormerModel>(&Device::Cpu, precision)?.model;

    let (encodings, truncated) = encode_all(&tokenizer, &texts, limit)?;
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
    let bytes = match output_format {
        OutputFormat::Npy => npy_bytes(&vectors, hidden)?,
        OutputFormat::JsonLines => json_lines(&vectors)?,
    };
    output::write(&args.output, &bytes)?;
    print_summary(&args, vectors.len(), hidden, limit, truncated)
}

/// The encodings of `texts`, cut to `limit`, and the lines that were cut (noted on stderr).
fn encode_all(
    tokenizer: &RoFormerTokenizer,
    texts: &[String],
    limit: Limit,
) -> anyhow::Result<(Vec<Encoding>, Vec<LineCut>)> {
    let mut encodings = Vec::with_capacity(texts.len());
    let mut truncated = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let limited = tokenizer.encode_limited(text, limit.tokens())?;
        if limited.was_cut() {
            truncated.push(LineCut {
                line: i + 1,
                cut: Cut {
                    tokens: limited.untruncated_len,
                    kept: limited.encoding.len(),
                },
            });
        }
        encodings.push(limited.encoding);
    }
    let named: Vec<(String, Cut)> = truncated
        .iter()
        .map(|t| (format!("line {}", t.line), t.cut))
        .collect();
    truncation::note(&named, texts.len(), limit);
    Ok((encodings, truncated))
}

/// Prints what was written (`--json`: the [`Summary`]), on stderr when the vectors went to
/// stdout.
fn print_summary(
    args: &Args,
    vectors: usize,
    hidden: usize,
    limit: Limit,
    truncated: Vec<LineCut>,
) -> anyhow::Result<()> {
    let pooling = match args.pooling {
        Pooling::Cls => "cls",
        Pooling::Mean => "mean",
    };
    let summary = if args.stdout.json {
        json::to_string(&Summary {
            output: &args.output,
            vectors,
            dim: hidden,
            pooling,
            max_length: limit.as_arg(),
            truncated,
        })?
    } else {
        format!(
            "{}: {} vectors of {hidden} ({pooling} pooling)",
            args.output.display(),
            vectors,
        )
    };
    if output::is_stdout(&args.output) {
        eprintln!("{summary}");
    } else {
        outln!("{summary}")?;
    }
    Ok(())
}

/// The texts of the input file, one per line, with their line numbers checked.
fn read_texts(path: &Path, format: InputFormat) -> anyhow::Result<Vec<String>> {
    let content = roformer::memory::read_input_text(path)
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
        let pooled = pipeline::embed(model, &batch, pooling.library(), false, pad_id)?;
        for (&i, v) in chunk.iter().zip(pooled) {
            vectors[i] = v.map_err(|bad| {
                anyhow::anyhow!(
                    "line {}: the model's output is not finite ({} at token {} of {}, dimension \
                     {}): the checkpoint's weights overflow f32 on this text",
                    i + 1,
                    bad.value,
                    bad.token,
                    encodings[i].len(),
                    bad.dim
                )
            })?;
        }
        progress.inc(chunk.len() as u64);
    }
    Ok(vectors)
}

/// `vectors` (`n` rows of `hidden`) as a NumPy `.npy` file, format 1.0: magic, version,
/// header length (u16 LE), a header dict padded with spaces to a multiple of 64 bytes in all
/// (ending in a newline), then the f32 values little-endian, row-major.
pub(crate) fn npy_bytes(vectors: &[Vec<f32>], hidden: usize) -> anyhow::Result<Vec<u8>> {
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
    let mut out = Vec::with_capacity(header.len() + 10 + vectors.len() * hidden * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in vectors {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    Ok(out)
}

/// One JSON array of numbers per line.
fn json_lines(vectors: &[Vec<f32>]) -> anyhow::Result<Vec<u8>> {
    let mut out = String::new();
    for v in vectors {
        out.push_str(&json::to_string(v)?);
        out.push('\n');
    }
    Ok(out.into_bytes())
}
