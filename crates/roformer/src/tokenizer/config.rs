//! `tokenizer_config.json`: the settings transformers' RoFormerTokenizer reads from it.

use std::path::Path;

use serde::Deserialize;

use super::error::TokenizerError;
use super::normalize::NormalizeOptions;

/// The tokenizer settings of a checkpoint, with transformers' defaults.
///
/// Holds the fields of `tokenizer_config.json` that change RoFormerTokenizer's output;
/// others (`tokenize_chinese_chars`, which transformers 5 ignores for RoFormer,
/// `model_max_length`, `tokenizer_class`, ...) are accepted and ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizerConfig {
    /// Lowercase the text (default true).
    pub do_lower_case: bool,
    /// Strip accents; `None` (the default) means "same as `do_lower_case`".
    pub strip_accents: Option<bool>,
    /// The unknown token (default `[UNK]`).
    pub unk_token: String,
    /// The separator (default `[SEP]`).
    pub sep_token: String,
    /// The padding token (default `[PAD]`).
    pub pad_token: String,
    /// The classifier token that starts every input (default `[CLS]`).
    pub cls_token: String,
    /// The mask token (default `[MASK]`).
    pub mask_token: String,
}

/// `tokenizer_config.json` field for field (`null` or absent = transformers' default).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawConfig {
    do_lower_case: Option<bool>,
    strip_accents: Option<bool>,
    unk_token: Option<TokenText>,
    sep_token: Option<TokenText>,
    pad_token: Option<TokenText>,
    cls_token: Option<TokenText>,
    mask_token: Option<TokenText>,
}

/// A special token as transformers writes it: a string, or an AddedToken object with `content`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TokenText {
    Text(String),
    Added { content: String },
}

impl TokenText {
    fn or(token: Option<Self>, default: String) -> String {
        match token {
            Some(Self::Text(text) | Self::Added { content: text }) => text,
            None => default,
        }
    }
}

impl From<RawConfig> for TokenizerConfig {
    fn from(raw: RawConfig) -> Self {
        let d = Self::default();
        Self {
            do_lower_case: raw.do_lower_case.unwrap_or(d.do_lower_case),
            strip_accents: raw.strip_accents,
            unk_token: TokenText::or(raw.unk_token, d.unk_token),
            sep_token: TokenText::or(raw.sep_token, d.sep_token),
            pad_token: TokenText::or(raw.pad_token, d.pad_token),
            cls_token: TokenText::or(raw.cls_token, d.cls_token),
            mask_token: TokenText::or(raw.mask_token, d.mask_token),
        }
    }
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        Self {
            do_lower_case: true,
            strip_accents: None,
            unk_token: "[UNK]".into(),
            sep_token: "[SEP]".into(),
            pad_token: "[PAD]".into(),
            cls_token: "[CLS]".into(),
            mask_token: "[MASK]".into(),
        }
    }
}

impl TokenizerConfig {
    /// The settings of a checkpoint directory: `dir/tokenizer_config.json` when anything is at
    /// that path (so that a directory or an unreadable file of that name is an error, not
    /// silently skipped), transformers' defaults when nothing is.
    ///
    /// # Errors
    /// As [`TokenizerConfig::from_file`].
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join("tokenizer_config.json");
        if path.symlink_metadata().is_err() {
            return Ok(Self::default());
        }
        Self::from_file(&path)
    }

    /// Reads `tokenizer_config.json`.
    ///
    /// # Errors
    /// [`TokenizerError::Io`] if it cannot be read, [`TokenizerError::BadConfig`] if it is not
    /// a JSON object with fields of the right types.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text).map_err(|message| TokenizerError::BadConfig {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses the contents of a `tokenizer_config.json`.
    ///
    /// # Errors
    /// A description of what is malformed.
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str::<RawConfig>(text)
            .map(Self::from)
            .map_err(|err| err.to_string())
    }

    /// The normalisation these settings ask for.
    pub fn normalize_options(&self) -> NormalizeOptions {
        NormalizeOptions {
            lowercase: self.do_lower_case,
            strip_accents: self.strip_accents.unwrap_or(self.do_lower_case),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_transformers_defaults() {
        let config = TokenizerConfig::from_json("{}").unwrap();
        assert_eq!(config, TokenizerConfig::default());
        assert_eq!(
            config.normalize_options(),
            NormalizeOptions {
                lowercase: true,
                strip_accents: true
            }
        );
    }

    #[test]
    fn fields_and_added_token_objects() {
        let json = r#"{"do_lower_case": false, "strip_accents": true, "model_max_length": 1e30,
            "unk_token": {"__type": "AddedToken", "content": "<unk>", "lstrip": false},
            "tokenize_chinese_chars": true, "mask_token": null}"#;
        let config = TokenizerConfig::from_json(json).unwrap();
        assert!(!config.do_lower_case);
        assert_eq!(config.unk_token, "<unk>");
        assert_eq!(config.cls_token, "[CLS]");
        assert_eq!(config.mask_token, "[MASK]");
        assert_eq!(
            config.normalize_options(),
            NormalizeOptions {
                lowercase: false,
                strip_accents: true
            }
        );
    }

    #[test]
    fn wrong_types_are_errors() {
        assert!(TokenizerConfig::from_json(r#"{"do_lower_case": "yes"}"#).is_err());
        assert!(TokenizerConfig::from_json("[1]").is_err());
        assert!(TokenizerConfig::from_json("{").is_err());
    }
}
