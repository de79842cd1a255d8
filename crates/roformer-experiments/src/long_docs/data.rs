//! The two datasets of `experiment long-docs`, built from the poems of the corpus's three
//! collections (Tang shi, Song shi, Song ci), poets split between training and dev by a hash
//! of the name (no poet on both sides), every choice made by a hash of a text (no random
//! state): the same corpus and sizes give the same files.
//!
//! - **collection**: a document is `k` consecutive poems of one poet (at most
//!   `max_per_poet` documents per poet), labelled with its collection; the same number of
//!   documents per collection, chosen by a hash of the text.
//! - **authorship**: an example is an anchor (`k` consecutive poems of poet X) and two
//!   candidates: `k` other poems of X (the chunk half the poet's poems further on, so that
//!   the two are not one series of poems) and `k` poems of another poet Y of the same
//!   collection and the same side of the split (Y and Y's chunk chosen by a hash). The label
//!   says which candidate is X's (`first` or `second`); the examples of a side are ordered by
//!   a hash of the anchor and alternate between the labels, so each label has exactly half.
//!
//! A poet's side is that of the name in simplified characters, so that a poet written in
//! traditional characters in one collection and in simplified ones in another is on one
//! side. A dataset that cannot have the documents asked for is refused with what it could have:
//! there is no silent shortfall.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use roformer::data::{is_validation, read_corpus, text_hash, to_simplified};
use serde::{Deserialize, Serialize};

use roformer_runner::{json, output};

/// The collections: (label, folder of the corpus).
pub const COLLECTIONS: [(&str, &str); 3] = [
    ("tang-shi", "tang"),
    ("song-shi", "song"),
    ("song-ci", "ci"),
];

/// The labels of the authorship task: where the anchor's poet's candidate stands.
pub const AUTHORSHIP_LABELS: [&str; 2] = ["first", "second"];

/// One collection's poems by poet, each poet's in corpus order.
#[derive(Debug, Clone)]
pub struct Collection {
    /// The collection's label (`tang-shi`, ...).
    pub label: String,
    /// Poet → poems.
    pub poets: BTreeMap<String, Vec<String>>,
}

/// Reads the collections of `corpus` (folders `tang`, `song`, `ci`); poems without an author
/// are left out.
///
/// # Errors
/// A missing or unreadable folder (naming the fetch script).
pub fn read_collections(corpus: &Path) -> anyhow::Result<Vec<Collection>> {
    let mut collections = Vec::new();
    for (label, folder) in COLLECTIONS {
        let path = corpus.join(folder);
        let documents = read_corpus(&path, None).with_context(|| {
            format!(
                "{}: fetch the corpus with scripts/fetch_chinese_poetry.sh",
                path.display()
            )
        })?;
        let mut poets: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in documents {
            if let Some(author) = d.author.filter(|a| !a.trim().is_empty()) {
                poets.entry(author).or_default().push(d.text);
            }
        }
        collections.push(Collection {
            label: label.into(),
            poets,
        });
    }
    Ok(collections)
}

/// How many examples to build, and from what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizes {
    /// Poems per document (collection) or per anchor and candidate (authorship): `k`.
    pub poems_per_doc: usize,
    /// Most documents (collection) or anchors (authorship) per poet.
    pub max_per_poet: usize,
    /// Training examples per label.
    pub train_per_class: usize,
    /// Dev examples per label.
    pub dev_per_class: usize,
    /// Share of poets held out for dev (by hash of the name).
    pub dev_poets: f64,
}

/// A side of the split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Training.
    Train,
    /// Dev.
    Dev,
}

impl Side {
    /// The side of `poet`, by a hash of the name in simplified characters (the corpus writes
    /// the Song ci's poets in simplified characters and the shi's in traditional ones: 苏轼 of
    /// the ci is 蘇軾 of the shi, and goes to the same side).
    fn of(poet: &str, dev_poets: f64) -> Side {
        if is_validation(&to_simplified(poet), dev_poets) {
            Side::Dev
        } else {
            Side::Train
        }
    }

