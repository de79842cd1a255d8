//! From tokens back to text: tokenizers' WordPiece decoder (`prefix="##"`, `cleanup=True`).

use super::wordpiece::CONTINUATION;

/// Joins tokens into text: a token after the first either continues the previous one (its
/// `##` is dropped) or is preceded by a space; then each token is cleaned of tokenisation
/// artefacts (a space before `.`, `?`, `!`, `,` and before some English contractions).
/// A first token keeps its `##`.
pub fn join_tokens<'a>(tokens: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, token) in tokens.into_iter().enumerate() {
        let piece = match (i, token.strip_prefix(CONTINUATION)) {
            (0, _) => token.to_owned(),
            (_, Some(rest)) => rest.to_owned(),
            (_, None) => format!(" {token}"),
        };
        out.push_str(&cleanup(&piece));
    }
    out
}

/// tokenizers' `decoders::wordpiece::cleanup`, applied to one decoded token.
fn cleanup(piece: &str) -> String {
    piece
        .replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" do not", " don't")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_join_and_punctuation_attaches() {
        assert_eq!(
            join_tokens(["un", "##know", "##n", "world", "##s", ".", "hi", ",", "!"]),
            "unknown worlds. hi,!"
        );
        assert_eq!(join_tokens(["##ld", "x"]), "##ld x");
        assert_eq!(join_tokens([]), "");
    }
}
