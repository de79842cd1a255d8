//! `--famous`: the couplets of the Three Hundred Tang Poems, one character masked in each.
//!
//! The file is chinese-poetry's `mengxue/tangshisanbaishou.json`, in traditional characters:
//! `{"title", "content": [{"type", "content": [{"chapter", "subchapter", "author",
//! "paragraphs": [...]}]}]}`, sections (by form) of poems. A poem's paragraphs are joined,
//! cleared of editorial notes and whitespace, and cut into couplets ([`couplets`]).
//!
//! Each couplet is masked once: one draw of the seeded RNG per couplet picks character token
//! `draw % n` of its `n` character tokens, in the file's text and in its simplified copy
//! ([`to_simplified`]), so both scripts mask the same character whenever they have as many
//! character tokens (conversion keeps the number of characters).

use std::path::Path;

use anyhow::{bail, Context as _};
use rand::{Rng, SeedableRng};
use roformer::data::to_simplified;
use roformer::RoFormerTokenizer;
use serde::Deserialize;

use super::{is_character, Masked};

/// The anthology: sections of poems.
#[derive(Deserialize)]
struct Anthology {
    content: Vec<Section>,
}

/// The poems of one form (五言絕句, ...).
#[derive(Deserialize)]
struct Section {
    content: Vec<Poem>,
}

/// One poem.
#[derive(Deserialize)]
struct Poem {
    chapter: Option<String>,
    author: Option<String>,
    paragraphs: Vec<String>,
}

/// One couplet of a poem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Couplet {
    /// The couplet, in the file's script: `line，line。`
    pub text: String,
    /// The poem it comes from: `title (author)`.
    pub poem: String,
}

/// Characters that end a couplet: the full-width sentence ends and their ASCII forms (the
/// file has a few).
fn ends_couplet(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '；' | '!' | '?' | ';')
}

/// `text` without its editorial notes and whitespace. A note runs from `(` or `（` to the next
/// `)` or `）` (the file mixes both widths, and a note may span paragraphs); a note left open
/// runs to the end; a stray closing bracket is dropped.
fn strip_notes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_note = false;
    for c in text.chars() {
        match c {
            '(' | '（' => in_note = true,
            ')' | '）' => in_note = false,
            _ if in_note || c.is_whitespace() => {}
            _ => out.push(c),
        }
    }
    out
}

/// The couplets of a poem's text: the text (notes and whitespace removed) cut after every
/// sentence end (`。！？；`, and ASCII `!?;`), keeping pieces that hold a character; a last
/// piece without a sentence end is kept too.
pub(super) fn couplets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut piece = String::new();
    for c in strip_notes(text).chars() {
        piece.push(c);
        if ends_couplet(c) {
            out.push(std::mem::take(&mut piece));
        }
    }
    out.push(piece);
    out.retain(|p| p.chars().any(char::is_alphabetic));
    out
}

/// Every couplet of the anthology at `path`, poem by poem.
///
/// # Errors
/// An unreadable file, JSON not in the anthology's layout, no poem, or a poem with no couplet
/// (named).
pub(super) fn read_couplets(path: &Path) -> anyhow::Result<Vec<Couplet>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the famous-poems file {} (--famous-file)",
            path.display()
        )
    })?;
    parse_couplets(&text).with_context(|| format!("--famous-file {}", path.display()))
}

/// Every couplet of the anthology JSON `text`.
fn parse_couplets(text: &str) -> anyhow::Result<Vec<Couplet>> {
    let anthology: Anthology = serde_json::from_str(text).context(
        "not the Three Hundred Tang Poems JSON of chinese-poetry: expected {\"content\": \
         [{\"content\": [{\"chapter\", \"author\", \"paragraphs\": [...]}]}]}",
    )?;
    let mut out = Vec::new();
    let mut poems = 0;
    for (s, section) in anthology.content.iter().enumerate() {
        for (p, poem) in section.content.iter().enumerate() {
            poems += 1;
            let name = format!(
                "{} ({})",
                poem.chapter.as_deref().unwrap_or("untitled"),
                poem.author.as_deref().unwrap_or("anonymous")
            );
            let found = couplets(&poem.paragraphs.concat());
            if found.is_empty() {
                bail!("poem {p} of section {s}, {name}, has no text (no couplet)");
            }
            out.extend(found.into_iter().map(|text| Couplet {
                text,
                poem: name.clone(),
            }));
        }
    }
    if poems == 0 {
        bail!("the file has no poem");
    }
    Ok(out)
}

/// Each couplet as `[CLS] couplet [SEP]` (cut to `seq_len` tokens) with one character token
/// masked, the originals first, then their simplified copies. A couplet (in one script) with
/// no character token in the vocabulary is left out.
///
/// # Errors
/// A tokenizer without mask token, `seq_len` below 2.
pub(super) fn mask_couplets(
    tokenizer: &RoFormerTokenizer,
    couplets: &[Couplet],
    seq_len: usize,
    seed: u64,
) -> anyhow::Result<Vec<Masked>> {
    let mask_id = tokenizer.mask_token_id()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let draws: Vec<u64> = couplets.iter().map(|_| rng.random()).collect();
    let mut out = Vec::with_capacity(2 * couplets.len());
    for copy in [false, true] {
        for (couplet, &draw) in couplets.iter().zip(&draws) {
            let text = if copy {
                to_simplified(&couplet.text)
            } else {
                couplet.text.clone()
            };
            let encoding = tokenizer.encode_truncated(&text, None, seq_len)?;
            let eligible: Vec<usize> = (0..encoding.len())
                .filter(|&p| is_character(&encoding.tokens[p]))
                .collect();
            if eligible.is_empty() {
                continue;
            }
            let position = eligible[(draw % eligible.len() as u64) as usize];
            let mut ids = encoding.ids;
            let target = std::mem::replace(&mut ids[position], mask_id);
            out.push(Masked {
                ids,
                targets: vec![(position, target)],
                copy,
                name: format!("the couplet {text:?} of {}", couplet.poem),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "famous_tests.rs"]
mod tests;
