//! Writing Hugging Face model directories: `config.json`, `model.safetensors` (with the
//! `{"format": "pt"}` metadata transformers expects), and whatever files a run adds
//! (`vocab.txt`, `tokenizer_config.json`, optimiser and trainer state).
//!
//! A directory is written whole or not at all: the files go to a fresh sibling directory,
//! are flushed to disk, and only then replace the old directory by renames. A failure (a full
//! disk) leaves the previous checkpoint where it was; a process killed between the renames
//! leaves the previous one set aside whole, and [`recover_dir`] (run before every save and by
//! `--resume`) puts it back and removes what killed saves left.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use crate::config::{PositionEmbeddingType, RoFormerConfig};
use crate::tokenizer::RoFormerTokenizer;
use crate::train::error::TrainError;
use crate::train::params::Params;

/// The bytes of a safetensors file holding `tensors` (f32 on the CPU; names must be unique)
/// with the metadata `{"format": "pt"}`.
///
/// # Errors
/// [`TrainError::Save`] when the tensors cannot be serialised.
pub fn safetensors_bytes(tensors: &[(String, Tensor)]) -> Result<Vec<u8>, TrainError> {
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let contiguous = tensors
        .iter()
        .map(|(n, t)| Ok((n.as_str(), t.contiguous()?)))
        .collect::<Result<Vec<_>, candle_core::Error>>()
        .map_err(|e| TrainError::Save(e.to_string()))?;
    safetensors::tensor::serialize(contiguous.iter().map(|(n, t)| (*n, t)), Some(metadata))
        .map_err(|e| TrainError::Save(e.to_string()))
}

/// `config.json` for `cfg` saved from the class `architecture`, pretty-printed.
///
/// # Errors
/// [`TrainError::Save`] if serialisation fails.
pub fn config_bytes(cfg: &RoFormerConfig, architecture: &str) -> Result<Vec<u8>, TrainError> {
    let mut text = serde_json::to_string_pretty(&cfg.to_raw(architecture))
        .map_err(|e| TrainError::Save(e.to_string()))?;
    text.push('\n');
    Ok(text.into_bytes())
}

/// transformers' `RoFormerSinusoidalPositionalEmbedding` table `[n, d]` (`d` the head dim),
/// which its RoFormer checkpoints store as `roformer.encoder.embed_positions.weight`:
/// `P[m, i] = sin(m w_i)` and `P[m, d/2 + i] = cos(m w_i)` for `i < d/2`,
/// `w_i = 10000^(-2i/d)`; f64 angles rounded once to f32. We never read it back (the rotation
/// is computed), but writing it makes our checkpoints hold exactly the keys transformers'
/// own do.
///
/// # Errors
/// [`TrainError::Save`] for a table of more than
/// [`MAX_POSITION_TABLE_ENTRIES`](crate::config::MAX_POSITION_TABLE_ENTRIES) entries (a config
/// whose position type was changed after it was validated); candle errors.
pub fn rotary_position_table(n: usize, d: usize) -> Result<Tensor, TrainError> {
    let half = d / 2;
    let entries = n
        .checked_mul(d)
        .filter(|&e| e <= crate::config::MAX_POSITION_TABLE_ENTRIES)
        .ok_or_else(|| {
            TrainError::Save(format!(
                "the rotary position table of {n} x {d} entries exceeds the limit of {}",
                crate::config::MAX_POSITION_TABLE_ENTRIES
            ))
        })?;
    let mut data = vec![0f32; entries];
    for m in 0..n {
        for i in 0..half {
            let angle = m as f64 / 10000f64.powf((2 * i) as f64 / d as f64);
            data[m * d + i] = angle.sin() as f32;
            data[m * d + half + i] = angle.cos() as f32;
        }
    }
    Ok(Tensor::from_vec(data, (n, d), &candle_core::Device::Cpu)?)
}

