//! The GGUF LLaMA of `--gguf`: the decoder, its tokenizer, its context, and whether its chat
//! template is ChatML (which `/v1/chat/completions` writes, as `roformer llama generate --chat`).

use std::path::Path;

use llama::gguf::GgufFile;
use llama::{Llama, LoadOptions, Tokenizer};

use super::describe::ModelCard;
use crate::error::{ApiError, ServeError};

/// ChatML's turn markers.
const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

/// A loaded decoder and what the completion routes need of it. Shared read-only.
#[derive(Debug)]
pub struct LlamaModel {
    /// How the model is named in answers (the file's path).
    pub model_id: String,
    model: Llama,
    tokenizer: Tokenizer,
    /// `<|im_end|>`'s id when the chat template is ChatML (else the chat route refuses).
    chat_end: Option<u32>,
    /// What `/info` and `/v1/models` say about it.
    card: ModelCard,
}

impl LlamaModel {
    /// Reads the GGUF file at `path` and builds the decoder (quantized weights run on candle's
    /// kernels, as `roformer llama generate` does by default) and its tokenizer.
    ///
    /// # Errors
    /// [`ServeError::Gguf`] naming the file when it does not read or build.
    pub fn load(path: &Path) -> Result<LlamaModel, ServeError> {
        let file = GgufFile::open(path).map_err(|source| ServeError::Gguf {
            path: path.display().to_string(),
            source,
        })?;
        LlamaModel::from_file(&file)
    }

    /// Builds the decoder and tokenizer of a parsed GGUF file (named by its path).
    ///
    /// # Errors
    /// [`ServeError::Gguf`] naming the file when the model or tokenizer does not build.
    pub fn from_file(file: &GgufFile) -> Result<LlamaModel, ServeError> {
        let model_id = file.path().display().to_string();
        let err = |source| ServeError::Gguf {
            path: model_id.clone(),
            source,
        };
        let model = Llama::load(file, &LoadOptions::default()).map_err(err)?;
        let tokenizer = Tokenizer::from_gguf(file).map_err(err)?;
        let chat_end = chat_end(file, &tokenizer);
        let card = ModelCard::read(file, model.config(), chat_end.is_some());
        Ok(LlamaModel {
            model_id,
            model,
            tokenizer,
            chat_end,
            card,
        })
    }

    /// The decoder.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Its description: file, architecture, sizes, quantization.
    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    /// Tokens the model can hold: prompt and completion together.
    pub fn context(&self) -> usize {
        self.model.config().context_length
    }

    /// Bytes of key/value cache one position of a sequence takes: keys and values (f32) of
    /// every key/value head of every layer, `layers * 2 * kv_heads * head_dim * 4`.
    pub fn kv_bytes_per_token(&self) -> usize {
        let c = self.model.config();
        c.layers * 2 * c.kv_heads * c.head_dim * std::mem::size_of::<f32>()
    }

    /// Whether `/v1/chat/completions` can be served (the chat template is ChatML).
    pub fn has_chat(&self) -> bool {
        self.chat_end.is_some()
    }

    /// The tokens that end a completion: end of sequence, and `<|im_end|>` for a chat.
    pub fn stop_ids(&self, chat: bool) -> Vec<u32> {
        let mut ids: Vec<u32> = self.tokenizer.eos().into_iter().collect();
        if chat {
            ids.extend(self.chat_end);
        }
        ids
    }

    /// Token ids of `text`.
    ///
    /// # Errors
    /// [`ApiError::Backend`] when the tokenizer fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ApiError> {
        self.tokenizer
            .encode(text)
            .map_err(|e| ApiError::Backend(format!("tokenizer: {e}")))
    }
}

/// A chat as ChatML: each message as `<|im_start|>ROLE\nCONTENT<|im_end|>\n`, then the
/// assistant's turn opened.
pub fn chat_prompt<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut prompt = String::new();
    for (role, content) in messages {
        prompt.push_str(&format!("{IM_START}{role}\n{content}{IM_END}\n"));
    }
    prompt.push_str(IM_START);
    prompt.push_str("assistant\n");
    prompt
}

/// `<|im_end|>`'s id when the template is ChatML and the marker is one token.
fn chat_end(file: &GgufFile, tokenizer: &Tokenizer) -> Option<u32> {
    let template = file.get("tokenizer.chat_template")?.as_str()?;
    if !template.contains(IM_START) {
        return None;
    }
    match tokenizer.encode(IM_END).ok()?.as_slice() {
        [id] => Some(*id),
        [bos, id] if Some(*bos) == tokenizer.bos() => Some(*id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::chat_prompt;

    #[test]
    fn chatml_opens_the_assistant_turn() {
        assert_eq!(
            chat_prompt([("system", "be brief"), ("user", "hi")]),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }
}
