//! Cutting long texts before tokenising them, so that memory follows what is kept.
//!
//! Tokenising holds several values per character at once (the chars, their normalised form
//! with its alignment, jieba's graph of a run of ideographs, the tokens), about 150 bytes per
//! character: `train classify` with one 16 M-character example, cut to 128 tokens, peaked at
//! 2.4 GB (0.1 GB since). So
//! [`encode_truncated`](super::RoFormerTokenizer::encode_truncated) tokenises only the first
//! [`CHARS_PER_KEPT_TOKEN`] characters per token it may keep, and
//! [`ids_and_words`](super::RoFormerTokenizer::ids_and_words) tokenises a long text piece by
//! piece, [`PIECE_CHARS`] characters at most.
//!
//! A text is cut just before a *boundary*: an ASCII space, tab or line break, the ideographic
//! space, or a Chinese clause mark (`，。！？；：、`). Nothing of the tokenizer looks across one:
//! normalisation is per character (a boundary is a starter, so no combining sequence spans
//! it), jieba cuts its runs of ideographs and ASCII alphanumerics at every other character,
//! WordPiece works within a word, and no special token contains one. So the tokens of the text
//! before a boundary are exactly the first tokens of the whole text (the tests compare). Only
//! a text with no boundary in the second half of the window is cut where the window ends,
//! inside a word, and then only the tokens of that word can differ: `ids_and_words` tokenises
//! its two halves apart.

/// Characters tokenised per token that [`encode_truncated`](super::RoFormerTokenizer::encode_truncated)
/// may keep. A token is at most 100 characters (WordPiece's longest word, past which a word
/// is `[UNK]`) and usually one to a few, so a text cut at this many characters per kept token
/// gives at least the tokens kept unless its words average more than 32 characters.
pub(crate) const CHARS_PER_KEPT_TOKEN: usize = 64;

/// The longest piece [`ids_and_words`](super::RoFormerTokenizer::ids_and_words) tokenises at
/// once (64 Ki characters, about 10 MB of tokenizer memory).
pub(crate) const PIECE_CHARS: usize = 1 << 16;

/// Whether the tokenizer never looks across `c` (see the [module](self) doc).
fn is_boundary(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | '\r' | '\u{3000}' | '，' | '。' | '！' | '？' | '；' | '：' | '、'
    )
}

/// The byte length of the start of `text` to tokenise when `max_chars` characters are enough:
/// the whole text when it has at most `max_chars` characters; otherwise its first `max_chars`
/// characters, cut back to just before the last boundary in their second half when there is
/// one. Never 0 for a non-empty text and a positive `max_chars`.
pub(crate) fn cut_len(text: &str, max_chars: usize) -> usize {
    let Some((end, _)) = text.char_indices().nth(max_chars) else {
        return text.len();
    };
    let half = text
        .char_indices()
        .nth(max_chars / 2)
        .map_or(end, |(i, _)| i);
    match text[half..end].rfind(is_boundary) {
        Some(at) if half + at > 0 => half + at,
        _ => end,
    }
}

/// The pieces of `text`, in order, each at most `max_chars` characters ([`cut_len`] of what
/// is left); they join to `text`.
pub(crate) fn pieces(text: &str, max_chars: usize) -> impl Iterator<Item = &str> {
    let max_chars = max_chars.max(1);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (piece, next) = rest.split_at(cut_len(rest, max_chars));
        rest = next;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_stay_whole() {
        assert_eq!(cut_len("床前明月光", 5), "床前明月光".len());
        assert_eq!(cut_len("", 0), 0);
        assert_eq!(cut_len("abc", 100), 3);
    }

    #[test]
    fn a_long_text_is_cut_before_its_last_boundary_in_the_second_half() {
        // 10 chars allowed: "ab cd，ef g" -> cut before the space at char 8.
        let text = "ab cd，ef ghij";
        let n = cut_len(text, 10);
        assert_eq!(&text[..n], "ab cd，ef");
        // A boundary in the first half only is not taken: the window ends at char 6.
        let text = "a bcdefghij";
        assert_eq!(&text[..cut_len(text, 6)], "a bcde");
        // No boundary: cut at the window, on a char boundary.
        let text = "明".repeat(20);
        assert_eq!(cut_len(&text, 7), 7 * "明".len());
    }

    #[test]
    fn pieces_join_to_the_text_and_respect_the_limit() {
        let text = "床前明月光，疑是地上霜。举头望明月 low head 思故乡".repeat(7);
        for max in [1, 2, 3, 5, 8, 13, 64] {
            let parts: Vec<&str> = pieces(&text, max).collect();
            assert_eq!(parts.concat(), text, "max {max}");
            assert!(parts
                .iter()
                .all(|p| p.chars().count() <= max && !p.is_empty()));
        }
        assert_eq!(pieces("", 4).count(), 0);
    }

    fn tokenizer() -> crate::RoFormerTokenizer {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer");
        crate::RoFormerTokenizer::from_dir(&dir).unwrap()
    }

    /// Poems, English words, digits and a special token, with spaces, clause marks and line
    /// breaks, to at least `chars` characters.
    fn long_text(chars: usize) -> String {
        let parts = [
            "床前明月光，疑是地上霜。",
            "举头望明月，低头思故乡。\n",
            "Unaffable words, 3.14159 and [MASK] too! ",
            "春眠不觉晓：处处闻啼鸟、夜来风雨声？",
            "\u{3000}花落知多少；",
        ];
        let (mut text, mut count) = (String::new(), 0);
        for part in parts.iter().cycle() {
            if count >= chars {
                break;
            }
            text.push_str(part);
            count += part.chars().count();
        }
        text
    }

    #[test]
    fn piecewise_ids_and_words_are_the_whole_texts() {
        let tok = tokenizer();
        let text = long_text(3 * PIECE_CHARS); // three pieces or more
        assert!(text.chars().count() > 2 * PIECE_CHARS);
        let (mut ids, mut words) = (Vec::new(), Vec::new());
        tok.walk(&text, |id, _, word| {
            ids.push(id);
            words.push(word);
        });
        assert_eq!(tok.ids_and_words(&text), (ids, words));
    }

    #[test]
    fn encode_truncated_keeps_the_whole_texts_first_tokens() {
        let tok = tokenizer();
        let text = long_text(128 * CHARS_PER_KEPT_TOKEN + 1000);
        for max_length in [5, 64, 128] {
            assert!(text.chars().count() > max_length * CHARS_PER_KEPT_TOKEN);
            let mut whole = tok.tokenize(&text);
            super::super::encoding::truncate(&mut whole, None, max_length).unwrap();
            let expected = tok.frame(whole, None);
            assert_eq!(
                tok.encode_truncated(&text, None, max_length).unwrap(),
                expected
            );
            // A pair with a short second text.
            let mut a = tok.tokenize(&text);
            let mut b = tok.tokenize("举头望明月");
            super::super::encoding::truncate(&mut a, Some(&mut b), max_length).unwrap();
            let expected = tok.frame(a, Some(b));
            let got = tok.encode_truncated(&text, Some("举头望明月"), max_length);
            assert_eq!(got.unwrap(), expected);
        }
    }
}
