//! Verse lines as documents of their own, so that a model also sees text that does not end in
//! punctuation.
//!
//! In a poem every line ends in punctuation, so a model trained on whole poems learns that the
//! token before `[SEP]` is always a punctuation mark, and `举头望明[MASK]` gets `。`. Adding
//! the lines of some poems as documents without their punctuation (`举头望明月`) teaches it
//! that a text may end on a character too.

use super::corpus::Document;
use super::split::text_hash;

/// The marks that end a line (and are dropped from it): Chinese and ASCII sentence and clause
/// punctuation.
const LINE_ENDS: &[char] = &[
    '，', '。', '？', '！', '；', '：', '、', ',', '.', '?', '!', ';', ':',
];

/// The lines of `text`: the runs between line-ending marks, trimmed, without the marks,
/// empty runs left out.
pub fn lines_of(text: &str) -> Vec<&str> {
    text.split(LINE_ENDS)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The documents followed by, for a `share` of them (chosen by a hash of the text, so the
/// choice is stable), one document per line ([`lines_of`]); title and author are kept. The
/// lines come after all the documents, in order. Apply it to each side of a train/validation
/// split separately, so that the lines of a held-out poem stay held out.
pub fn with_lines(documents: Vec<Document>, share: f64) -> Vec<Document> {
    // The top 53 bits of a second hash (another salt than the split's) as a number in [0, 1).
    let chosen = |text: &str| {
        let h = text_hash(&format!("lines\u{0}{text}"));
        ((h >> 11) as f64 / (1u64 << 53) as f64) < share
    };
    let extra: Vec<Document> = documents
        .iter()
        .filter(|d| chosen(&d.text))
        .flat_map(|d| {
            lines_of(&d.text).into_iter().map(|line| Document {
                text: line.to_string(),
                title: d.title.clone(),
                author: d.author.clone(),
            })
        })
        .collect();
    let mut all = documents;
    all.extend(extra);
    all
}

/// Splits `documents` into `(alone, packed)`: a `share` of them (chosen by a hash of the text,
/// with another salt than [`with_lines`] and the validation split) to be trained one per
/// block, as `fill-mask` sees a short text, the rest to be packed. Order is kept on each side.
pub fn split_alone(documents: Vec<Document>, share: f64) -> (Vec<Document>, Vec<Document>) {
    documents.into_iter().partition(|d| {
        let h = text_hash(&format!("alone\u{0}{}", d.text));
        ((h >> 11) as f64 / (1u64 << 53) as f64) < share
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alone_share_is_stable_and_close_to_the_request() {
        let docs: Vec<Document> = (0..4000)
            .map(|i| Document {
                text: format!("第{i}首"),
                title: None,
                author: None,
            })
            .collect();
        let (alone, packed) = split_alone(docs.clone(), 0.25);
        assert_eq!(alone.len() + packed.len(), 4000);
        let share = alone.len() as f64 / 4000.0;
        assert!((share - 0.25).abs() < 0.03, "{share}");
        let (again, _) = split_alone(docs.iter().rev().cloned().collect(), 0.25);
        let mut a: Vec<_> = alone.iter().map(|d| d.text.clone()).collect();
        let mut b: Vec<_> = again.iter().map(|d| d.text.clone()).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "membership does not depend on order");
        assert!(split_alone(docs.clone(), 0.0).0.is_empty());
        assert!(split_alone(docs, 1.0).1.is_empty());
    }

    #[test]
    fn lines_drop_their_punctuation() {
        assert_eq!(
            lines_of("舉頭望明月，低頭思故鄉。"),
            ["舉頭望明月", "低頭思故鄉"]
        );
        assert_eq!(lines_of("何處？ 春風！"), ["何處", "春風"]);
        assert!(lines_of("。，").is_empty());
        assert_eq!(lines_of("無標點"), ["無標點"]);
    }

    #[test]
    fn a_share_of_the_documents_add_their_lines_after_all_of_them() {
        let docs: Vec<Document> = (0..400)
            .map(|i| Document::new(format!("第{i}句，又一句。")))
            .collect();
        assert_eq!(with_lines(docs.clone(), 0.0), docs);
        let all = with_lines(docs.clone(), 1.0);
        assert_eq!(all.len(), 400 * 3);
        assert_eq!(&all[..400], &docs[..]);
        assert_eq!(all[400].text, "第0句");
        assert_eq!(all[401].text, "又一句");
        let some = with_lines(docs.clone(), 0.25);
        let added = (some.len() - 400) / 2;
        assert!(
            (60..140).contains(&added),
            "{added} of 400 for a share of 0.25"
        );
        assert_eq!(with_lines(docs, 0.25), some, "the choice is stable");
    }
}
