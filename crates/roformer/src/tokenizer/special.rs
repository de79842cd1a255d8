//! The special tokens: their ids, and finding them in raw text.

use super::config::TokenizerConfig;
use super::error::TokenizerError;
use super::vocab::Vocab;

/// Ids of the special tokens of a tokenizer, looked up in its vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `[UNK]`: words that cannot be split into vocabulary pieces.
    pub unk: u32,
    /// `[CLS]`: first token of every input.
    pub cls: u32,
    /// `[SEP]`: ends each sequence.
    pub sep: u32,
    /// `[PAD]`: fills batches to a common length.
    pub pad: u32,
    /// `[MASK]`: what fill-mask predicts; `None` when the vocabulary lacks it.
    pub mask: Option<u32>,
    /// The token texts found in raw text, with their ids.
    texts: Vec<(Vec<char>, u32)>,
}

impl SpecialTokens {
    /// Looks the special tokens of `config` up in `vocab`.
    ///
    /// # Errors
    /// [`TokenizerError::MissingSpecialToken`] naming the first of unk, cls, sep, pad that the
    /// vocabulary lacks (the mask token is optional).
    pub fn new(vocab: &Vocab, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        let required = |role: &'static str, token: &str| {
            vocab
                .token_to_id(token)
                .ok_or_else(|| TokenizerError::MissingSpecialToken {
                    role,
                    token: token.to_owned(),
                })
        };
        let unk = required("unk", &config.unk_token)?;
        let cls = required("cls", &config.cls_token)?;
        let sep = required("sep", &config.sep_token)?;
        let pad = required("pad", &config.pad_token)?;
        let mask = vocab.token_to_id(&config.mask_token);
        let mut texts = Vec::new();
        for (token, id) in [
            (&config.pad_token, Some(pad)),
            (&config.unk_token, Some(unk)),
            (&config.cls_token, Some(cls)),
            (&config.sep_token, Some(sep)),
            (&config.mask_token, mask),
        ] {
            if let (false, Some(id)) = (token.is_empty(), id) {
                texts.push((token.chars().collect(), id));
            }
        }
        Ok(Self {
            unk,
            cls,
            sep,
            pad,
            mask,
            texts,
        })
    }

    /// Whether `id` is one of the special tokens (what `skip_special_tokens` drops).
    pub fn contains(&self, id: u32) -> bool {
        self.texts.iter().any(|(_, special)| *special == id)
    }

    /// Cuts `chars` at the special tokens it contains, verbatim (before any normalisation:
    /// `[mask]` is not `[MASK]`), leftmost first and longest first among those starting at the
    /// same char, as tokenizers' added-vocabulary matcher does.
    pub fn split(&self, chars: &[char]) -> Vec<Segment> {
        let mut segments = Vec::new();
        let mut text_start = 0;
        let mut i = 0;
        while i < chars.len() {
            let found = self
                .texts
                .iter()
                .filter(|(token, _)| chars[i..].starts_with(token))
                .max_by_key(|(token, _)| token.len());
            match found {
                Some((token, id)) => {
                    if text_start < i {
                        segments.push(Segment::Text(text_start..i));
                    }
                    segments.push(Segment::Special(*id, i..i + token.len()));
                    i += token.len();
                    text_start = i;
                }
                None => i += 1,
            }
        }
        if text_start < chars.len() {
            segments.push(Segment::Text(text_start..chars.len()));
        }
        segments
    }
}

/// A part of the raw text: a special token, or text between them (char ranges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A special token with its id.
    Special(u32, std::ops::Range<usize>),
    /// Ordinary text, to normalise and split.
    Text(std::ops::Range<usize>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specials(vocab: &str) -> Result<SpecialTokens, TokenizerError> {
        SpecialTokens::new(&Vocab::from_text(vocab), &TokenizerConfig::default())
    }

    #[test]
    fn missing_required_tokens_are_named() {
        let err = specials("[PAD]\n[CLS]\n[SEP]\n").unwrap_err();
        assert!(
            matches!(err, TokenizerError::MissingSpecialToken { role: "unk", .. }),
            "{err}"
        );
        let err = specials("[UNK]\n[CLS]\n[SEP]\n").unwrap_err();
        assert!(err.to_string().contains("pad token \"[PAD]\""), "{err}");
        let ok = specials("[UNK]\n[CLS]\n[SEP]\n[PAD]\n").unwrap();
        assert_eq!(ok.mask, None);
    }

    #[test]
    fn split_finds_tokens_verbatim() {
        let s = specials("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n").unwrap();
        let chars: Vec<char> = "a[MASK][mask][SEP]".chars().collect();
        assert_eq!(
            s.split(&chars),
            [
                Segment::Text(0..1),
                Segment::Special(4, 1..7),
                Segment::Text(7..13),
                Segment::Special(3, 13..18),
            ]
        );
        assert!(s.split(&[]).is_empty());
    }
}
