//! Target `vocab`: a tokenizer loaded from a `vocab.txt` and a `tokenizer_config.json`
//! (through `RoFormerTokenizer::from_dir` on a scratch directory), then used on a few texts:
//! encode, pairs, truncation, batches, word ids and decoding.
//!
//! An input is NUL-separated sections: `vocab.txt`, `tokenizer_config.json` (empty: no such
//! file), then the texts, of which the first [`MAX_TEXTS`] are used: a padded batch holds
//! texts times the longest length, so a run of NULs next to one long text would otherwise
//! ask for gigabytes by design.

use roformer::{RoFormerTokenizer, TokenizerError};

use super::scratch_dir;
use crate::fixtures::{TOKENIZER_CONFIG, VOCAB};
use crate::mutate::{bytes, json};
use crate::outcome::Outcome;
use crate::rng::Rng;

/// The section separator.
const SEP: u8 = 0;

/// The most texts tokenized from one input.
pub const MAX_TEXTS: usize = 32;

/// Fields of `tokenizer_config.json`, for the JSON mutator.
const FIELDS: &[&str] = &[
    "do_lower_case",
    "strip_accents",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Texts of the seeds: Chinese words in and out of the vocabulary, special tokens written in
/// the text, accents, case, full-width space, control and combining chars.
const TEXTS: &[&str] = &[
    "今天天气非常好",
    "我们在北京大学学习自然语言处理[MASK]",
    "Hello, World! [CLS] [SEP] [PAD]",
    "Café\u{301} İstanbul ǅ ß ﬁ\u{3000}全角空格\u{200b}\u{0007}",
];

/// Lines the vocabulary mutator inserts: special tokens with stray spaces or case, bare and
/// orphan continuations, empty and long lines.
const LINES: &[&str] = &[
    "[UNK]",
    " [UNK]",
    "[UNK] ",
    "[unk]",
    "[MASK]",
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "##",
    "###",
    "##的",
    "",
    "\r",
    "今天",
    "天气非常好",
    "a",
    "##a",
    "İ",
    "\u{301}",
];

/// Snippets the text mutator inserts.
const SNIPPETS: &[&str] = &[
    "[MASK]",
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "[UNK]",
    "[MASK",
    "[",
    "]",
    "\u{301}",
    "\u{0}",
    "\u{7f}",
    "\u{feff}",
    "\u{3000}",
    "\u{200d}",
    "İ",
    "ǅ",
    "ß",
    "ﬁ",
    "😀",
    "👩\u{200d}💻",
    "\r\n",
    "\t",
    " ",
    "今天",
    "##",
    "가",
];

/// The fixture vocabulary with and without its config, each with the seed texts.
pub fn seeds() -> Vec<Vec<u8>> {
    [TOKENIZER_CONFIG, ""]
        .iter()
        .map(|config| {
            let mut sections = vec![VOCAB, config];
            sections.extend(TEXTS);
            sections.join("\0").into_bytes()
        })
        .collect()
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    let mut sections = data.split(|&b| b == SEP);
    let vocab = sections.next().unwrap_or_default();
    let config = sections.next().unwrap_or_default();
    let texts: Vec<String> = sections
        .take(MAX_TEXTS)
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    let dir = scratch_dir("vocab").and_then(|dir| {
        std::fs::write(dir.join("vocab.txt"), vocab)?;
        let config_path = dir.join("tokenizer_config.json");
        if config.is_empty() {
            if config_path.exists() {
                std::fs::remove_file(&config_path)?;
            }
        } else {
            std::fs::write(config_path, config)?;
        }
        Ok(dir)
    });
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => return Outcome::Rejected(format!("cannot write the scratch files: {e}")),
    };
    let tokenizer = match RoFormerTokenizer::from_dir(&dir) {
        Ok(t) => t,
        Err(e) => return Outcome::rejected(e),
    };
    Outcome::from_result(exercise(&tokenizer, &texts))
}

/// Every tokenizer operation on the texts.
fn exercise(tokenizer: &RoFormerTokenizer, texts: &[String]) -> Result<Outcome, TokenizerError> {
    for (i, text) in texts.iter().enumerate() {
        let next = texts.get(i + 1).map_or("", String::as_str);
        let encoding = tokenizer.encode(text);
        tokenizer.decode(&encoding.ids, true)?;
        tokenizer.decode(&encoding.ids, false)?;
        tokenizer.encode_pair(text, next);
        tokenizer.encode_truncated(text, Some(next), 3 + i % 6)?;
        tokenizer.ids_and_words(text);
    }
    tokenizer.encode_batch(texts, Some(8))?;
    tokenizer.encode_batch(texts, None)?;
    let every_id: Vec<u32> = (0..tokenizer.vocab_size().min(4096) as u32).collect();
    tokenizer.decode(&every_id, false)?;
    let _ = tokenizer.mask_token_id();
    Ok(Outcome::Accepted)
}

/// Mutates one section: the vocabulary by lines (or bytes), the config as JSON (or bytes),
/// or a text by inserted snippets (or bytes).
pub fn mutate(rng: &mut Rng, data: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut sections: Vec<Vec<u8>> = data.split(|&b| b == SEP).map(<[u8]>::to_vec).collect();
    while sections.len() < 3 {
        sections.push(Vec::new());
    }
    let i = match rng.below(4) {
        0 | 1 => 0,
        2 => 1,
        _ => 2 + rng.below(sections.len() - 2),
    };
    let section = &mut sections[i];
    match (i, rng.below(3)) {
        (0, 0 | 1) => mutate_lines(rng, section),
        (1, 0 | 1) => {
            if let Some(out) = json::mutate(rng, section, FIELDS) {
                *section = out;
            }
        }
        (1, _) if rng.one_in(4) => section.clear(),
        (i, 0 | 1) if i >= 2 => insert_snippet(rng, section),
        _ => bytes::mutate(rng, section, other, max_len),
    }
    let mut out = sections.join(&SEP);
    out.truncate(max_len);
    out
}

/// Deletes, copies or inserts a line, or makes one a `##` continuation.
fn mutate_lines(rng: &mut Rng, vocab: &mut Vec<u8>) {
    let mut lines: Vec<Vec<u8>> = vocab.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let i = rng.below(lines.len());
    match rng.below(5) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let line = lines[i].clone();
            lines.insert(rng.below(lines.len() + 1), line);
        }
        2 => {
            let long = vec![b'a'; rng.length(1 << 12)];
            lines.insert(i, long);
        }
        3 => {
            lines[i].splice(0..0, *b"##");
        }
        _ => lines.insert(i, rng.pick(LINES).as_bytes().to_vec()),
    }
    *vocab = lines.join(&b'\n');
}

/// Inserts a snippet, or a long run of one char, at a char boundary of a text.
fn insert_snippet(rng: &mut Rng, text: &mut Vec<u8>) {
    let boundaries: Vec<usize> = (0..=text.len())
        .filter(|&i| i == text.len() || (text[i] & 0xc0) != 0x80)
        .collect();
    let at = *rng.pick(&boundaries);
    let snippet = if rng.one_in(4) {
        rng.pick(&["a", "今", "\u{301}", "İ", " "])
            .repeat(rng.length(1 << 14))
    } else {
        rng.pick(SNIPPETS).to_string()
    };
    text.splice(at..at, snippet.into_bytes());
}
