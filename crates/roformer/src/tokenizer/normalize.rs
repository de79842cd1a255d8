//! BERT normalisation with alignments: clean text, strip accents, lowercase.
//!
//! This is Hugging Face tokenizers' `BertNormalizer` as transformers' RoFormerTokenizer
//! configures it (`clean_text: true`, `handle_chinese_chars: false`, `strip_accents` and
//! `lowercase` from the tokenizer config), applied in its order: clean, strip accents (NFD,
//! then drop nonspacing marks), lowercase. Each normalised char keeps the range of original
//! chars it came from, following tokenizers' `NormalizedString` rules: a replaced char keeps
//! its origin, an inserted char (a lowercase or NFD expansion) shares the origin of the
//! original char consumed last, a removed char disappears.
//!
//! Unicode tables: control, format and private-use chars and nonspacing marks come from the
//! `unicode_categories` crate and NFD from `unicode-normalization-alignments`, the tables
//! tokenizers itself uses, so chars classified differently by newer Unicode versions are
//! treated as transformers treats them; whitespace and lowercase come from Rust's `char`.

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::UnicodeNormalization;

/// Which optional steps [`Normalized::bert`] applies (text cleaning always runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormalizeOptions {
    /// Lowercase with Rust's `char::to_lowercase` (transformers' `do_lower_case`).
    pub lowercase: bool,
    /// NFD, then drop nonspacing marks (Mn) (transformers' `strip_accents`; `None` there means
    /// "same as lowercase").
    pub strip_accents: bool,
}

/// A normalised text in which every char knows the original chars it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    chars: Vec<char>,
    /// For `chars[i]`: the half-open range of original char indices it came from.
    origins: Vec<(usize, usize)>,
    /// Original index of the start of this text (the origin of a char inserted before any).
    start: usize,
}

impl Normalized {
    /// The identity normalisation of `chars`, which start at original char index `start`.
    pub fn new(chars: &[char], start: usize) -> Self {
        Self {
            chars: chars.to_vec(),
            origins: (start..start + chars.len()).map(|i| (i, i + 1)).collect(),
            start,
        }
    }

    /// Normalises `chars` (at original index `start`) as transformers' RoFormer does.
    pub fn bert(chars: &[char], start: usize, options: NormalizeOptions) -> Self {
        let mut text = Self::new(chars, start);
        text.clean();
        if options.strip_accents {
            text.strip_accents();
        }
        if options.lowercase {
            text.lowercase();
        }
        text
    }

    /// The normalised chars.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// The normalised text.
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    /// Original char range of the normalised chars `start..end` (`start < end <= len`): from
    /// the origin start of the first to the origin end of the last, as tokenizers converts
    /// offsets. An empty or out-of-range request gives the empty range at this text's start.
    pub fn original_range(&self, start: usize, end: usize) -> (usize, usize) {
        match (
            self.origins.get(start),
            end.checked_sub(1).and_then(|last| self.origins.get(last)),
        ) {
            (Some(first), Some(last)) if start < end => (first.0, last.1),
            _ => (self.start, self.start),
        }
    }

    /// Removes NUL, U+FFFD and control chars (categories Cc, Cf, Co, except tab, newline and
    /// carriage return) and turns every whitespace char into a space.
    fn clean(&mut self) {
        self.retain(|c| !(c == '\0' || c == '\u{fffd}' || is_control(c)));
        for c in &mut self.chars {
            if is_whitespace(*c) {
                *c = ' ';
            }
        }
    }

    /// Canonical decomposition (NFD, with canonical reordering), then drops nonspacing marks.
    fn strip_accents(&mut self) {
        let decomposed: Vec<(char, isize)> = self.chars.iter().copied().nfd().collect();
        self.transform(decomposed);
        self.retain(|c| !c.is_mark_nonspacing());
    }

