//! WordPiece: greedy longest-match-first split of one word into vocabulary pieces.

use super::vocab::Vocab;

/// Prefix of a piece that continues a word.
pub const CONTINUATION: &str = "##";

/// Words longer than this many chars become the unknown token (tokenizers' default).
pub const MAX_INPUT_CHARS_PER_WORD: usize = 100;

/// One piece of a word: its id and its char range within the word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Vocabulary id.
    pub id: u32,
    /// First char of the piece in the word.
    pub start: usize,
    /// One past its last char.
    pub end: usize,
}

/// Splits `word` as tokenizers' `WordPiece` model does: from the left, take the longest prefix
/// in `vocab` (pieces after the first are looked up with [`CONTINUATION`] prepended); if some
/// position has no match, or the word has more than [`MAX_INPUT_CHARS_PER_WORD`] chars, the
/// whole word is one `unk_id` piece.
pub fn split_word(word: &[char], vocab: &Vocab, unk_id: u32) -> Vec<Piece> {
    let whole = || {
        vec![Piece {
            id: unk_id,
            start: 0,
            end: word.len(),
        }]
    };
    if word.len() > MAX_INPUT_CHARS_PER_WORD {
        return whole();
    }
    let mut pieces = Vec::new();
    let mut candidate = String::new();
    let mut start = 0;
    while start < word.len() {
        let found = (start + 1..=word.len()).rev().find_map(|end| {
            candidate.clear();
            if start > 0 {
                candidate.push_str(CONTINUATION);
            }
            candidate.extend(&word[start..end]);
            vocab
                .token_to_id(&candidate)
                .map(|id| Piece { id, start, end })
        });
        match found {
            Some(piece) => {
                start = piece.end;
                pieces.push(piece);
            }
            None => return whole(),
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(word: &str, vocab: &[&str]) -> Vec<(u32, usize, usize)> {
        let chars: Vec<char> = word.chars().collect();
        split_word(&chars, &Vocab::from_tokens(vocab), 99)
            .into_iter()
            .map(|p| (p.id, p.start, p.end))
            .collect()
    }

    #[test]
    fn longest_match_first_with_continuations() {
        let vocab = ["un", "unk", "##know", "##n", "##kn", "##own"];
        // "unk" is the longest first piece; then "##n", "##own".
        assert_eq!(split("unknown", &vocab), [(1, 0, 3), (3, 3, 4), (5, 4, 7)]);
    }

    #[test]
    fn a_gap_makes_the_whole_word_unknown() {
        assert_eq!(split("unx", &["un"]), [(99, 0, 3)]);
        assert_eq!(split("x", &["##x"]), [(99, 0, 1)]);
    }

    #[test]
    fn the_length_limit_counts_chars() {
        let vocab = ["é", "##é"];
        assert_eq!(split(&"é".repeat(100), &vocab).len(), 100);
        assert_eq!(split(&"é".repeat(101), &vocab), [(99, 0, 101)]);
    }
}
