//! Target `request`: the body of a `roformer serve` request, decoded as every route's body
//! type (`request::decode`, the server's own) and, where it decodes, checked as the handlers
//! check it: `Inputs::texts` and `encode_all` (the token limit, with and without `truncate`)
//! against the fixture tokenizer (`/similarity`'s texts, `/rerank`'s pairs through
//! `encode_pairs`, `/decode`'s ids through `decode_all` too), and for the completion routes the prompt (string, list or
//! ChatML messages), its tokens and every option against the tiny GGUF LLaMA (`Options::job`).
//! Nothing is run through a model: what the target reaches is the decoding and validation a
//! client's bytes meet before any queue.

use std::sync::OnceLock;

use llama::gguf::GgufFile;
use roformer::RoFormerTokenizer;
use roformer_serve::request::{decode, encode_all, encode_pairs, Inputs};
use roformer_serve::routes::completions::request::{ChatRequest, CompletionRequest, Options};
use roformer_serve::routes::decode::{decode_all, DecodeRequest};
use roformer_serve::routes::embed::EmbedRequest;
use roformer_serve::routes::embed_all::EmbedAllRequest;
use roformer_serve::routes::fill_mask::FillMaskRequest;
use roformer_serve::routes::openai::EmbeddingsRequest;
use roformer_serve::routes::predict::PredictRequest;
use roformer_serve::routes::rerank::RerankRequest;
use roformer_serve::routes::similarity::SimilarityRequest;
use roformer_serve::routes::tokenize::TokenizeRequest;
use roformer_serve::{ApiError, LlamaModel};

use crate::fixtures::{TINY_GGUF, TOKENIZER_CONFIG, VOCAB};
use crate::outcome::Outcome;

/// The fields of every body, for the JSON mutator.
pub const FIELDS: &[&str] = &[
    "inputs",
    "input",
    "normalize",
    "truncate",
    "pooling",
    "encoding_format",
    "model",
    "parameters",
    "top_k",
    "raw_scores",
    "add_special_tokens",
    "prompt",
    "messages",
    "role",
    "content",
    "max_tokens",
    "temperature",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "include_usage",
    "n",
    "source_sentence",
    "sentences",
    "query",
    "texts",
    "return_text",
    "ids",
    "skip_special_tokens",
];

/// The most inputs per request (`--max-client-batch-size`'s default).
const MAX_INPUTS: usize = 32;
/// The token limit per input (the fixture checkpoints' `max_position_embeddings`).
const MAX_INPUT_LENGTH: usize = 64;
/// `--max-tokens`'s default.
const MAX_TOKENS: usize = 512;

/// A body of each route.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"inputs": ["床前明月光", "疑是地上霜"], "normalize": false, "truncate": true, "pooling": "cls"}"#,
        r#"{"input": "床前明月光", "model": "m", "encoding_format": "base64"}"#,
        r#"{"inputs": "床前明[MASK]光", "parameters": {"top_k": 3}}"#,
        r#"{"inputs": ["月"], "raw_scores": true, "add_special_tokens": false}"#,
        r#"{"prompt": "hello there, the end.", "max_tokens": 8, "temperature": 0.7, "seed": 3, "stop": ["\n", "end"], "stream": true, "stream_options": {"include_usage": true}, "n": 1}"#,
        r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 4, "stop": "."}"#,
        r#"{"inputs": {"source_sentence": "床前明月光", "sentences": ["疑是地上霜", "月"]}, "parameters": {"truncate": true}}"#,
        r#"{"query": "明月", "texts": ["床前明月光", "疑是地上霜"], "truncate": false, "raw_scores": true, "return_text": true}"#,
        r#"{"ids": [[2, 5, 6, 3], [7]], "skip_special_tokens": false}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// The fixture tokenizer and the tiny LLaMA, built once per process.
struct Fixtures {
    tokenizer: RoFormerTokenizer,
    llama: LlamaModel,
}

fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let tokenizer = RoFormerTokenizer::from_texts(VOCAB, Some(TOKENIZER_CONFIG))
            .unwrap_or_else(|e| panic!("the fixture tokenizer does not load: {e}"));
        let llama = GgufFile::from_bytes("tiny.gguf", TINY_GGUF.to_vec())
            .map_err(|e| e.to_string())
            .and_then(|file| LlamaModel::from_file(&file).map_err(|e| e.to_string()))
            .unwrap_or_else(|e| panic!("the fixture GGUF does not load: {e}"));
        Fixtures { tokenizer, llama }
    })
}

/// Runs one input: accepted when some route's body decodes and passes its checks; else
/// rejected with the first route's reason.
pub fn run(data: &[u8]) -> Outcome {
    let results = [
        decode::<EmbedRequest>(data).and_then(|r| texts(r.inputs, r.truncate)),
        decode::<EmbeddingsRequest>(data).and_then(|r| texts(r.input, false)),
        decode::<FillMaskRequest>(data).and_then(|r| texts(r.inputs, false)),
        decode::<PredictRequest>(data).and_then(|r| texts(r.inputs, r.truncate)),
        decode::<TokenizeRequest>(data).and_then(|r| texts(r.inputs, true)),
        decode::<CompletionRequest>(data)
            .and_then(|r| job(r.prompt_text()?.to_owned(), &r.options, false)),
        decode::<ChatRequest>(data).and_then(|r| job(r.prompt_text()?, &r.options, true)),
        decode::<SimilarityRequest>(data).and_then(|r| {
            let (inputs, truncate) = r.texts()?;
            texts(inputs, truncate)
        }),
        decode::<EmbedAllRequest>(data).and_then(|r| texts(r.inputs, r.truncate)),
        decode::<RerankRequest>(data).and_then(|r| {
            let pairs = r.texts(MAX_INPUTS)?;
            let truncate = r.truncate.unwrap_or(false);
            encode_pairs(
                &fixtures().tokenizer,
                &r.query,
                &pairs,
                MAX_INPUT_LENGTH,
                truncate,
            )?;
            Ok(())
        }),
        decode::<DecodeRequest>(data).and_then(|r| {
            let skip = r.skip_special_tokens;
            decode_all(&fixtures().tokenizer, &r.sequences(MAX_INPUTS)?, skip)?;
            Ok(())
        }),
    ];
    if results.iter().any(Result::is_ok) {
        return Outcome::Accepted;
    }
    results
        .into_iter()
        .find_map(Result::err)
        .map_or(Outcome::Accepted, Outcome::rejected)
}

/// The checks of the text routes: count, emptiness, token limit.
fn texts(inputs: Inputs, truncate: bool) -> Result<(), ApiError> {
    let texts = inputs.texts(MAX_INPUTS)?;
    encode_all(&fixtures().tokenizer, &texts, MAX_INPUT_LENGTH, truncate)?;
    Ok(())
}

/// The checks of the completion routes: the prompt's tokens and every option.
fn job(prompt: String, options: &Options, chat: bool) -> Result<(), ApiError> {
    let llama = &fixtures().llama;
    let ids = llama.encode(&prompt)?;
    options.job(llama, ids, chat, MAX_TOKENS, 0)?;
    Ok(())
}
