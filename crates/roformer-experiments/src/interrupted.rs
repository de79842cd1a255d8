//! Continuing an experiment's run that a stop interrupted: Ctrl-C or SIGTERM saves the run's
//! checkpoint, and the same command given again resumes it from there (as `train --resume`,
//! which repeats the uninterrupted run) instead of starting it over. A run that was killed
//! before saving, or whose record says other settings, starts over.
//!
//! The wall time of the parts a run took so far is kept beside the checkpoint
//! (`elapsed.json`), so that a finished run reports its whole time.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::{json, output};

/// The file of the seconds the earlier parts of an interrupted run took (a name
/// `train::common` knows as a run's, so that `--overwrite` may replace it).
const ELAPSED_FILE: &str = "elapsed.json";

/// An unfinished run that can be continued.
#[derive(Debug)]
pub struct Interrupted {
    /// Its checkpoint (`DIR/checkpoint`), where it continues from.
    pub checkpoint: PathBuf,
    /// The fingerprint its `run.json` records, checked against the run as it resumes.
    pub fingerprint: Option<Fingerprint>,
    /// Wall seconds of its earlier parts.
    pub seconds: f64,
}

/// `elapsed.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Elapsed {
    /// Wall seconds of the parts so far.
    seconds: f64,
}

impl Interrupted {
    /// The run in `dir`, when it is unfinished (no `done.json`), holds a saved checkpoint, and
    /// its `run.json` records `record` as it is now (arm, seed, learning rate, settings).
    ///
    /// # Errors
    /// `record` that does not serialise.
    pub fn find(dir: &Path, record: &impl Serialize) -> anyhow::Result<Option<Interrupted>> {
        let checkpoint = dir.join("checkpoint");
        if super::done::is_done(dir) || !checkpoint.join("trainer_state.json").is_file() {
            return Ok(None);
        }
        let Some(mut recorded) = read_json::<serde_json::Value>(&dir.join("run.json")) else {
            return Ok(None);
        };
        let fingerprint = recorded
            .as_object_mut()
            .and_then(|fields| fields.remove("fingerprint"));
        if recorded != serde_json::to_value(record)? {
            return Ok(None);
        }
        let fingerprint = fingerprint.and_then(|f| serde_json::from_value(f).ok());
        let seconds = read_json::<Elapsed>(&dir.join(ELAPSED_FILE)).map_or(0.0, |e| e.seconds);
        Ok(Some(Interrupted {
            checkpoint,
            fingerprint,
            seconds,
        }))
    }
}

/// Records that the parts of the run in `dir` so far took `seconds`, when the run left a
/// checkpoint to continue from.
///
/// # Errors
/// File errors.
pub fn record_seconds(dir: &Path, seconds: f64) -> anyhow::Result<()> {
    if !dir.join("checkpoint/trainer_state.json").is_file() {
        return Ok(());
    }
    let text = json::to_string_pretty(&Elapsed { seconds })?;
    output::write(&dir.join(ELAPSED_FILE), text.as_bytes())
}

/// The JSON file at `path`, or `None` when it is missing or not a `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}
