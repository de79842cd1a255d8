//! What `GET /info` and `GET /v1/models` say about the GGUF model of `--gguf`: its file, its
//! architecture and sizes (as the file's `llama.*` keys give them), its context and vocabulary,
//! and how its weights are quantized. Read once when the model loads.

use std::collections::BTreeMap;
use std::path::Path;

use llama::gguf::GgufFile;
use llama::LlamaConfig;
use serde::Serialize;

/// The GGUF model, as `/info` shows it under `generation_model`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelCard {
    /// How answers name the model: the file's path as given.
    pub model_id: String,
    /// The file's name (its path's last part).
    pub file_name: String,
    /// `general.name`, when the file has it.
    pub name: Option<String>,
    /// `general.architecture` (always `llama`: no other is loaded).
    pub architecture: String,
    /// The quantization of the bulk of the weights: llama.cpp's name for the file's
    /// `general.file_type` (`Q4_1`, `Q8_0`, ...), or, without a known one, the tensor type
    /// holding the most bytes.
    pub quantization: String,
    /// How many tensors the file stores in each ggml type (`F32`, `Q4_1`, ...).
    pub tensor_types: BTreeMap<String, usize>,
    /// Weights in all tensors: the sum of their element counts.
    pub parameters: usize,
    /// Bytes of tensor data in the file.
    pub weight_bytes: usize,
    /// Tokens the model holds, prompt and completion together (`llama.context_length`).
    pub context_length: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Decoder blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (fewer than `heads`: grouped-query attention).
    pub kv_heads: usize,
    /// RoPE base: `theta_i = base^(-2i/rotary_dim)`.
    pub rope_base: f64,
    /// Whether the chat template is ChatML, so `/v1/chat/completions` is served.
    pub chat: bool,
}

impl ModelCard {
    /// Describes `file`, whose decoder has `config`; `chat` says whether its chat route works.
    pub fn read(file: &GgufFile, config: &LlamaConfig, chat: bool) -> ModelCard {
        let mut tensor_types = BTreeMap::new();
        let mut bytes_by_type = BTreeMap::<String, usize>::new();
        for info in file.tensors().values() {
            let kind = format!("{:?}", info.dtype);
            *tensor_types.entry(kind.clone()).or_insert(0) += 1;
            *bytes_by_type.entry(kind).or_insert(0) += info.bytes;
        }
        let bulkiest = bytes_by_type
            .iter()
            .max_by_key(|(_, bytes)| **bytes)
            .map_or_else(|| "none".to_owned(), |(kind, _)| kind.clone());
        let quantization = file
            .get("general.file_type")
            .and_then(|v| v.as_u64())
            .and_then(file_type_name)
            .map_or(bulkiest, str::to_owned);
        let text = |key: &str| file.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        ModelCard {
            model_id: file.path().display().to_string(),
            file_name: file_name(file.path()),
            name: text("general.name"),
            architecture: text("general.architecture").unwrap_or_else(|| "llama".into()),
            quantization,
            tensor_types,
            parameters: file.tensors().values().map(|t| t.elements()).sum(),
            weight_bytes: bytes_by_type.values().sum(),
            context_length: config.context_length,
            vocab_size: config.vocab_size,
            layers: config.layers,
            hidden_size: config.hidden,
            intermediate_size: config.intermediate,
            heads: config.heads,
            kv_heads: config.kv_heads,
            rope_base: config.rope_base,
            chat,
        }
    }
}

/// The last part of `path`, or the whole path when it has none.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// llama.cpp's name for a `general.file_type` (its `llama_ftype`, `MOSTLY_` dropped), for the
/// types whose weights this crate can hold or that are common; `None` for others.
fn file_type_name(file_type: u64) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        32 => "BF16",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_types_are_named_as_llama_cpp_names_them() {
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(7), Some("Q8_0"));
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
        assert_eq!(file_type_name(4), None, "4 was removed from llama.cpp");
    }

    #[test]
    fn the_file_name_is_the_last_part_of_the_path() {
        assert_eq!(file_name(Path::new("data/m/SmolLM2.gguf")), "SmolLM2.gguf");
        assert_eq!(file_name(Path::new("/")), "/");
    }
}
