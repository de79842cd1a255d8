//! Findings: inputs that made a target panic, crash (abort, stack overflow, out of memory) or
//! hang, and inputs accepted with non-finite outputs. Each distinct one is saved as
//! `DIR/TARGET/KIND-HASH.bin` with a `.txt` that says what happened, and printed.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::supervisor::Verdict;
use crate::outcome::Outcome;

/// The kinds of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A panic, caught in the worker.
    Panic,
    /// The worker died.
    Crash,
    /// No answer within the time limit.
    Hang,
    /// Accepted, with NaN or infinite outputs (silent NaN). Recorded, but not a failure of the
    /// run: non-finite weights and outputs are another part of the robustness work.
    NonFinite,
}

impl Kind {
    /// The kind's name in file names and reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Panic => "panic",
            Kind::Crash => "crash",
            Kind::Hang => "hang",
            Kind::NonFinite => "nonfinite",
        }
    }

    /// Whether a run with this finding fails.
    pub fn fails(self) -> bool {
        self != Kind::NonFinite
    }
}

/// A distinct finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Its kind.
    pub kind: Kind,
    /// What makes it distinct: the panic location, the crash's last stderr lines (numbers
    /// blanked), ...
    pub key: String,
    /// The full description: message, backtrace or stderr.
    pub detail: String,
    /// The saved input.
    pub file: PathBuf,
    /// How many inputs had it.
    pub count: u64,
}

/// A verdict's finding, if it is one: its kind, key and description.
pub fn classify(verdict: &Verdict) -> Option<(Kind, String, String)> {
    match verdict {
        Verdict::Outcome(Outcome::NonFinite(what)) => Some((
            Kind::NonFinite,
            format!(
                "non-finite {}",
                normalize(what.split(" = ").next().unwrap_or(what))
            ),
            what.clone(),
        )),
        Verdict::Outcome(_) => None,
        Verdict::Panic(p) => Some((
            Kind::Panic,
            format!("panic at {}", p.location),
            format!("{}\n{}", p.message, p.backtrace),
        )),
        Verdict::Crash { status, stderr } => Some((
            Kind::Crash,
            format!("{status}: {}", crash_key(stderr)),
            stderr.join("\n"),
        )),
        Verdict::Hang => Some((Kind::Hang, "hang".into(), String::new())),
    }
}

/// What the Rust runtime prints when it aborts the process.
const RUNTIME_MESSAGES: &[&str] = &[
    "memory allocation of",
    "has overflowed its stack",
    "fatal runtime error",
];

/// What tells crashes apart: the runtime's first message (`memory allocation of # bytes
/// failed`, `thread 'main' has overflowed its stack`, ...; else the last line printed) and
/// the innermost frame of the backtrace outside the standard library, when there is one.
fn crash_key(stderr: &[String]) -> String {
    let messages: Vec<&str> = stderr
        .iter()
        .map(String::as_str)
        .filter(|l| !l.trim().is_empty() && !l.starts_with(' ') && !l.starts_with("note:"))
        .filter(|l| *l != "stack backtrace:")
        .collect();
    let message = messages
        .iter()
        .find(|l| RUNTIME_MESSAGES.iter().any(|m| l.contains(m)))
        .or(messages.last())
        .map_or_else(|| "no message".into(), |l| normalize(l));
    let frame = stderr
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("at "))
        .find(|at| !at.starts_with("/rustc/") && !at.contains("/library/"));
    match frame {
        Some(at) => format!("{message} at {at}"),
        None => message,
    }
}

/// Blanks every run of digits (`#`) and the text between quotes or backticks (`_`), and cuts
/// to 200 chars, so that messages differing only in sizes, positions or the offending text
/// compare equal.
pub fn normalize(message: &str) -> String {
    let mut out = String::new();
    let mut quote = None;
    let mut escaped = false;
    for c in message.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {
                if !out.ends_with('_') {
                    out.push('_');
                }
            }
            None if c == '"' || c == '`' => {
                out.push(c);
                quote = Some(c);
            }
            None if c.is_ascii_digit() => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            None => out.push(c),
        }
    }
    out.chars().take(200).collect()
}

