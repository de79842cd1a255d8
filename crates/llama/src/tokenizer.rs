//! The tokenizer a GGUF file describes (`tokenizer.ggml.*`), built with Hugging Face's
//! `tokenizers`: byte-level BPE over the file's vocabulary and merges, its pre-tokenizer chosen
//! by `tokenizer.ggml.pre`, and its control tokens matched whole.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

use crate::error::{LlamaError, Result};
use crate::gguf::{Array, GgufFile};

/// `tokenizer.ggml.token_type` of a control token (`<|im_start|>`, `<|endoftext|>`).
const CONTROL: i64 = 3;
/// `tokenizer.ggml.token_type` of a user-defined token, matched whole but not special.
const USER_DEFINED: i64 = 4;

/// A byte-level BPE tokenizer with the special tokens of its model.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    tokens: Vec<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
}

impl Tokenizer {
    /// Builds the tokenizer of a file whose `tokenizer.ggml.model` is `gpt2` (byte-level BPE).
    ///
    /// Pre-tokenizers (`tokenizer.ggml.pre`), as llama.cpp splits text before BPE:
    /// - `gpt2`: the GPT-2 regex;
    /// - `smollm`, `starcoder`, `refact`, `codeshell`: every digit on its own, then the GPT-2
    ///   regex.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] for another model or pre-tokenizer, [`LlamaError::MissingKey`]
    /// or [`LlamaError::BadValue`] for absent or malformed vocabulary data (a bos, eos, padding
    /// or unknown token id outside the vocabulary among them),
    /// [`LlamaError::Tokenizer`] when `tokenizers` refuses the merges.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
        let model = file.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(LlamaError::Unsupported(format!(
                "tokenizer model `{model}`; byte-level BPE (`gpt2`) is read"
            )));
        }
        let pre = match file.get("tokenizer.ggml.pre") {
            Some(v) => v.as_str().unwrap_or("?"),
            None => "gpt2",
        };
        let byte_level = ByteLevel::new(false, true, true);
        let pre_tokenizer: PreTokenizerWrapper = match pre {
            "gpt2" | "default" => byte_level.into(),
            "smollm" | "starcoder" | "refact" | "codeshell" => {
                Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()
            }
            other => {
                return Err(LlamaError::Unsupported(format!(
                "pre-tokenizer `{other}`; gpt2, smollm, starcoder, refact and codeshell are read"
            )))
            }
        };
        let tokens = strings(file, "tokenizer.ggml.tokens")?.to_vec();
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.clone(), id as u32))
            .collect();
        let merges = strings(file, "tokenizer.ggml.merges")?
            .iter()
            .map(|merge| {
                merge
                    .split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| LlamaError::BadValue {
                        key: "tokenizer.ggml.merges".into(),
                        what: format!("merge `{merge}` is not two tokens separated by a space"),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| LlamaError::Tokenizer(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let (special, plain) = added_tokens(file, &tokens)?;
        let tokenizer_error = |e: tokenizers::Error| LlamaError::Tokenizer(e.to_string());
        inner.add_special_tokens(special).map_err(tokenizer_error)?;
        inner.add_tokens(plain).map_err(tokenizer_error)?;

        let id = |key: &str| -> Result<Option<u32>> {
            match file.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
                    _ => Err(LlamaError::BadValue {
                        key: key.into(),
                        what: format!("{v:?} is not a token id below {}", tokens.len()),
                    }),
                },
            }
        };
        let add_bos = file
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        Ok(Tokenizer {
            inner,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos,
            tokens,
        })
    }

    /// Token ids of `text`, with the beginning-of-sequence token first when the model asks
    /// for one. Control tokens written in the text (`<|im_start|>`) are matched whole.
    ///
    /// # Errors
    /// [`LlamaError::Tokenizer`] when `tokenizers` fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| LlamaError::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if let (true, Some(bos)) = (self.add_bos, self.bos) {
            ids.push(bos);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The text of `ids` (byte-level pieces joined and read as UTF-8; special tokens kept).
    ///
    /// # Errors
    /// [`LlamaError::TokenId`] for an id outside the vocabulary; [`LlamaError::Tokenizer`] when
    /// `tokenizers` fails.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.tokens.len()) {
            return Err(LlamaError::TokenId {
                id,
                vocab_size: self.tokens.len(),
            });
        }
        self.inner
            .decode(ids, false)
            .map_err(|e| LlamaError::Tokenizer(e.to_string()))
    }

    /// The vocabulary entry of `id` as the file spells it (byte-level, `Ġ` for a space).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The padding token, if the file names one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// The unknown token, if the file names one.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
}

/// Control tokens (special, matched whole, kept when decoding) and user-defined tokens (matched
/// whole, not special), from `tokenizer.ggml.token_type`.
fn added_tokens(file: &GgufFile, tokens: &[String]) -> Result<(Vec<AddedToken>, Vec<AddedToken>)> {
    let Some(types) = file.get("tokenizer.ggml.token_type") else {
        return Ok((Vec::new(), Vec::new()));
    };
    let types = match types.as_array() {
        Some(Array::Signed(t)) if t.len() == tokens.len() => t.clone(),
        Some(Array::Unsigned(t)) if t.len() == tokens.len() => {
            t.iter().map(|&v| v as i64).collect()
        }
        _ => {
            return Err(LlamaError::BadValue {
                key: "tokenizer.ggml.token_type".into(),
                what: format!("an integer per token ({}) was expected", tokens.len()),
            })
        }
    };
    let mut special = Vec::new();
    let mut plain = Vec::new();
    for (token, kind) in tokens.iter().zip(types) {
        match kind {
            CONTROL => special.push(AddedToken::from(token.clone(), true).normalized(false)),
            USER_DEFINED => plain.push(AddedToken::from(token.clone(), false).normalized(false)),
            _ => {}
        }
    }
    Ok((special, plain))
}

fn strings<'a>(file: &'a GgufFile, key: &str) -> Result<&'a [String]> {
    match file.get(key).map(|v| v.as_array()) {
        None => Err(LlamaError::MissingKey(key.into())),
        Some(Some(Array::String(list))) if !list.is_empty() => Ok(list),
        Some(_) => Err(LlamaError::BadValue {
            key: key.into(),
            what: "a non-empty array of strings was expected".into(),
        }),
    }
}
