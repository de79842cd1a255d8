//! Target `gguf`: the bytes of a GGUF file, parsed by `llama::gguf::GgufFile`, then its config,
//! its tokenizer (encoding and decoding a few texts) and its model built, and two tokens
//! generated (which refuses non-finite logits).

use llama::generate::{generate, Sampling};
use llama::gguf::GgufFile;
use llama::{Llama, LlamaConfig, LoadOptions, Tokenizer};
use rotary::Layout;

use crate::fixtures::TINY_GGUF;
use crate::outcome::Outcome;

/// Texts encoded by a tokenizer that loads: words, special tokens, digits, bytes.
const TEXTS: &[&str] = &[
    "hello there, the end.",
    "<|im_start|>user\nhi<|im_end|>\n",
    "3.14 x² ½ Café 東京 😀\u{0}\t  \r\n",
];

/// The tiny model written by gguf-py (`scripts/make_tiny_llama.py`).
pub fn seeds() -> Vec<Vec<u8>> {
    vec![TINY_GGUF.to_vec()]
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    Outcome::from_result(load_and_run(data))
}

fn load_and_run(data: &[u8]) -> llama::Result<Outcome> {
    let file = GgufFile::from_bytes("fuzz.gguf", data.to_vec())?;
    LlamaConfig::from_gguf(&file)?;
    let mut prompt = vec![1u32];
    if let Ok(tokenizer) = Tokenizer::from_gguf(&file) {
        for text in TEXTS {
            let ids = tokenizer.encode(text)?;
            tokenizer.decode(&ids)?;
            if !ids.is_empty() {
                prompt = ids;
            }
        }
    }
    // The half layout also permutes the q/k rows it reads.
    let options = LoadOptions {
        layout: Layout::Half,
        ..LoadOptions::default()
    };
    let model = Llama::load(&file, &options)?;
    let vocab = model.config().vocab_size as u32;
    prompt.iter_mut().for_each(|id| *id %= vocab);
    prompt.truncate(16);
    generate(&model, &prompt, 2, Sampling::GREEDY, None, |_| Ok(()))?;
    Ok(Outcome::Accepted)
}
