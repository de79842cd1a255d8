//! `roformer llama generate`: continue a prompt, streaming the text as it is chosen.

use std::io::Write;

use anyhow::Context;
use llama::generate::{generate, Sampling};
use llama::Tokenizer;

use super::ModelArgs;
use crate::json;
use crate::output::outln;
use crate::output::OutputArgs;

/// Arguments of `roformer llama generate`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "Print one JSON object (ids, text, timings) instead of streaming text"
)))]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// New tokens at most (generation also stops after the end-of-sequence token).
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// 0 for greedy decoding; above 0, sample from softmax(logits / T).
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Seed of the sampler (with --temperature above 0).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Wrap the prompt as one user turn of the model's ChatML template
    /// (`<|im_start|>user ... <|im_end|>` then `<|im_start|>assistant`).
    #[arg(long)]
    chat: bool,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// The prompt.
    prompt: String,
}

/// Generates and prints.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (file, model) = args.model.open()?;
    let tokenizer = Tokenizer::from_gguf(&file).context("building the tokenizer")?;
    let prompt = if args.chat {
        chat_prompt(&file, &args.prompt)?
    } else {
        args.prompt.clone()
    };
    let ids = tokenizer.encode(&prompt)?;
    if ids.is_empty() {
        anyhow::bail!("the prompt is empty: give some text to continue");
    }
    let sampling = Sampling {
        temperature: args.temperature,
        seed: args.seed,
    };
    let mut stream = TextStream::new(&tokenizer, !args.stdout.json);
    let generation = generate(
        &model,
        &ids,
        args.max_new_tokens,
        sampling,
        tokenizer.eos(),
        |token| stream.push(token),
    )?;
    stream.finish()?;
    let text = tokenizer.decode(&generation.tokens)?;
    let prefill = generation.prefill_tokens_per_second();
    let decode = generation.decode_tokens_per_second();
    if args.stdout.json {
        let out = serde_json::json!({
            "prompt": prompt,
            "prompt_ids": ids,
            "tokens": generation.tokens,
            "text": text,
            "stopped_at_eos": generation.stopped_at_eos,
            "prefill_tokens_per_second": json::finite("prefill_tokens_per_second", prefill)?,
            "decode_tokens_per_second": json::finite("decode_tokens_per_second", decode)?,
            "prefill_seconds": generation.prefill.as_secs_f64(),
            "decode_seconds": generation.decode.as_secs_f64(),
        });
        outln!("{}", json::to_string_pretty(&out)?)?;
    } else {
        eprintln!(
            "prefill: {} tokens, {:.1} tokens/s; decode: {} tokens, {:.1} tokens/s{}",
            generation.prompt_len,
            prefill,
            generation.tokens.len().saturating_sub(1),
            decode,
            if generation.stopped_at_eos {
                "; stopped at end of sequence"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `prompt` as one user turn of a ChatML template; an error for a model whose template is not
/// ChatML.
fn chat_prompt(file: &llama::gguf::GgufFile, prompt: &str) -> anyhow::Result<String> {
    let template = file
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if !template.contains("<|im_start|>") {
        anyhow::bail!("--chat needs a ChatML model (its chat template has no <|im_start|>)");
    }
    Ok(format!(
        "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    ))
}

/// Prints generated text as tokens arrive. Byte-level tokens can end inside a UTF-8 character,
/// so the text printed so far is the decoded prefix up to its last complete character.
struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    tokens: Vec<u32>,
    printed: usize,
    enabled: bool,
}

impl<'a> TextStream<'a> {
    fn new(tokenizer: &'a Tokenizer, enabled: bool) -> Self {
        TextStream {
            tokenizer,
            tokens: Vec::new(),
            printed: 0,
            enabled,
        }
    }

    fn push(&mut self, token: u32) -> llama::Result<()> {
        self.tokens.push(token);
        if !self.enabled {
            return Ok(());
        }
        let text = self.tokenizer.decode(&self.tokens)?;
        let complete = text.trim_end_matches('\u{FFFD}');
        if complete.len() > self.printed {
            let mut out = std::io::stdout().lock();
            // A closed pipe ends the output, not the generation's bookkeeping.
            let _ = out.write_all(complete.as_bytes().get(self.printed..).unwrap_or(&[]));
            let _ = out.flush();
            self.printed = complete.len();
        }
        Ok(())
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let text = self.tokenizer.decode(&self.tokens)?;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes().get(self.printed..).unwrap_or(&[]));
        let _ = writeln!(out);
        Ok(())
    }
}
