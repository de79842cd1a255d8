//! Documents to token ids with word indices, on all cores.

use rayon::prelude::*;

use super::corpus::Document;
use crate::tokenizer::RoFormerTokenizer;

/// The tokens of one document, without `[CLS]`/`[SEP]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenizedDoc {
    /// Token ids, as `RoFormerTokenizer::encode` gives them between `[CLS]` and `[SEP]`.
    pub ids: Vec<u32>,
    /// For each token, the index of the word it came from (0, 1, ... within the document):
    /// the pieces of one jieba word share an index, including the single ideographs of a
    /// multi-char jieba word the vocabulary lacks (see
    /// [`RoFormerTokenizer::ids_and_words`]).
    pub words: Vec<u32>,
}

impl TokenizedDoc {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the document gave no token.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Tokenises every document in parallel (rayon's global pool), keeping their order.
/// Documents that give no token (only control chars, say) stay, empty.
pub fn tokenize_documents(
    tokenizer: &RoFormerTokenizer,
    documents: &[Document],
) -> Vec<TokenizedDoc> {
    tokenizer.warm_up();
    documents
        .par_iter()
        .map(|doc| {
            let (ids, words) = tokenizer.ids_and_words(&doc.text);
            TokenizedDoc { ids, words }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{TokenizerConfig, Vocab};

    fn tokenizer(words: &[&str]) -> RoFormerTokenizer {
        let mut tokens = vec!["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
        tokens.extend_from_slice(words);
        RoFormerTokenizer::new(Vocab::from_tokens(tokens), TokenizerConfig::default()).unwrap()
    }

    fn words_of(tokenizer: &RoFormerTokenizer, text: &str) -> Vec<(String, u32)> {
        let (ids, words) = tokenizer.ids_and_words(text);
        let tokens = ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap().to_owned());
        tokens.zip(words).collect()
    }

    fn pairs(expected: &[(&str, u32)]) -> Vec<(String, u32)> {
        expected
            .iter()
            .map(|(t, w)| ((*t).to_owned(), *w))
            .collect()
    }

    #[test]
    fn ids_match_encode_and_words_follow_jieba() {
        let tok = tokenizer(&[
            "今", "天", "气", "非常", "好", "。", "un", "##aff", "##able", "!",
        ]);
        // jieba (no HMM) cuts 今天天气 | 非常 | 好 | 。 | " " | unaffable | !
        let text = "今天天气非常好。 Unaffable!";
        assert_eq!(
            words_of(&tok, text),
            pairs(&[
                ("今", 0),
                ("天", 0),
                ("天", 0),
                ("气", 0),
                ("非常", 1),
                ("好", 2),
                ("。", 3),
                ("un", 4),
                ("##aff", 4),
                ("##able", 4),
                ("!", 5),
            ])
        );
        let encoded = tok.encode(text).ids;
        let (ids, _) = tok.ids_and_words(text);
        assert_eq!(ids, encoded[1..encoded.len() - 1]);
    }

    #[test]
    fn special_tokens_in_text_are_words_of_their_own() {
        let tok = tokenizer(&["a", "b"]);
        assert_eq!(
            words_of(&tok, "a[MASK]b x"),
            pairs(&[("a", 0), ("[MASK]", 1), ("b", 2), ("[UNK]", 3)])
        );
    }

    #[test]
    fn documents_keep_their_order() {
        let tok = tokenizer(&["a", "b", "##b"]);
        let docs = [
            Document::new("a bb"),
            Document::new("\u{200b}"),
            Document::new("b"),
        ];
        let out = tokenize_documents(&tok, &docs);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].ids, [5, 6, 7]);
        assert_eq!(out[0].words, [0, 1, 1]);
        assert!(out[1].is_empty());
        assert_eq!(out[2].ids, [6]);
    }
}