/// The two files every checkpoint holds: `config.json` and `model.safetensors` with the
/// current values of `params` (and, for a RoFormer with rotary positions, transformers'
/// position table, see [`rotary_position_table`]).
///
/// # Errors
/// As [`safetensors_bytes`] and [`config_bytes`].
pub fn model_files(
    cfg: &RoFormerConfig,
    architecture: &str,
    params: &Params,
) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
    let mut tensors = params.tensors();
    if cfg.position_embedding_type == PositionEmbeddingType::Rotary {
        tensors.push((
            format!("{}.encoder.embed_positions.weight", cfg.base_prefix()),
            rotary_position_table(cfg.max_position_embeddings, cfg.head_dim())?,
        ));
    }
    Ok(vec![
        ("config.json".into(), config_bytes(cfg, architecture)?),
        ("model.safetensors".into(), safetensors_bytes(&tensors)?),
    ])
}

/// `vocab.txt` and `tokenizer_config.json` of a checkpoint of `cfg`, so that transformers'
/// `RoFormerTokenizer` (`BertTokenizer` for BERT) and ours load it.
///
/// # Errors
/// [`TrainError::Save`] if serialisation fails.
pub fn tokenizer_files(
    tokenizer: &RoFormerTokenizer,
    cfg: &RoFormerConfig,
) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
    let vocab = tokenizer.vocab();
    let mut text = String::new();
    for id in 0..vocab.len() as u32 {
        text.push_str(vocab.id_to_token(id).unwrap_or("[unused]"));
        text.push('\n');
    }
    let class = if cfg.base_prefix() == "bert" {
        "BertTokenizer"
    } else {
        "RoFormerTokenizer"
    };
    let config = serde_json::json!({
        "tokenizer_class": class,
        "do_lower_case": tokenizer.config().do_lower_case,
        "model_max_length": cfg.max_position_embeddings,
    });
    let config = serde_json::to_vec_pretty(&config).map_err(|e| TrainError::Save(e.to_string()))?;
    Ok(vec![
        ("vocab.txt".into(), text.into_bytes()),
        ("tokenizer_config.json".into(), config),
    ])
}

fn io_error(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A sibling of `dir` named `.{name}.{tag}-{pid}`.
fn sibling(dir: &Path, tag: &str) -> PathBuf {
    dir.with_file_name(format!(".{}.{tag}-{}", dir_name(dir), std::process::id()))
}

/// The last component of `dir` (`checkpoint` when it has none).
fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".into())
}

/// A step of [`write_dir_atomically_with`], reported to its observer right after it is done.
///
/// A process killed after any of them leaves `dir` recoverable: whole (the old or the new
/// version), or set aside whole, which [`recover_dir`] puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveStep {
    /// The first file of the new version is written to `.NAME.partial-PID` (the new version is
    /// incomplete; `dir` is untouched).
    FirstFileWritten,
    /// Every file of the new version is written and synced to `.NAME.partial-PID`.
    Written,
    /// The previous version was renamed to `.NAME.old-PID`: `dir` does not exist until the
    /// next step (only when there was a previous version).
    MovedAside,
    /// The new version was renamed to `dir`; the previous one still lies aside.
    Renamed,
}

impl SaveStep {
    /// Every step, in the order they happen.
    pub const ALL: [SaveStep; 4] = [
        SaveStep::FirstFileWritten,
        SaveStep::Written,
        SaveStep::MovedAside,
        SaveStep::Renamed,
    ];

    /// The step's name: `first-file`, `written`, `moved-aside` or `renamed`.
    pub fn name(self) -> &'static str {
        match self {
            SaveStep::FirstFileWritten => "first-file",
            SaveStep::Written => "written",
            SaveStep::MovedAside => "moved-aside",
            SaveStep::Renamed => "renamed",
        }
    }
}

/// What [`recover_dir`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The set-aside previous version renamed back to the directory (it was missing: a
    /// process was killed between the two renames of a save).
    pub restored: Option<PathBuf>,
    /// Leftovers of killed saves that were removed (`.NAME.partial-PID`, `.NAME.old-PID`).
    pub removed: Vec<PathBuf>,
}