    /// Lowercases char by char; a char whose lowercase is several chars expands in place.
    fn lowercase(&mut self) {
        let lowered: Vec<(char, isize)> = self
            .chars
            .iter()
            .flat_map(|c| {
                c.to_lowercase()
                    .enumerate()
                    .map(|(i, l)| (l, isize::from(i > 0)))
            })
            .collect();
        self.transform(lowered);
    }

    /// Keeps the chars for which `keep` holds, with their origins.
    fn retain(&mut self, keep: impl Fn(char) -> bool) {
        let (chars, origins) = self
            .chars
            .iter()
            .zip(&self.origins)
            .filter(|(c, _)| keep(**c))
            .map(|(c, o)| (*c, *o))
            .unzip();
        self.chars = chars;
        self.origins = origins;
    }

    /// Replaces the text by `dest`, tokenizers' `(char, change)` form: change 0 replaces the
    /// next old char (and takes its origin), change 1 inserts a char with the origin of the old
    /// char consumed last, change -n replaces the next old char and removes the n after it.
    fn transform(&mut self, dest: Vec<(char, isize)>) {
        let empty = (self.start, self.start);
        let mut consumed = 0usize;
        let mut chars = Vec::with_capacity(dest.len());
        let mut origins = Vec::with_capacity(dest.len());
        for (c, change) in dest {
            let origin = if change > 0 {
                consumed
                    .checked_sub(1)
                    .and_then(|i| self.origins.get(i))
                    .copied()
                    .unwrap_or(empty)
            } else {
                let origin = self.origins.get(consumed).copied().unwrap_or(empty);
                consumed += 1 + change.unsigned_abs();
                origin
            };
            chars.push(c);
            origins.push(origin);
        }
        self.chars = chars;
        self.origins = origins;
    }
}

/// Whitespace as BERT counts it: tab, newline, carriage return and Unicode White_Space.
fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// Control as BERT counts it: categories Cc, Cf and Co, except tab, newline, carriage return.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

/// The CJK ideograph ranges of tokenizers' `BertNormalizer` (its extension-C/D range starts at
/// U+2B920, not U+2B820 as in BERT's Python code; kept as tokenizers has it).
pub fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str, lowercase: bool, strip_accents: bool) -> Normalized {
        let chars: Vec<char> = s.chars().collect();
        Normalized::bert(
            &chars,
            0,
            NormalizeOptions {
                lowercase,
                strip_accents,
            },
        )
    }

    #[test]
    fn clean_removes_controls_and_maps_whitespace() {
        let n = norm("a\u{0}b\u{200b}c\td\u{a0}e\u{fffd}", false, false);
        assert_eq!(n.text(), "abc d e");
        assert_eq!(n.original_range(2, 3), (4, 5));
        assert_eq!(n.original_range(0, 7), (0, 9));
    }

    #[test]
    fn accents_are_stripped_before_lowercasing() {
        // İ: NFD gives I + U+0307 (a nonspacing mark), so lowercasing sees a plain I.
        let n = norm("Éİ", true, true);
        assert_eq!(n.text(), "ei");
        assert_eq!(n.original_range(1, 2), (1, 2));
    }

    #[test]
    fn lowercase_expansion_shares_the_origin() {
        let n = norm("xİ", true, false);
        assert_eq!(n.chars(), &['x', 'i', '\u{307}']);
        assert_eq!(n.original_range(2, 3), (1, 2));
        assert_eq!(n.original_range(1, 3), (1, 2));
    }

    #[test]
    fn hangul_decomposes_into_jamo_with_the_syllable_origin() {
        let n = norm("a한", false, true);
        assert_eq!(n.chars().len(), 4);
        for i in 1..4 {
            assert_eq!(n.original_range(i, i + 1), (1, 2));
        }
    }

    #[test]
    fn empty_or_inverted_ranges_map_to_the_start() {
        let chars: Vec<char> = "abc".chars().collect();
        let n = Normalized::new(&chars, 7);
        assert_eq!(n.original_range(1, 1), (7, 7));
        assert_eq!(n.original_range(2, 9), (7, 7));
        assert_eq!(n.original_range(0, 3), (7, 10));
    }
}
