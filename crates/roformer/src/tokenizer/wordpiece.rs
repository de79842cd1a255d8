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
///
/// Candidates longer than the vocabulary's longest token are never looked up, so a word costs
/// at most `chars * longest` lookups (tokenizers tries every end, quadratic in the word).
pub fn split_word(word: &[char], vocab: &Vocab, unk_id: u32) -> Vec<Piece> {
    split_with(word, vocab.longest_token_chars(), unk_id, |candidate| {
        vocab.token_to_id(candidate)
    })
}

/// [`split_word`] with the vocabulary as a lookup function and its longest token's length.
fn split_with(
    word: &[char],
    longest: usize,
    unk_id: u32,
    mut lookup: impl FnMut(&str) -> Option<u32>,
) -> Vec<Piece> {
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
        let prefix = if start > 0 { CONTINUATION } else { "" };
        // The candidate has `prefix` chars plus the piece: longer ones cannot match.
        let longest_piece = longest.saturating_sub(prefix.chars().count());
        let last_end = word.len().min(start.saturating_add(longest_piece));
        let found = (start + 1..=last_end).rev().find_map(|end| {
            candidate.clear();
            candidate.push_str(prefix);
            candidate.extend(&word[start..end]);
            lookup(&candidate).map(|id| Piece { id, start, end })
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

    /// A 100-char word of single-char pieces once took 5050 lookups (every end from the
    /// word's end down, at each of its 100 starts), and one line of such words took seconds.
    #[test]
    fn lookups_are_bounded_by_the_longest_token() {
        let vocab = Vocab::from_tokens(["a", "##a"]);
        let word: Vec<char> = "a".repeat(100).chars().collect();
        let mut lookups = 0;
        let pieces = split_with(&word, vocab.longest_token_chars(), 2, |c| {
            lookups += 1;
            vocab.token_to_id(c)
        });
        assert_eq!(pieces.len(), 100);
        assert!(pieces[1..].iter().all(|p| p.id == 1));
        // One lookup at the first start (longest piece 3 chars: "aaa", "aa", "a"), one per
        // later start ("##a" leaves a 1-char piece).
        assert_eq!(lookups, 3 + 99);
        // The bound changes nothing in what is found.
        assert_eq!(
            split("unknown", &["un", "unk", "##know", "##n", "##kn", "##own"]).len(),
            3
        );
    }
}