    /// `train` or `dev`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Train => "train",
            Side::Dev => "dev",
        }
    }

    /// Examples per label asked for this side, and the flag that asks.
    fn wanted(self, sizes: &Sizes) -> (usize, &'static str) {
        match self {
            Side::Train => (sizes.train_per_class, "--train-per-class"),
            Side::Dev => (sizes.dev_per_class, "--dev-per-class"),
        }
    }
}

/// A labelled example: its texts (a document; or an anchor and two candidates), the poet of
/// each, its collection and its label's index.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The texts.
    pub segments: Vec<String>,
    /// The poet of each text.
    pub poets: Vec<String>,
    /// The collection's label.
    pub collection: String,
    /// The label's index.
    pub label: usize,
}

/// A dataset: its labels and both sides.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The labels in index order.
    pub labels: Vec<String>,
    /// Training examples, in a hash order.
    pub train: Vec<Item>,
    /// Dev examples, in a hash order.
    pub dev: Vec<Item>,
}

/// The consecutive `k`-poem chunks of `poems`, each as one text.
fn chunks(poems: &[String], k: usize) -> Vec<String> {
    poems.chunks_exact(k).map(|c| c.concat()).collect()
}

/// The collection task (see the module doc).
///
/// # Errors
/// A side with fewer documents of a collection than asked (every shortfall named).
pub fn collection_dataset(collections: &[Collection], sizes: &Sizes) -> anyhow::Result<Dataset> {
    let mut sides = [(Side::Train, Vec::new()), (Side::Dev, Vec::new())];
    let mut short = Vec::new();
    for (side, items) in &mut sides {
        let (want, flag) = side.wanted(sizes);
        for (label, c) in collections.iter().enumerate() {
            let mut mine: Vec<Item> = Vec::new();
            for (poet, poems) in &c.poets {
                if Side::of(poet, sizes.dev_poets) != *side {
                    continue;
                }
                let docs = chunks(poems, sizes.poems_per_doc);
                mine.extend(docs.into_iter().take(sizes.max_per_poet).map(|text| Item {
                    segments: vec![text],
                    poets: vec![poet.clone()],
                    collection: c.label.clone(),
                    label,
                }));
            }
            if mine.len() < want {
                short.push((
                    *side,
                    format!(
                        "{}: {} {} documents, fewer than {flag} {want}",
                        side.name(),
                        mine.len(),
                        c.label
                    ),
                ));
            }
            mine.sort_by_key(|i| text_hash(&i.segments[0]));
            mine.truncate(want);
            items.extend(mine);
        }
        items.sort_by_key(|i| text_hash(&i.segments[0]));
    }
    refuse_shortfall(&short, sizes)?;
    let [(_, train), (_, dev)] = sides;
    Ok(Dataset {
        labels: collections.iter().map(|c| c.label.clone()).collect(),
        train,
        dev,
    })
}

/// The authorship task (see the module doc).
///
/// # Errors
/// A side with fewer examples than asked.
pub fn authorship_dataset(collections: &[Collection], sizes: &Sizes) -> anyhow::Result<Dataset> {
    let mut short = Vec::new();
    let mut sides = Vec::new();
    for side in [Side::Train, Side::Dev] {
        let (want, flag) = side.wanted(sizes);
        let mut items: Vec<Item> = collections
            .iter()
            .flat_map(|c| triples(c, side, sizes))
            .collect();
        let asked = want * AUTHORSHIP_LABELS.len();
        if items.len() < asked {
            short.push((
                side,
                format!(
                "{}: {} anchors with two candidates, fewer than the {asked} that {flag} {want} \
                 asks ({} labels)",
                side.name(),
                items.len(),
                AUTHORSHIP_LABELS.len()
            ),
            ));
        }
        items.sort_by_key(|i| text_hash(&i.segments[0]));
        items.truncate(asked);
        for (i, item) in items.iter_mut().enumerate() {
            place_candidates(item, i % 2);
        }
        sides.push(items);
    }
    refuse_shortfall(&short, sizes)?;
    let dev = sides.pop().unwrap_or_default();
    let train = sides.pop().unwrap_or_default();
    Ok(Dataset {
        labels: AUTHORSHIP_LABELS.iter().map(|l| l.to_string()).collect(),
        train,
        dev,
    })
}