/// The `.NAME.partial-PID` and `.NAME.old-PID` siblings of `dir` (any PID), sorted.
fn leftovers(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), TrainError> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = dir_name(dir);
    let (partial, old) = (format!(".{name}.partial-"), format!(".{name}.old-"));
    let entries = match fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(io_error(parent, e)),
    };
    let (mut partials, mut olds) = (Vec::new(), Vec::new());
    for entry in entries {
        let entry = entry.map_err(|e| io_error(parent, e))?;
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        let pid = |prefix: &str| {
            file_name
                .strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        };
        if pid(&partial) {
            partials.push(entry.path());
        } else if pid(&old) {
            olds.push(entry.path());
        }
    }
    partials.sort();
    olds.sort();
    Ok((partials, olds))
}

/// Removes a file or directory tree (not following a symbolic link).
fn remove_any(path: &Path) -> Result<(), TrainError> {
    let is_dir = fs::symlink_metadata(path)
        .map(|m| m.is_dir())
        .map_err(|e| io_error(path, e))?;
    let removed = if is_dir {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.map_err(|e| io_error(path, e))
}

/// Syncs the directory that holds `dir`, so that renames in it survive a power loss
/// (best effort: not every platform can open a directory).
fn sync_parent(dir: &Path) {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(f) = fs::File::open(parent) {
            let _ = f.sync_all();
        }
    }
}

/// Repairs what a process killed during [`write_dir_atomically`] of `dir` left behind. When
/// `dir` is missing (killed between the two renames), the previous version set aside as
/// `.NAME.old-PID` (by any process; the most recently modified one if there are several) is
/// renamed back to `dir`. Then every other `.NAME.partial-PID` and `.NAME.old-PID` sibling is
/// removed. A new version that was written but not yet renamed is discarded: `dir` then holds
/// the last version whose save was complete.
///
/// The caller must be the only writer of `dir` (the `roformer` command holds a lock on the
/// run's directory): a sibling of another live process would be taken for a leftover.
///
/// # Errors
/// [`TrainError::Io`] naming the path that could not be read, renamed or removed.
pub fn recover_dir(dir: &Path) -> Result<Recovery, TrainError> {
    let (partials, mut olds) = leftovers(dir)?;
    let mut recovery = Recovery::default();
    let missing = match fs::symlink_metadata(dir) {
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(io_error(dir, e)),
    };
    if missing && !olds.is_empty() {
        let modified = |p: &PathBuf| fs::metadata(p).and_then(|m| m.modified()).ok();
        olds.sort_by_key(modified);
        if let Some(newest) = olds.pop() {
            fs::rename(&newest, dir).map_err(|e| io_error(&newest, e))?;
            sync_parent(dir);
            recovery.restored = Some(newest);
        }
    }
    for stale in partials.into_iter().chain(olds) {
        remove_any(&stale)?;
        recovery.removed.push(stale);
    }
    Ok(recovery)
}

/// Writes `files` (name, bytes) as the directory `dir`, replacing what was there only once
/// every file is written and synced. Leftovers of an earlier save that was killed are
/// repaired first ([`recover_dir`]).
///
/// # Errors
/// [`TrainError::Io`] naming the path that failed; `dir` is then as it was.
pub fn write_dir_atomically(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), TrainError> {
    write_dir_atomically_with(dir, files, &mut |_| {})
}

