//! The tokenizer against transformers' RoFormerTokenizer (fixtures written by
//! `scripts/make_tokenizer_fixtures.py`), and properties on arbitrary text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use roformer::tokenizer::{TokenizerConfig, TokenizerError, Vocab};
use roformer::{Encoding, RoFormerTokenizer};
use serde_json::Value;
use test_support::Scratch;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer")
}

fn fixtures() -> &'static Value {
    static CASES: OnceLock<Value> = OnceLock::new();
    CASES.get_or_init(|| {
        let text = std::fs::read_to_string(fixture_dir().join("cases.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

fn tokenizer(config: &str) -> RoFormerTokenizer {
    let json = &fixtures()["header"]["configs"][config];
    let config = TokenizerConfig::from_json(&json.to_string()).unwrap();
    let vocab = Vocab::from_file(&fixture_dir().join("vocab.txt")).unwrap();
    RoFormerTokenizer::new(vocab, config).unwrap()
}

fn cases(kind: &str) -> impl Iterator<Item = &'static Value> {
    let kind = kind.to_owned();
    fixtures()["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(move |case| case["kind"] == kind.as_str())
}

fn u32s(value: &Value) -> Vec<u32> {
    serde_json::from_value(value.clone()).unwrap()
}

/// The fields transformers returns, in the fixtures' layout.
fn as_json(encoding: &Encoding) -> Value {
    serde_json::json!({
        "input_ids": encoding.ids,
        "tokens": encoding.tokens,
        "offsets": encoding.offsets.iter().map(|&(s, e)| [s, e]).collect::<Vec<_>>(),
        "token_type_ids": encoding.type_ids,
        "attention_mask": encoding.attention_mask,
    })
}

fn expected(case: &Value) -> Value {
    let fields = [
        "input_ids",
        "tokens",
        "offsets",
        "token_type_ids",
        "attention_mask",
    ];
    Value::Object(
        fields
            .iter()
            .map(|&f| (f.to_owned(), case[f].clone()))
            .collect(),
    )
}

#[test]
fn single_texts_match_transformers() {
    let mut checked = 0;
    for case in cases("single") {
        let tok = tokenizer(case["config"].as_str().unwrap());
        let text = case["text"].as_str().unwrap();
        let got = match case["max_length"].as_u64() {
            Some(max) => tok.encode_truncated(text, None, max as usize).unwrap(),
            None => tok.encode(text),
        };
        assert_eq!(as_json(&got), expected(case), "text {text:?}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} single cases");
}

#[test]
fn pairs_match_transformers() {
    let mut checked = 0;
    for case in cases("pair") {
        let tok = tokenizer(case["config"].as_str().unwrap());
        let (a, b) = (
            case["text"].as_str().unwrap(),
            case["text_pair"].as_str().unwrap(),
        );
        let got = match case["max_length"].as_u64() {
            Some(max) => tok.encode_truncated(a, Some(b), max as usize).unwrap(),
            None => tok.encode_pair(a, b),
        };
        assert_eq!(as_json(&got), expected(case), "pair {a:?} / {b:?}");
        checked += 1;
    }
    assert!(checked >= 5);
}

#[test]
fn padded_batches_match_transformers() {
    let mut checked = 0;
    for case in cases("batch") {
        let tok = tokenizer(case["config"].as_str().unwrap());
        let texts: Vec<String> = serde_json::from_value(case["texts"].clone()).unwrap();
        let got = tok.encode_batch(&texts, None).unwrap();
        for (i, encoding) in got.iter().enumerate() {
            let want: Value = [
                "input_ids",
                "tokens",
                "offsets",
                "token_type_ids",
                "attention_mask",
            ]
            .iter()
            .map(|&f| (f.to_owned(), case[f][i].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into();
            assert_eq!(as_json(encoding), want, "batch item {i}");
        }
        checked += 1;
    }
    assert!(checked >= 1);
}

#[test]
fn decode_matches_transformers() {
    let mut checked = 0;
    for case in cases("decode") {
        let tok = tokenizer(case["config"].as_str().unwrap());
        let ids = u32s(&case["ids"]);
        let skip = case["skip_special_tokens"].as_bool().unwrap();
        let got = tok.decode(&ids, skip).unwrap();
        assert_eq!(got, case["decoded"].as_str().unwrap(), "ids {ids:?}");
        checked += 1;
    }
    assert!(checked >= 6);
}

#[test]
fn checkpoint_directory_loads_with_its_config() {
    let tok = RoFormerTokenizer::from_dir(&fixture_dir()).unwrap();
    assert!(tok.config().do_lower_case);
    let mask = fixtures()["header"]["mask_token_id"].as_u64().unwrap() as u32;
    assert_eq!(tok.mask_token_id().unwrap(), mask);
    assert_eq!(tok.decode(&[mask], false).unwrap(), "[MASK]");
    assert_eq!(tok.encode("今天[MASK]好").ids[2], mask);
}

#[test]
fn decode_rejects_ids_past_the_vocabulary() {
    let tok = tokenizer("default");
    let size = tok.vocab_size() as u32;
    let err = tok.decode(&[1, size], false).unwrap_err();
    assert!(
        matches!(err, TokenizerError::IdOutOfVocab { id, .. } if id == size),
        "{err}"
    );
}

#[test]
fn bad_directories_are_typed_errors() {
    let dir = Scratch::new("roformer-tokenizer", "bad-directories");
    // Missing vocab.txt.
    let err = RoFormerTokenizer::from_dir(&dir.join("nope")).unwrap_err();
    assert!(matches!(err, TokenizerError::Io { .. }), "{err}");
    // Empty vocab.txt.
    std::fs::write(dir.join("vocab.txt"), "").unwrap();
    let err = RoFormerTokenizer::from_dir(&dir).unwrap_err();
    assert!(matches!(err, TokenizerError::EmptyVocab(_)), "{err}");
    // No [SEP].
    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[MASK]\n").unwrap();
    let err = RoFormerTokenizer::from_dir(&dir).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingSpecialToken { role: "sep", .. }),
        "{err}"
    );
    // Not UTF-8.
    std::fs::write(dir.join("vocab.txt"), b"[PAD]\n\xff\n").unwrap();
    let err = RoFormerTokenizer::from_dir(&dir).unwrap_err();
    assert!(
        matches!(err, TokenizerError::NotUtf8 { line: 2, .. }),
        "{err}"
    );
    // Malformed tokenizer_config.json.
    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n").unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), "{\"do_lower_case\": 1").unwrap();
    let err = RoFormerTokenizer::from_dir(&dir).unwrap_err();
    assert!(matches!(err, TokenizerError::BadConfig { .. }), "{err}");
    // A vocabulary without [MASK] loads; asking for the mask id is the error.
    std::fs::remove_file(dir.join("tokenizer_config.json")).unwrap();
    let tok = RoFormerTokenizer::from_dir(&dir).unwrap();
    assert!(matches!(
        tok.mask_token_id(),
        Err(TokenizerError::NoMaskToken(_))
    ));
}

/// Text drawn from the characters that stress the tokenizer: CJK, ASCII, accents, combining
/// marks, Hangul, emoji, whitespace and control chars, special-token fragments.
fn awkward_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        any::<char>().prop_map(String::from),
        proptest::sample::select(vec![
            "今天",
            "天气",
            "非常",
            "好",
            "。",
            "hello",
            "World",
            "É",
            "\u{301}",
            "İ",
            "한",
            "😀",
            "👍🏽",
            "\u{200d}",
            " ",
            "\t",
            "\r\n",
            "\u{a0}",
            "\u{200b}",
            "\u{0}",
            "\u{fffd}",
            "[MASK]",
            "[CLS",
            "##",
            "c++",
            "3.14",
            "ß",
            "ǅ",
            "\u{1f970}",
            "\u{2b820}",
        ])
        .prop_map(String::from),
    ];
    proptest::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}

fn check_invariants(tok: &RoFormerTokenizer, text: &str, enc: &Encoding) {
    let n_chars = text.chars().count();
    let n = enc.ids.len();
    assert!(n >= 2);
    assert_eq!(enc.tokens.len(), n);
    assert_eq!(enc.offsets.len(), n);
    assert_eq!(enc.type_ids.len(), n);
    assert_eq!(enc.attention_mask.len(), n);
    for (i, &id) in enc.ids.iter().enumerate() {
        assert!((id as usize) < tok.vocab_size());
        assert_eq!(tok.id_to_token(id), Some(enc.tokens[i].as_str()));
        let (start, end) = enc.offsets[i];
        assert!(
            start <= end && end <= n_chars,
            "{:?} in {n_chars}",
            (start, end)
        );
    }
    // Offsets never go backwards.
    let starts: Vec<usize> = enc.offsets[1..n - 1].iter().map(|o| o.0).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_text_encodes_within_bounds(text in awkward_text()) {
        let tok = tokenizer("default");
        let enc = tok.encode(&text);
        check_invariants(&tok, &text, &enc);
        // Char offsets convert to byte offsets on char boundaries of the text.
        let bounds: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
        for &(s, e) in &enc.offsets {
            prop_assert!(text.is_char_boundary(bounds[s]) && text.is_char_boundary(bounds[e]));
        }
        prop_assert!(tok.decode(&enc.ids, false).is_ok());
    }

    #[test]
    fn any_pair_truncates_to_the_limit(a in awkward_text(), b in awkward_text(), max in 3usize..20) {
        let tok = tokenizer("cased");
        let enc = tok.encode_truncated(&a, Some(&b), max).unwrap();
        prop_assert!(enc.len() <= max);
        let full = tok.encode_pair(&a, &b);
        if full.len() <= max {
            prop_assert_eq!(&enc, &full);
        }
        // The second text (its [SEP] at least) survives truncation; an empty one is no pair.
        prop_assert_eq!(enc.type_ids.contains(&1), !b.is_empty());
        prop_assert_eq!(enc.ids[0], tok.special_tokens().cls);
    }

    #[test]
    fn batches_pad_to_the_longest(texts in proptest::collection::vec(awkward_text(), 1..5)) {
        let tok = tokenizer("lower_keep_accents");
        let batch = tok.encode_batch(&texts, None).unwrap();
        let longest = batch.iter().map(|e| e.attention_mask.iter().sum::<u32>()).max().unwrap();
        for (text, enc) in texts.iter().zip(&batch) {
            prop_assert_eq!(enc.len(), longest as usize);
            let real = enc.attention_mask.iter().sum::<u32>() as usize;
            prop_assert_eq!(&enc.ids[..real], &tok.encode(text).ids[..]);
            prop_assert!(enc.ids[real..].iter().all(|&id| id == tok.special_tokens().pad));
        }
    }
}