/// The authorship examples of collection `c` whose poets are on `side`, each as
/// `[anchor, X's candidate, Y's candidate]` with label 0 (placed by [`place_candidates`]).
fn triples(c: &Collection, side: Side, sizes: &Sizes) -> Vec<Item> {
    let k = sizes.poems_per_doc;
    // The poets of this side with a chunk to give as the other candidate.
    let others: Vec<(&String, Vec<String>)> = c
        .poets
        .iter()
        .filter(|(poet, poems)| Side::of(poet, sizes.dev_poets) == side && poems.len() >= k)
        .map(|(poet, poems)| (poet, chunks(poems, k)))
        .collect();
    let mut items = Vec::new();
    for (x, x_chunks) in &others {
        let candidates: Vec<&(&String, Vec<String>)> =
            others.iter().filter(|(y, _)| y != x).collect();
        if candidates.is_empty() {
            continue;
        }
        let half = x_chunks.len() / 2;
        for j in 0..half.min(sizes.max_per_poet) {
            let key = format!("{x}\u{0}{j}");
            let (y, y_chunks) = candidates[pick(&key, candidates.len())];
            let y_chunk = &y_chunks[pick(&format!("{key}\u{0}{y}"), y_chunks.len())];
            items.push(Item {
                segments: vec![
                    x_chunks[j].clone(),
                    x_chunks[j + half].clone(),
                    y_chunk.clone(),
                ],
                poets: vec![(*x).clone(), (*x).clone(), (*y).clone()],
                collection: c.label.clone(),
                label: 0,
            });
        }
    }
    items
}

/// An index below `n` (at least 1) from a hash of `key`.
fn pick(key: &str, n: usize) -> usize {
    (text_hash(key) % n as u64) as usize
}

/// Puts the anchor's poet's candidate (segment 1 of a fresh triple) at place `label` (0:
/// first, 1: second) and labels the item so.
fn place_candidates(item: &mut Item, label: usize) {
    if label == 1 {
        item.segments.swap(1, 2);
        item.poets.swap(1, 2);
    }
    item.label = label;
}

/// Fails with every shortfall (side, what it could have) and what would help, when there
/// is one.
fn refuse_shortfall(short: &[(Side, String)], sizes: &Sizes) -> anyhow::Result<()> {
    if short.is_empty() {
        return Ok(());
    }
    let on = |side| short.iter().any(|(s, _)| *s == side);
    let split = match (on(Side::Train), on(Side::Dev)) {
        (true, false) => format!(", or lower --dev-poets ({})", sizes.dev_poets),
        (false, true) => format!(", or raise --dev-poets ({})", sizes.dev_poets),
        _ => String::new(),
    };
    let what: Vec<&str> = short.iter().map(|(_, s)| s.as_str()).collect();
    anyhow::bail!(
        "the corpus does not give the examples asked for: {}; ask for fewer, raise --max-per-poet ({}) or lower --poems-per-doc ({}){split}",
        what.join("; "),
        sizes.max_per_poet,
        sizes.poems_per_doc
    )
}

/// A line of a written dataset: what `train classify` reads, and the poets and collection for
/// the reader.
#[derive(Debug, Serialize)]
struct Line<'a> {
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    text_pair: Option<String>,
    label: &'a str,
    poets: &'a [String],
    collection: &'a str,
}

