//! Traditional and simplified Chinese: a corpus in one script, read in both.
//!
//! The conversion is the crate `fast2s` (MIT), a character table (OpenCC's traditional to
//! simplified characters, with a few context rules) applied character by character, so the
//! converted text has as many characters as the original.

use super::corpus::Document;

/// `text` in simplified characters (`fast2s::convert`); characters that have no traditional
/// form, and all non-Chinese text, are left as they are.
pub fn to_simplified(text: &str) -> String {
    fast2s::convert(text)
}

/// The documents followed by the simplified copy of every document that changes under
/// [`to_simplified`] (titles and authors converted too). The copies come after all the
/// originals, in the same order, so that packed blocks do not put a poem beside its own
/// copy in the other script.
pub fn with_simplified(documents: Vec<Document>) -> Vec<Document> {
    let copies: Vec<Document> = documents
        .iter()
        .filter_map(|doc| {
            let text = to_simplified(&doc.text);
            (text != doc.text).then(|| Document {
                text,
                title: doc.title.as_deref().map(to_simplified),
                author: doc.author.as_deref().map(to_simplified),
            })
        })
        .collect();
    let mut all = documents;
    all.extend(copies);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_traditional_characters_only() {
        assert_eq!(
            to_simplified("舉頭望明月，低頭思故鄉。"),
            "举头望明月，低头思故乡。"
        );
        assert_eq!(to_simplified("床前明月光"), "床前明月光");
        assert_eq!(to_simplified("abc 123"), "abc 123");
        assert_eq!(to_simplified(""), "");
        let t = "會當凌絕頂，一覽眾山小。";
        assert_eq!(to_simplified(t).chars().count(), t.chars().count());
    }

    #[test]
    fn copies_changed_documents_after_the_originals() {
        let docs = vec![
            Document {
                text: "舉頭望明月".into(),
                title: Some("靜夜思".into()),
                author: Some("李白".into()),
            },
            Document::new("床前明月光"),
            Document::new("低頭思故鄉"),
        ];
        let all = with_simplified(docs.clone());
        assert_eq!(all.len(), 5);
        assert_eq!(&all[..3], &docs[..]);
        assert_eq!(all[3].text, "举头望明月");
        assert_eq!(all[3].title.as_deref(), Some("静夜思"));
        assert_eq!(all[4].text, "低头思故乡");
    }
}
