//! `--max-length` of `embed` and `fill-mask`: a text longer than the limit is cut to its first
//! tokens (`[CLS] ... [SEP]` kept), and the command says so on stderr and in its JSON.
//!
//! The default is the checkpoint's `max_position_embeddings`, as sentence-embedding tools do:
//! attention costs the square of the length, and nothing else would bound it (one 1 MB line
//! ran for minutes). Rotary positions have no hard limit, so `--max-length 0` lets any length
//! through, and a value above the default is taken as given.

use std::fmt;

use serde::Serialize;

/// Parses `--max-length`: 0 (no limit) or at least 2 (room for `[CLS]` and `[SEP]`).
///
/// # Errors
/// Not a number, or 1.
pub fn parse(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(1) => Err("1 leaves no room for [CLS] and [SEP]: give 0 (no limit) or 2 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The limit a command applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Every token is kept (`--max-length 0`).
    None,
    /// `--max-length N` as given.
    Given(usize),
    /// The checkpoint's `max_position_embeddings` (no `--max-length`).
    Default(usize),
}

impl Limit {
    /// The limit of `--max-length` (`arg`) for a checkpoint with `max_position_embeddings`.
    pub fn new(arg: Option<u32>, max_position_embeddings: usize) -> Self {
        match arg {
            Some(0) => Limit::None,
            Some(n) => Limit::Given(n as usize),
            None => Limit::Default(max_position_embeddings.max(2)),
        }
    }

    /// Most tokens kept, `None` for no limit.
    pub fn tokens(self) -> Option<usize> {
        match self {
            Limit::None => None,
            Limit::Given(n) | Limit::Default(n) => Some(n),
        }
    }

    /// The limit as `--max-length` takes it (0: none).
    pub fn as_arg(self) -> usize {
        self.tokens().unwrap_or(0)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::None => write!(f, "--max-length 0 (no limit)"),
            Limit::Given(n) => write!(f, "--max-length {n}"),
            Limit::Default(n) => write!(
                f,
                "--max-length {n}, the default: the checkpoint's max_position_embeddings"
            ),
        }
    }
}

/// What truncation did to one text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// Tokens of the whole text, `[CLS]` and `[SEP]` included.
    pub tokens: usize,
    /// Tokens kept.
    pub kept: usize,
}

/// How many cut texts [`note`] lists one by one.
const LISTED: usize = 20;

/// Says on stderr which of `total` texts were cut under `limit`: `cuts` holds a name for each
/// (such as `line 3`), listed up to a few dozen.
pub fn note(cuts: &[(String, Cut)], total: usize, limit: Limit) {
    if cuts.is_empty() {
        return;
    }
    let what = match (total, cuts.len()) {
        (1, _) => "the text is".to_owned(),
        (_, 1) => format!("1 of {total} texts is"),
        (_, n) => format!("{n} of {total} texts are"),
    };
    eprintln!(
        "note: {what} longer than {} tokens ({limit}) and cut to that many, [CLS] ... [SEP] \
         kept; --max-length 0 keeps every token:",
        limit.as_arg()
    );
    for (name, cut) in cuts.iter().take(LISTED) {
        eprintln!("  {name}: {} tokens cut to {}", cut.tokens, cut.kept);
    }
    if cuts.len() > LISTED {
        eprintln!("  ... and {} more", cuts.len() - LISTED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_no_limit_and_one_is_refused() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("2"), Ok(2));
        assert!(parse("1").unwrap_err().contains("[CLS]"));
        assert!(parse("-3").is_err());
        assert_eq!(Limit::new(Some(0), 512).tokens(), None);
        assert_eq!(Limit::new(Some(9), 512).tokens(), Some(9));
        assert_eq!(Limit::new(None, 512), Limit::Default(512));
        assert_eq!(Limit::new(None, 512).as_arg(), 512);
    }
}
