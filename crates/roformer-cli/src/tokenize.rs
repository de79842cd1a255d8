//! `roformer tokenize`: text to token ids with a checkpoint's tokenizer.

use std::io::Write;
use std::path::PathBuf;

use roformer::Encoding;

use crate::default_model;
use crate::output::OutputArgs;

/// Arguments of `roformer tokenize`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per text and line: {\"input_ids\", \"tokens\", \"offsets\"}; offsets \
     are [start, end) char ranges in the text, [0, 0] for [CLS] and [SEP]"
)))]
pub struct Args {
    /// Checkpoint directory: vocab.txt and, if present, tokenizer_config.json [default: the
    /// built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// Cut each text so that it has at most this many tokens, `[CLS]` and `[SEP]` included.
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
    /// The texts, each encoded as `[CLS]` text `[SEP]`.
    #[arg(required = true, value_name = "TEXT")]
    texts: Vec<String>,
}

/// Prints the ids of each text on a line of its own (space-separated), or JSON lines.
pub fn run(args: Args) -> anyhow::Result<()> {
    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let mut out = std::io::stdout().lock();
    for text in &args.texts {
        let encoding = match args.max_length {
            Some(max_length) => tokenizer.encode_truncated(text, None, max_length)?,
            None => tokenizer.encode(text),
        };
        writeln!(out, "{}", render(&encoding, args.stdout.json)?)?;
    }
    out.flush()?;
    Ok(())
}

/// One output line for `encoding`.
fn render(encoding: &Encoding, json: bool) -> anyhow::Result<String> {
    if json {
        let line = JsonLine {
            input_ids: &encoding.ids,
            tokens: &encoding.tokens,
            offsets: &encoding.offsets,
        };
        crate::json::to_string(&line)
    } else {
        let ids: Vec<String> = encoding.ids.iter().map(u32::to_string).collect();
        Ok(ids.join(" "))
    }
}

/// The `--json` object, fields in this order; offsets serialise as `[start, end]`.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    input_ids: &'a [u32],
    tokens: &'a [String],
    offsets: &'a [(usize, usize)],
}
