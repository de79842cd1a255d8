//! Greedy generation from a GGUF file: tokenize a prompt, continue it, decode as it goes.
//! Without arguments it runs the tiny random model of the tests (its text is noise).
//!
//! `cargo run --release -p llama --example generate -- model.gguf "Once upon a time" 32`

use std::io::Write;

use llama::generate::{generate, Sampling};
use llama::gguf::GgufFile;
use llama::{Llama, LoadOptions, Tokenizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tiny-llama/tiny.gguf"
    );
    let path = args.next().unwrap_or(tiny.into());
    let prompt = args.next().unwrap_or("Hello, world".into());
    let max_new: usize = args.next().map_or(Ok(16), |n| n.parse())?;

    let file = GgufFile::open(&path)?;
    let model = Llama::load(&file, &LoadOptions::default())?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let ids = tokenizer.encode(&prompt)?;
    print!("{prompt}");
    let out = generate(
        &model,
        &ids,
        max_new,
        Sampling::GREEDY,
        tokenizer.eos(),
        |id| {
            print!("{}", tokenizer.decode(&[id])?);
            std::io::stdout().flush().ok();
            Ok(())
        },
    )?;
    println!(
        "\n{} tokens; prefill {:.0} tokens/s, decode {:.0} tokens/s",
        out.tokens.len(),
        out.prefill_tokens_per_second(),
        out.decode_tokens_per_second()
    );
    Ok(())
}
