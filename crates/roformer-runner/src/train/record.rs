//! `run.json`: a run's record (its arguments and its [`Fingerprint`]), and the check that a
//! resume continues the run it recorded.

use std::path::Path;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use crate::{json, output};

/// `run.json`: a run's arguments and, from this version on, its fingerprint.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunRecord<A> {
    /// The arguments, at the top level of the file.
    #[serde(flatten)]
    pub args: A,
    /// What defines the run (absent in files written before fingerprints were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

/// Writes `out/run.json`.
///
/// # Errors
/// File errors.
pub fn write_record<A: Serialize>(
    out: &Path,
    args: &A,
    fingerprint: &Fingerprint,
) -> anyhow::Result<()> {
    let record = RunRecord {
        args,
        fingerprint: Some(fingerprint.clone()),
    };
    output::write(
        &out.join("run.json"),
        json::to_string_pretty(&record)?.as_bytes(),
    )
}

/// Reads `out/run.json`.
///
/// # Errors
/// A missing or malformed file.
pub fn read_record<A: DeserializeOwned>(out: &Path) -> anyhow::Result<RunRecord<A>> {
    let path = out.join("run.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: no run to resume (start one without --resume)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is malformed", path.display()))
}

/// What a resume found in `run.json` besides the arguments.
#[derive(Debug)]
pub struct Recorded {
    /// The run's fingerprint (`None` in an older `run.json`).
    pub fingerprint: Option<Fingerprint>,
}

/// Checks that the run as it would resume (`now`) is the run that was recorded; a record
/// without a fingerprint (an older `run.json`) is accepted with a warning.
///
/// # Errors
/// Every difference, one per line, when there is any.
pub fn check_same_run(
    out: &Path,
    recorded: Option<&Fingerprint>,
    now: &Fingerprint,
) -> anyhow::Result<()> {
    let Some(recorded) = recorded else {
        eprintln!(
            "warning: {} records no fingerprint (written by an older version): the config, \
             vocabulary, data and shapes of this resume cannot be checked against the run's; \
             they are recorded now",
            out.join("run.json").display()
        );
        return Ok(());
    };
    let differences = recorded.differences(now, &out.join("checkpoint"));
    if !differences.is_empty() {
        bail!(
            "{} cannot resume: it is not the run that was started there:\n  {}\n(restore the \
             run's inputs, or start a new run with --overwrite)",
            out.display(),
            differences.join("\n  ")
        );
    }
    Ok(())
}
