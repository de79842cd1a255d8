//! Corpus readers: plain lines, paragraphs, JSON Lines and the chinese-poetry JSON layout.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::Value;

use super::error::{DataError, Record};

/// One document of a corpus: its text (trimmed, never empty) and, for poems, title and author.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// The text, trimmed of leading and trailing whitespace.
    pub text: String,
    /// The poem's `title`, or its `rhythmic` (the tune of a ci) when it has no title.
    pub title: Option<String>,
    /// The poem's `author`.
    pub author: Option<String>,
}

impl Document {
    /// A document of `text` alone.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}

/// How a corpus file is laid out (in JSON: `"lines"`, `"paragraphs"`,
/// `{"json_lines": {"field": "text"}}`, `"chinese_poetry"`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CorpusFormat {
    /// A document per non-empty line.
    Lines,
    /// Documents separated by blank lines (lines empty after trimming); a document's lines are
    /// joined with `\n`.
    Paragraphs,
    /// One JSON object per non-blank line; the document is its string field `field`.
    JsonLines {
        /// The field holding the text (usually `"text"`).
        field: String,
    },
    /// The npm package `chinese-poetry` 2.0.1: each file a JSON array of objects with
    /// `paragraphs` (an array of strings, joined without separator into the text), `title` or
    /// `rhythmic`, and `author`.
    ChinesePoetry,
}

/// File extensions a directory read picks up (other files, such as `README.md` or `LICENSE`,
/// and names starting with `.` are skipped).
pub const CORPUS_EXTENSIONS: [&str; 3] = ["txt", "json", "jsonl"];

impl CorpusFormat {
    /// The format of a file from its extension: `.jsonl` is JSON Lines with field `"text"`,
    /// `.json` is chinese-poetry, anything else is lines.
    pub fn detect(path: &Path) -> Self {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some("jsonl") => Self::JsonLines {
                field: "text".into(),
            },
            Some("json") => Self::ChinesePoetry,
            _ => Self::Lines,
        }
    }
}

/// Reads a corpus: one file, or every corpus file (see [`CORPUS_EXTENSIONS`]) under a
/// directory, recursively, in sorted path order. Each file is read as `format`, or as
/// [`CorpusFormat::detect`] says when `format` is `None`. Records blank after trimming are
/// dropped; the documents come in file order, then record order.
///
/// # Errors
/// [`DataError::Io`], [`DataError::NotUtf8`], [`DataError::BadJson`],
/// [`DataError::NotAnArray`] or [`DataError::MissingField`] for the first bad file (in path
/// order); [`DataError::EmptyCorpus`] if there is no record at all;
/// [`DataError::NoUsableDocument`] if every record is blank.
pub fn read_corpus(path: &Path, format: Option<&CorpusFormat>) -> Result<Vec<Document>, DataError> {
    let files = if path.is_dir() {
        corpus_files(path)?
    } else {
        vec![path.to_path_buf()]
    };
    let parsed = files
        .par_iter()
        .map(|file| {
            let format = format
                .cloned()
                .unwrap_or_else(|| CorpusFormat::detect(file));
            read_file(file, &format)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let records = parsed.iter().map(|file| file.records).sum();
    let documents: Vec<Document> = parsed.into_iter().flat_map(|file| file.documents).collect();
    if records == 0 {
        return Err(DataError::EmptyCorpus {
            path: path.to_path_buf(),
        });
    }
    if documents.is_empty() {
        return Err(DataError::NoUsableDocument {
            path: path.to_path_buf(),
            records,
        });
    }
    Ok(documents)
}

/// The corpus files under `dir`, recursively, sorted by path.
fn corpus_files(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(DataError::io(&dir))? {
            let path = entry.map_err(DataError::io(&dir))?.path();
            let hidden = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with('.'));
            if hidden {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .and_then(|ext| ext.to_str())
                .is_some_and(|ext| CORPUS_EXTENSIONS.contains(&ext))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The documents of one file and how many records (blank or not) it had.
struct Parsed {
    documents: Vec<Document>,
    records: usize,
}

fn read_file(path: &Path, format: &CorpusFormat) -> Result<Parsed, DataError> {
    let bytes = crate::memory::read_input_file(path).map_err(DataError::io(path))?;
    let text = String::from_utf8(bytes).map_err(|err| {
        let valid = &err.as_bytes()[..err.utf8_error().valid_up_to()];
        DataError::NotUtf8 {
            path: path.to_path_buf(),
            line: valid.iter().filter(|&&b| b == b'\n').count() + 1,
        }
    })?;
    let texts = match format {
        CorpusFormat::Lines => lines(&text),
        CorpusFormat::Paragraphs => paragraphs(&text),
        CorpusFormat::JsonLines { field } => json_lines(path, &text, field)?,
        CorpusFormat::ChinesePoetry => return poems(path, &text),
    };
    let records = texts.len();
    let documents = texts
        .into_iter()
        .filter(|text| !text.trim().is_empty())
        .map(|text| Document::new(text.trim()))
        .collect();
    Ok(Parsed { documents, records })
}

/// The non-empty lines (`\n` or `\r\n` ends a line).
fn lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs of non-blank lines, joined with `\n`.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                out.push(current.join("\n"));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        out.push(current.join("\n"));
    }
    out
}

/// The string field `field` of the object on each non-blank line.
fn json_lines(path: &Path, text: &str, field: &str) -> Result<Vec<String>, DataError> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|err| DataError::BadJson {
            path: path.to_path_buf(),
            line: index + 1,
            column: err.column(),
            message: err.to_string(),
        })?;
        let text =
            value
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(|| DataError::MissingField {
                    path: path.to_path_buf(),
                    record: Record::Line(index + 1),
                    field: field.to_owned(),
                    expected: "a string",
                })?;
        out.push(text.to_owned());
    }
    Ok(out)
}

/// The poems of a chinese-poetry file.
fn poems(path: &Path, text: &str) -> Result<Parsed, DataError> {
    let value: Value = serde_json::from_str(text).map_err(|err| DataError::BadJson {
        path: path.to_path_buf(),
        line: err.line(),
        column: err.column(),
        message: err.to_string(),
    })?;
    let Value::Array(items) = value else {
        return Err(DataError::NotAnArray {
            path: path.to_path_buf(),
        });
    };
    let missing = |index: usize, field: &str, expected: &'static str| DataError::MissingField {
        path: path.to_path_buf(),
        record: Record::Element(index),
        field: field.to_owned(),
        expected,
    };
    let mut documents = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let lines = item
            .get("paragraphs")
            .and_then(Value::as_array)
            .ok_or_else(|| missing(index, "paragraphs", "an array of strings"))?;
        let mut text = String::new();
        for line in lines {
            let line = line
                .as_str()
                .ok_or_else(|| missing(index, "paragraphs", "an array of strings"))?;
            text.push_str(line);
        }
        let string = |field: &str| item.get(field).and_then(Value::as_str).map(str::to_owned);
        let text = text.trim();
        if !text.is_empty() {
            documents.push(Document {
                text: text.to_owned(),
                title: string("title").or_else(|| string("rhythmic")),
                author: string("author"),
            });
        }
    }
    Ok(Parsed {
        documents,
        records: items.len(),
    })
}

#[cfg(test)]
#[path = "corpus_tests.rs"]
mod tests;
