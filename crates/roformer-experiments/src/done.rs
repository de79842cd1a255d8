//! `done.json`: the record an experiment writes into a run's directory once the run finished;
//! a run that has one is not run again.

use std::path::Path;

use anyhow::Context;
use roformer_runner::{json, output};
use serde::Serialize;

/// Whether run directory `dir` finished (holds `done.json`).
pub fn is_done(dir: &Path) -> bool {
    dir.join("done.json").is_file()
}

/// Marks run directory `dir` finished, with what the experiment needs to know of it.
pub fn mark_done(dir: &Path, record: &impl Serialize) -> anyhow::Result<()> {
    let text = json::to_string_pretty(record)?;
    output::write(&dir.join("done.json"), text.as_bytes())
}

/// The record [`mark_done`] wrote in run directory `dir`.
///
/// # Errors
/// A missing, unreadable or malformed `done.json`.
pub fn read_done<T: serde::de::DeserializeOwned>(dir: &Path) -> anyhow::Result<T> {
    let path = dir.join("done.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a run record", path.display()))
}