/// The first `n` characters of `text`.
fn cut(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// Characters per text of an example of `segments` texts at max length `length`: a single
/// document is left whole (the tokenizer cuts it); an anchor and two candidates each get an
/// equal share of what `[CLS]` and the three `[SEP]` leave, so that each is seen in its
/// beginning whatever the length (a character is at most one token).
pub fn share(segments: usize, length: usize) -> Option<usize> {
    (segments > 1).then(|| length.saturating_sub(segments + 1) / segments)
}

/// The texts of `item` as written at max length `length`: each cut to its [`share`], a
/// single document whole (the tokenizer cuts it).
fn written_texts(item: &Item, length: usize) -> Vec<String> {
    match share(item.segments.len(), length) {
        Some(n) => item.segments.iter().map(|s| cut(s, n)).collect(),
        None => item.segments.clone(),
    }
}

/// The texts of `item` as a model at max length `length` sees them: [`written_texts`], a
/// single document cut to the `length - 2` characters that `[CLS]` and `[SEP]` leave (a
/// character is at most one token).
pub fn seen_texts(item: &Item, length: usize) -> Vec<String> {
    let n = share(item.segments.len(), length).unwrap_or(length.saturating_sub(2));
    item.segments.iter().map(|s| cut(s, n)).collect()
}

/// An example at max length `length`: one text, or the anchor as the text and the two
/// candidates as the pair, joined by `separator` (the tokenizer's `[SEP]`), each cut to its
/// [`share`].
fn line<'a>(item: &'a Item, labels: &'a [String], length: usize, separator: &str) -> Line<'a> {
    let texts = written_texts(item, length);
    let (text, pair) = texts
        .split_first()
        .map_or((String::new(), None), |(first, rest)| {
            (
                first.clone(),
                (!rest.is_empty()).then(|| rest.join(separator)),
            )
        });
    Line {
        text,
        text_pair: pair,
        label: labels.get(item.label).map_or("", String::as_str),
        poets: &item.poets,
        collection: &item.collection,
    }
}

/// Writes `dataset` at max length `length` into `dir/L{length}/{train,dev}.jsonl`: their
/// paths.
///
/// # Errors
/// File errors.
pub fn write_dataset(
    dataset: &Dataset,
    length: usize,
    separator: &str,
    dir: &Path,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = dir.join(format!("L{length}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let paths = (dir.join("train.jsonl"), dir.join("dev.jsonl"));
    for (path, items) in [(&paths.0, &dataset.train), (&paths.1, &dataset.dev)] {
        let mut text = String::new();
        for item in items {
            text.push_str(&json::to_string(&line(
                item,
                &dataset.labels,
                length,
                separator,
            ))?);
            text.push('\n');
        }
        output::write(path, text.as_bytes())?;
    }
    Ok(paths)
}

/// How a dataset came out.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetStats {
    /// Per label: (label, training examples, dev examples).
    pub labels: Vec<(String, usize, usize)>,
    /// Per collection: (collection, training examples, dev examples).
    pub collections: Vec<(String, usize, usize)>,
    /// Texts per example (1: a document; 3: an anchor and two candidates).
    pub segments: usize,
    /// Mean characters per text.
    pub mean_chars: f64,
}

impl DatasetStats {
    /// The statistics of `dataset`.
    pub fn of(dataset: &Dataset) -> DatasetStats {
        let count =
            |items: &[Item], f: &dyn Fn(&Item) -> bool| items.iter().filter(|i| f(i)).count();
        let per = |f: &dyn Fn(&Item) -> bool| (count(&dataset.train, f), count(&dataset.dev, f));
        let labels = (dataset.labels.iter().enumerate())
            .map(|(i, l)| {
                let (t, d) = per(&|item| item.label == i);
                (l.clone(), t, d)
            })
            .collect();
        let collections = COLLECTIONS
            .iter()
            .map(|(c, _)| {
                let (t, d) = per(&|item| item.collection == *c);
                (c.to_string(), t, d)
            })
            .collect();
        let all = || dataset.train.iter().chain(&dataset.dev);
        let texts = all().map(|i| i.segments.len()).sum::<usize>();
        let chars: usize = all()
            .flat_map(|i| &i.segments)
            .map(|s| s.chars().count())
            .sum();
        DatasetStats {
            labels,
            collections,
            segments: dataset.train.first().map_or(1, |i| i.segments.len()),
            mean_chars: chars as f64 / texts.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests;
