//! Pre-tokenisation: jieba word segmentation, then BERT splitting of words not in the vocabulary.
//!
//! transformers' `JiebaPreTokenizer` cuts the normalised text with rjieba (`hmm=False`,
//! default dictionary). A word found in the vocabulary is one pre-token. Any other word goes
//! through a BERT normaliser that only puts spaces around CJK ideographs and is then split at
//! whitespace (Python's `str.split()`); its pieces are laid end to end from the word's start.
//! (jieba cuts text that is not CJK or ASCII alphanumeric into single chars, so punctuation is
//! already apart; no separate punctuation split happens.)
//!
//! rjieba 0.2.2 wraps jieba-rs 0.11.0, the version pinned here, with its default dictionary:
//! the segmentation is the same.

use std::ops::Range;
use std::sync::OnceLock;

use jieba_rs::Jieba;

use super::normalize::is_chinese_char;
use super::vocab::Vocab;

/// The default-dictionary segmenter, loaded once per process (as rjieba does).
fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

/// Loads jieba's dictionary now rather than on the first encode (it takes a moment).
pub fn warm_up() {
    jieba();
}

/// The pre-tokens of a normalised text: char ranges into `chars`, in order, non-empty.
pub fn pre_tokenize(chars: &[char], vocab: &Vocab) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for word in cut(chars) {
        word_pre_tokens(chars, word, vocab, &mut out);
    }
    out
}

/// jieba's words (no HMM, default dictionary) of a normalised text, in order, as char ranges
/// into `chars`; runs of whitespace are words too. Each pre-token of [`pre_tokenize`] lies
/// inside one of these words, which is what whole-word masking groups by.
pub fn cut(chars: &[char]) -> Vec<Range<usize>> {
    let text: String = chars.iter().collect();
    jieba()
        .cut(&text, false)
        .into_iter()
        .map(|word| word.start.min(chars.len())..word.end.min(chars.len()))
        .collect()
}

/// Appends to `out` the pre-tokens of the jieba word `chars[word]`: the whole word when
/// `vocab` holds it; otherwise its pieces once every CJK ideograph is set apart and the rest
/// split at whitespace, laid end to end from the word's start. Empty ranges are skipped.
pub fn word_pre_tokens(
    chars: &[char],
    word: Range<usize>,
    vocab: &Vocab,
    out: &mut Vec<Range<usize>>,
) {
    let (start, end) = (word.start, word.end.min(chars.len()));
    if start >= end {
        return;
    }
    let text: String = chars[start..end].iter().collect();
    if vocab.contains(&text) {
        out.push(start..end);
        return;
    }
    let mut piece_start = start;
    for piece in spaced_pieces(&text) {
        let piece_end = (piece_start + piece).min(end);
        if piece_start < piece_end {
            out.push(piece_start..piece_end);
        }
        piece_start = piece_end;
    }
}

/// Char lengths of the whitespace-separated pieces of `word` once every CJK ideograph is a
/// piece of its own.
fn spaced_pieces(word: &str) -> Vec<usize> {
    let mut lengths = Vec::new();
    let mut run = 0;
    for c in word.chars() {
        if is_chinese_char(c) || is_python_space(c) {
            if run > 0 {
                lengths.push(run);
            }
            run = 0;
            if is_chinese_char(c) {
                lengths.push(1);
            }
        } else {
            run += 1;
        }
    }
    if run > 0 {
        lengths.push(run);
    }
    lengths
}

/// Python's `str.isspace` (Unicode White_Space plus the separators U+001C..U+001F).
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, vocab: &[&str]) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let vocab = Vocab::from_tokens(vocab);
        pre_tokenize(&chars, &vocab)
            .into_iter()
            .map(|r| chars[r].iter().collect())
            .collect()
    }

    #[test]
    fn vocabulary_words_stay_whole_others_split_into_characters() {
        // jieba (no HMM) cuts 今天天气 | 非常 | 好 | 。
        assert_eq!(
            words("今天天气非常好。", &["非常"]),
            ["今", "天", "天", "气", "非常", "好", "。"]
        );
        assert_eq!(
            words("今天天气非常好。", &["今天天气"]),
            ["今天天气", "非", "常", "好", "。"]
        );
    }

    #[test]
    fn ascii_runs_are_words_and_spaces_vanish() {
        assert_eq!(words("hello  world,ok", &[]), ["hello", "world", ",", "ok"]);
        assert!(words("   ", &[]).is_empty());
    }

    #[test]
    fn pieces_of_a_mixed_word() {
        assert_eq!(spaced_pieces("ab中c"), [2, 1, 1]);
        assert_eq!(spaced_pieces(" "), Vec::<usize>::new());
    }
}