/// FNV-1a, 64 bits: a stable name for an input.
pub fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The findings of one run, saved under `dir`.
#[derive(Debug)]
pub struct Findings {
    dir: PathBuf,
    by_key: BTreeMap<String, Finding>,
}

impl Findings {
    /// Findings saved to `dir` (created when the first one is saved).
    pub fn new(dir: PathBuf) -> Findings {
        Findings {
            dir,
            by_key: BTreeMap::new(),
        }
    }

    /// Counts `input`'s finding; a new one is saved and printed.
    ///
    /// # Errors
    /// When the input cannot be saved.
    pub fn record(
        &mut self,
        kind: Kind,
        key: String,
        detail: String,
        input: &[u8],
    ) -> io::Result<()> {
        if let Some(seen) = self.by_key.get_mut(&key) {
            seen.count += 1;
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let stem = format!("{}-{:016x}", kind.name(), hash(input));
        let file = self.dir.join(format!("{stem}.bin"));
        std::fs::write(&file, input)?;
        let text = format!("{key}\n\n{detail}\n");
        std::fs::write(self.dir.join(format!("{stem}.txt")), &text)?;
        println!(
            "finding: {key}\n  input: {} ({} bytes): {}\n{}",
            file.display(),
            input.len(),
            preview(input),
            indent(&detail)
        );
        self.by_key.insert(
            key.clone(),
            Finding {
                kind,
                key,
                detail,
                file,
                count: 1,
            },
        );
        Ok(())
    }

    /// The distinct findings, by kind then key.
    pub fn all(&self) -> Vec<&Finding> {
        let mut all: Vec<&Finding> = self.by_key.values().collect();
        all.sort_by(|a, b| (a.kind, &a.key).cmp(&(b.kind, &b.key)));
        all
    }

    /// Where they are saved.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The first 300 bytes, escaped.
fn preview(input: &[u8]) -> String {
    let shown = &input[..input.len().min(300)];
    let more = if input.len() > 300 { "..." } else { "" };
    format!("{}{more}", shown.escape_ascii())
}

fn indent(text: &str) -> String {
    text.lines()
        .take(40)
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use test_support::Scratch;

    use super::*;

    #[test]
    fn a_crash_is_known_by_its_message_and_innermost_frame() {
        let stderr: Vec<String> = [
            "skipping: conversion error on Int(24)",
            "memory allocation of 4294967295 bytes failed",
            "stack backtrace:",
            "   3: alloc::raw_vec::finish_grow",
            "             at /rustc/abc/library/alloc/src/raw_vec.rs:1:1",
            "   4: candle_core::pickle::Stack::read_loop",
            "             at /cargo/candle-core/src/pickle.rs:484:32",
            "note: Some details are omitted",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            crash_key(&stderr),
            "memory allocation of # bytes failed at /cargo/candle-core/src/pickle.rs:484:32"
        );
    }

    #[test]
    fn numbers_and_quoted_text_are_blanked() {
        assert_eq!(
            normalize("memory allocation of 4000000000 bytes failed"),
            "memory allocation of # bytes failed"
        );
        assert_eq!(
            normalize(r#"unknown field `input_idz`, expected "a\"1" at line 1 column 12"#),
            "unknown field `_`, expected \"_\" at line # column #"
        );
    }

    #[test]
    fn a_finding_is_saved_once_and_counted() {
        let dir = Scratch::new("roformer-fuzz-findings", "saved-once");
        let mut findings = Findings::new(dir.to_path_buf());
        for input in [&b"a"[..], b"b"] {
            findings
                .record(
                    Kind::Panic,
                    "panic at x.rs:1:1".into(),
                    "boom".into(),
                    input,
                )
                .unwrap();
        }
        let all = findings.all();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].count, 2);
        assert_eq!(std::fs::read(&all[0].file).unwrap(), b"a");
    }
}
