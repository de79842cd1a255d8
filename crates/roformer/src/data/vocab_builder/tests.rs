use super::*;
use test_support::Scratch;

use crate::data::test_util::poetry_sample;
use crate::data::tokenize::tokenize_documents;
use crate::tokenizer::RoFormerTokenizer;

/// Builds, writes and reloads through `RoFormerTokenizer::from_dir`.
fn built_and_loaded(
    docs: &[Document],
    options: &VocabOptions,
    name: &str,
) -> (BuiltVocab, RoFormerTokenizer) {
    let built = build_vocab(docs, options).unwrap();
    let dir = Scratch::new("roformer-data", name);
    write_vocab_dir(dir.path(), &built, &options.config).unwrap();
    let tokenizer = RoFormerTokenizer::from_dir(dir.path()).unwrap();
    (built, tokenizer)
}

/// Tokens and `[UNK]`s the tokenizer makes of the documents (no `[CLS]`/`[SEP]`).
fn measured(tokenizer: &RoFormerTokenizer, docs: &[Document]) -> (u64, u64) {
    let unk = tokenizer.special_tokens().unk;
    let encoded = tokenize_documents(tokenizer, docs);
    let total = encoded.iter().map(|d| d.len() as u64).sum();
    let unknown = encoded
        .iter()
        .flat_map(|d| &d.ids)
        .filter(|&&id| id == unk)
        .count() as u64;
    (total, unknown)
}

#[test]
fn the_poetry_sample_round_trips_without_unknown_tokens() {
    let docs = poetry_sample();
    let options = VocabOptions::new(8000);
    let (built, tokenizer) = built_and_loaded(&docs, &options, "vocab-full");
    assert_eq!(
        &built.tokens[..5],
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    );
    assert_eq!(tokenizer.vocab_size(), built.tokens.len());
    assert_eq!(tokenizer.mask_token_id().unwrap(), 4);
    // Sorted by count, then token, after the specials.
    for pair in built.tokens[5..]
        .windows(2)
        .zip(built.counts[5..].windows(2))
    {
        let ((a, b), (ca, cb)) = ((&pair.0[0], &pair.0[1]), (pair.1[0], pair.1[1]));
        assert!(ca > cb || (ca == cb && a < b), "{a} {ca} before {b} {cb}");
    }
    // Every char of the sample is a token; nothing becomes [UNK].
    let stats = &built.stats;
    assert!(
        stats.size < 8000,
        "the sample has fewer candidates: {}",
        stats.size
    );
    assert_eq!(stats.chars_in_vocab, stats.distinct_chars);
    assert_eq!(stats.unk_tokens, 0);
    assert_eq!(stats.coverage, 1.0);
    let (total, unknown) = measured(&tokenizer, &docs);
    assert_eq!(unknown, 0);
    assert_eq!(total, stats.tokens);
    // And the sample's text decodes back (chars joined by spaces, whitespace aside).
    let encoding = tokenizer.encode(&docs[0].text);
    let decoded = tokenizer
        .decode(&encoding.ids, true)
        .unwrap()
        .replace(' ', "");
    assert_eq!(decoded, docs[0].text.to_lowercase().replace(' ', ""));
}

#[test]
fn a_small_vocabulary_keeps_the_most_frequent_chars_and_counts_unknowns_exactly() {
    let docs = poetry_sample();
    let options = VocabOptions::new(300);
    let (built, tokenizer) = built_and_loaded(&docs, &options, "vocab-small");
    assert_eq!(built.tokens.len(), 300);
    // The most frequent ideographs of Chinese verse are in.
    for common in ["，", "。", "不", "人"] {
        assert!(built.tokens.iter().any(|t| t == common), "{common}");
    }
    let stats = &built.stats;
    assert!(stats.chars_in_vocab < stats.distinct_chars);
    assert!(stats.unk_tokens > 0 && stats.coverage < 1.0);
    assert_eq!(
        measured(&tokenizer, &docs),
        (stats.tokens, stats.unk_tokens)
    );
}

#[test]
fn jieba_words_take_their_share() {
    let docs = poetry_sample();
    let mut options = VocabOptions::new(4000);
    options.jieba_word_share = 0.05;
    let (built, tokenizer) = built_and_loaded(&docs, &options, "vocab-words");
    let words = built.stats.words;
    assert!(words > 0 && words <= 200, "{words}");
    assert!(
        built.tokens.iter().any(|t| t == "明月"),
        "明月 is common in the sample"
    );
    let (total, unknown) = measured(&tokenizer, &docs);
    assert_eq!((total, unknown), (built.stats.tokens, 0));
    // Words make fewer tokens than single chars.
    let plain = build_vocab(&docs, &VocabOptions::new(4000)).unwrap();
    assert!(total < plain.stats.tokens);
}

#[test]
fn latin_words_get_whole_words_and_every_char_with_its_continuation() {
    let docs = [
        Document::new("Hello hello world, 你好 world!"),
        Document::new("worlds"),
    ];
    let built = build_vocab(&docs, &VocabOptions::new(100)).unwrap();
    let has = |t: &str| built.tokens.iter().any(|x| x == t);
    for token in [
        "hello", "world", "h", "##e", "##l", "##o", "w", "##d", "##h", "##w", "你", "好",
    ] {
        assert!(has(token), "{token} missing from {:?}", built.tokens);
    }
    // Seen once only: not a whole word (min_count 2); punctuation needs no continuation.
    assert!(!has("worlds") && !has("##,") && has(","));
    // A word never seen is still covered.
    let vocab = built.vocab();
    let chars: Vec<char> = "hold".chars().collect();
    let pieces = wordpiece::split_word(&chars, &vocab, 1);
    assert!(pieces.iter().all(|p| p.id != 1), "{pieces:?}");
}

#[test]
fn too_small_a_size_is_an_error() {
    let docs = [Document::new("a")];
    let err = build_vocab(&docs, &VocabOptions::new(5)).unwrap_err();
    assert!(
        matches!(err, DataError::VocabTooSmall { size: 5, min: 6 }),
        "{err:?}"
    );
    let built = build_vocab(&docs, &VocabOptions::new(6)).unwrap();
    assert_eq!(built.tokens.len(), 6);
    assert_eq!(built.tokens[5], "a");
}

#[test]
fn the_config_file_loads_back() {
    let config = TokenizerConfig {
        do_lower_case: false,
        unk_token: "<unk>".into(),
        ..TokenizerConfig::default()
    };
    let text = tokenizer_config_json(&config);
    assert_eq!(TokenizerConfig::from_json(&text).unwrap(), config);
    assert!(text.contains("\"tokenizer_class\": \"RoFormerTokenizer\""));
    let dir = Scratch::new("roformer-data", "config");
    let path = dir.path().join("tokenizer_config.json");
    write_tokenizer_config(&path, &config).unwrap();
    assert_eq!(TokenizerConfig::from_file(&path).unwrap(), config);
    let err = write_tokenizer_config(&dir.path().join("absent/x.json"), &config).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }), "{err:?}");
}
