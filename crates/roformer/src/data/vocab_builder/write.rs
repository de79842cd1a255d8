//! Writing `vocab.txt` and `tokenizer_config.json`.

use std::path::Path;

use super::BuiltVocab;
use crate::data::error::DataError;
use crate::tokenizer::TokenizerConfig;

/// The `tokenizer_config.json` of `config`: its lowercase and accent settings and special
/// tokens, `tokenize_chinese_chars: true` and `tokenizer_class: "RoFormerTokenizer"` (which
/// [`TokenizerConfig::from_json`] and transformers' `AutoTokenizer` both accept).
pub fn tokenizer_config_json(config: &TokenizerConfig) -> String {
    let value = serde_json::json!({
        "do_lower_case": config.do_lower_case,
        "strip_accents": config.strip_accents,
        "tokenize_chinese_chars": true,
        "unk_token": config.unk_token,
        "sep_token": config.sep_token,
        "pad_token": config.pad_token,
        "cls_token": config.cls_token,
        "mask_token": config.mask_token,
        "tokenizer_class": "RoFormerTokenizer",
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    text
}

/// Writes [`tokenizer_config_json`] to `path`.
///
/// # Errors
/// [`DataError::Io`] if the file cannot be written.
pub fn write_tokenizer_config(path: &Path, config: &TokenizerConfig) -> Result<(), DataError> {
    std::fs::write(path, tokenizer_config_json(config)).map_err(DataError::io(path))
}

/// Writes `dir/vocab.txt` (one token per line, `\n` after each) and
/// `dir/tokenizer_config.json`, creating `dir` if needed: a directory
/// `RoFormerTokenizer::from_dir` loads.
///
/// # Errors
/// [`DataError::Io`] if the directory or a file cannot be written.
pub fn write_vocab_dir(
    dir: &Path,
    built: &BuiltVocab,
    config: &TokenizerConfig,
) -> Result<(), DataError> {
    std::fs::create_dir_all(dir).map_err(DataError::io(dir))?;
    let mut text = String::new();
    for token in &built.tokens {
        text.push_str(token);
        text.push('\n');
    }
    let vocab = dir.join("vocab.txt");
    std::fs::write(&vocab, text).map_err(DataError::io(&vocab))?;
    write_tokenizer_config(&dir.join("tokenizer_config.json"), config)
}