/// [`write_dir_atomically`], calling `after` right after each [`SaveStep`] (a test hook: a
/// process that dies in `after` shows what a kill at that point leaves).
///
/// The new version goes to `.NAME.partial-PID`; the old one, if any, is renamed to
/// `.NAME.old-PID`, the new one to `dir`, and the old one is removed. A process killed at any
/// point leaves either `dir` whole or, between the two renames, the old version whole beside
/// it, which [`recover_dir`] (called here and by `--resume`) renames back.
///
/// # Errors
/// As [`write_dir_atomically`].
pub fn write_dir_atomically_with(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    after: &mut dyn FnMut(SaveStep),
) -> Result<(), TrainError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    recover_dir(dir)?;
    let partial = sibling(dir, "partial");
    let written = (|| {
        fs::create_dir(&partial).map_err(|e| io_error(&partial, e))?;
        for (i, (name, bytes)) in files.iter().enumerate() {
            let path = partial.join(name);
            let mut f = fs::File::create(&path).map_err(|e| io_error(&path, e))?;
            f.write_all(bytes).map_err(|e| io_error(&path, e))?;
            f.sync_all().map_err(|e| io_error(&path, e))?;
            if i == 0 {
                after(SaveStep::FirstFileWritten);
            }
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    after(SaveStep::Written);
    let old = sibling(dir, "old");
    let had_old = dir.exists();
    if had_old {
        fs::rename(dir, &old).map_err(|e| io_error(dir, e))?;
        after(SaveStep::MovedAside);
    }
    if let Err(e) = fs::rename(&partial, dir) {
        if had_old {
            let _ = fs::rename(&old, dir);
        }
        return Err(io_error(dir, e));
    }
    sync_parent(dir);
    after(SaveStep::Renamed);
    if had_old {
        fs::remove_dir_all(&old).map_err(|e| io_error(&old, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::Scratch;

    fn read_dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn a_failed_write_leaves_the_previous_checkpoint_whole() {
        let root = Scratch::new("roformer-checkpoint", "atomic");
        let dir = root.join("checkpoint");
        let good = vec![
            ("a.json".to_string(), b"first".to_vec()),
            ("b.bin".to_string(), vec![1u8; 1000]),
        ];
        write_dir_atomically(&dir, &good).unwrap();
        assert_eq!(read_dir_files(&dir), good);
        // The second file cannot be created (its name is a path into a missing directory):
        // the write fails after the first file, as a full disk would.
        let bad = vec![
            ("a.json".to_string(), b"second".to_vec()),
            ("missing/b.bin".to_string(), vec![2u8; 10]),
        ];
        assert!(matches!(
            write_dir_atomically(&dir, &bad),
            Err(TrainError::Io { .. })
        ));
        assert_eq!(read_dir_files(&dir), good, "the old checkpoint is intact");
        let leftovers: Vec<_> = fs::read_dir(&root).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no partial directory is left behind");
        // A good write replaces it whole.
        let newer = vec![("c.txt".to_string(), b"new".to_vec())];
        write_dir_atomically(&dir, &newer).unwrap();
        assert_eq!(read_dir_files(&dir), newer);
    }

    /// A save that dies right after any of its steps (here a panic in the observer) leaves a
    /// directory that `recover_dir` makes whole again: the old version, or the new one once it
    /// is renamed, and no leftovers.
    #[test]
    fn a_save_killed_after_any_step_is_recovered() {
        for step in SaveStep::ALL {
            let root = Scratch::new("roformer-checkpoint", &format!("recover-{}", step.name()));
            let dir = root.join("checkpoint");
            let first = vec![("a.json".to_string(), b"first".to_vec())];
            let second = vec![
                ("a.json".to_string(), b"second".to_vec()),
                ("b.bin".to_string(), vec![7u8; 100]),
            ];
            write_dir_atomically(&dir, &first).unwrap();
            let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_dir_atomically_with(&dir, &second, &mut |s| {
                    if s == step {
                        panic!("killed after {}", s.name());
                    }
                })
            }));
            assert!(died.is_err(), "{step:?}");
            assert_eq!(dir.exists(), step != SaveStep::MovedAside, "{step:?}");
            let recovery = recover_dir(&dir).unwrap();
            assert_eq!(
                recovery.restored.is_some(),
                step == SaveStep::MovedAside,
                "{step:?}"
            );
            let expected = if step == SaveStep::Renamed {
                &second
            } else {
                &first
            };
            assert_eq!(&read_dir_files(&dir), expected, "{step:?}");
            let names: Vec<_> = fs::read_dir(&root)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["checkpoint"], "{step:?}: no leftovers");
            // The next save goes through.
            write_dir_atomically(&dir, &second).unwrap();
            assert_eq!(read_dir_files(&dir), second);
        }
    }

    #[test]
    fn position_tables_past_the_limit_are_errors_not_aborts() {
        assert!(matches!(
            rotary_position_table(usize::MAX / 2, 64),
            Err(TrainError::Save(_))
        ));
        assert!(matches!(
            rotary_position_table(1 << 30, 64),
            Err(TrainError::Save(_))
        ));
        let table = rotary_position_table(3, 4).unwrap();
        assert_eq!(table.dims(), &[3, 4]);
    }
}
