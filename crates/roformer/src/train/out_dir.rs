//! A run's output directory, as `train mlm`, `train classify` and the experiments share it:
//! its lock, what `--overwrite` may replace, and the repair of a killed save on `--resume`.
//! (The flags named in the errors are the `roformer` command's.)

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use super::checkpoint::recover_dir;
use super::run::checkpoint_dir;
use super::TrainError;

/// Why an output directory cannot take a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutDirError {
    /// Another process holds the directory's lock.
    #[error(
        "{} is in use by {holder} (it holds the lock {}); wait for that run to end or stop it \
         first",
        out.display(),
        lock.display()
    )]
    InUse {
        /// The directory.
        out: PathBuf,
        /// "process N", or "another process" when the lock file names none.
        holder: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock file's place holds something else than a regular file.
    #[error("{}: not a regular file; it cannot be the run's lock (remove it)", .0.display())]
    LockNotAFile(PathBuf),
    /// The lock could not be taken (a file system without locks among the causes).
    #[error("cannot lock {} (does the file system support file locks?)", .path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A resume of a directory without a checkpoint.
    #[error("{}: no checkpoint to resume (expected {})", out.display(), expected.display())]
    NoCheckpoint {
        /// The directory.
        out: PathBuf,
        /// The file a checkpoint holds.
        expected: PathBuf,
    },
    /// `--out` names something that is not a directory.
    #[error("{}: exists and is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A directory that holds something, without `--overwrite`.
    #[error(
        "{}: the directory is not empty (it may hold another run); pass --overwrite to \
         replace it, or --resume to continue it",
        .0.display()
    )]
    NotEmpty(PathBuf),
    /// An input of the command lies inside the directory `--overwrite` would replace.
    #[error(
        "{flag} {} lies inside --out {}, which --overwrite would delete; move it out or \
         choose another --out",
        path.display(),
        out.display()
    )]
    InputInside {
        /// The input's flag.
        flag: String,
        /// The input.
        path: PathBuf,
        /// The directory.
        out: PathBuf,
    },
    /// `--overwrite` of a directory holding something a run does not write.
    #[error(
        "{}: not replaced: it holds {name}, which is not part of a training run \
         (--overwrite only replaces a run's directory: checkpoint/, best/, \
         trajectory/, metrics.jsonl, run.json, the loss plot); remove it yourself or choose \
         another --out",
        out.display()
    )]
    Foreign {
        /// The directory.
        out: PathBuf,
        /// The entry, with a `/` after a directory's name.
        name: String,
    },
    /// `--overwrite` of a directory that holds no run.
    #[error(
        "{}: not replaced: it holds no training run (neither run.json nor \
         checkpoint/trainer_state.json); remove it yourself or choose another --out",
        .0.display()
    )]
    NoRun(PathBuf),
    /// A checkpoint that a killed save left could not be repaired.
    #[error("repairing {}", dir.display())]
    Repair {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The cause.
        source: Box<TrainError>,
    },
    /// A file operation failed.
    #[error("{what} {}", path.display())]
    Io {
        /// What was done: "creating", "reading", "removing", "cannot open the lock file", ...
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// An [`OutDirError::Io`] for `path`.
fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OutDirError + 'a {
    move |source| OutDirError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Where a run's weights come from, and the lock that makes it the only writer of `--out`.
#[derive(Debug)]
pub struct RunPaths {
    /// The checkpoint the model starts from (`--init`, or the run's own on `--resume`).
    pub weights: Option<PathBuf>,
    /// The lock on `--out`, held until the run ends.
    pub lock: OutLock,
    /// On `--resume`: each checkpoint directory that was missing (a save was killed between
    /// its renames) with the set-aside previous version it was restored from.
    pub restored: Vec<(PathBuf, PathBuf)>,
}

/// The name of the lock file in a run's directory.
const LOCK_FILE: &str = ".lock";

/// An exclusive lock on a run's output directory: `OUT/.lock`, locked with the operating
/// system's file lock and holding the holder's process id, for as long as the value lives.
/// The kernel releases it when the process ends, however it ends (even by SIGKILL); the file
/// stays (deleting a lock file would let two processes lock two different files).
#[derive(Debug)]
pub struct OutLock {
    _file: File,
}

impl OutLock {
    /// Takes the lock of the directory `out`, creating its `.lock`.
    ///
    /// # Errors
    /// "DIR is in use by process N" while another process holds it; a `.lock` that is not a
    /// regular file; file errors (a file system without locks among them).
    pub fn acquire(out: &Path) -> Result<Self, OutDirError> {
        let path = out.join(LOCK_FILE);
        // Opening follows a symbolic link, and the file is then truncated: only a regular file.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Err(OutDirError::LockNotAFile(path));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("cannot open the lock file", &path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(in_use(out, &path)),
            Err(TryLockError::Error(source)) => return Err(OutDirError::Lock { path, source }),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(io("cannot write", &path))?;
        Ok(Self { _file: file })
    }
}

/// The error for a directory whose lock another process holds, naming it by the id in the
/// lock file.
fn in_use(out: &Path, lock: &Path) -> OutDirError {
    let pid = std::fs::read_to_string(lock)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    let holder = match pid {
        Some(pid) => format!("process {pid}"),
        None => "another process".into(),
    };
    OutDirError::InUse {
        out: out.to_path_buf(),
        holder,
        lock: lock.to_path_buf(),
    }
}

/// Fails when another process holds the lock of `out`; takes nothing (and creates nothing).
///
/// # Errors
/// "DIR is in use by process N".
pub fn check_not_in_use(out: &Path) -> Result<(), OutDirError> {
    let path = out.join(LOCK_FILE);
    let Ok(file) = File::open(&path) else {
        return Ok(());
    };
    match file.try_lock_shared() {
        Err(TryLockError::WouldBlock) => Err(in_use(out, &path)),
        _ => Ok(()),
    }
}

/// Whether `out` holds anything besides a lock file (anything `--overwrite` would destroy).
fn holds_something(out: &Path) -> bool {
    std::fs::read_dir(out).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name() != std::ffi::OsStr::new(LOCK_FILE))
    })
}

/// What a run asks of its output directory.
#[derive(Debug)]
pub struct OutRequest<'a> {
    /// `--out`.
    pub out: &'a Path,
    /// `--resume`: continue the run in `out`.
    pub resume: bool,
    /// `--overwrite`: replace the run in `out`.
    pub overwrite: bool,
    /// `--init`: the checkpoint a fresh run starts from.
    pub init: Option<&'a Path>,
    /// Every input of the command with its flag (`--init` included): none may lie inside a
    /// directory that `--overwrite` replaces.
    pub inputs: Vec<(&'static str, &'a Path)>,
    /// `--plot`: the loss plot's file name, one of the files of a run.
    pub plot: &'a Path,
}

/// Checks, locks and prepares the output directory: a new or empty one, or a run's directory
/// replaced with `--overwrite`; with `--resume`, one that holds a checkpoint to continue (a
/// checkpoint that a kill left set aside is put back first, and named in
/// [`RunPaths::restored`]). The directory stays locked while the returned value lives.
///
/// # Errors
/// A directory in use by another process, one that holds another run without `--overwrite`,
/// `--overwrite` of a directory that is not a run's or that holds an input, a resume without
/// checkpoint, or file errors.
pub fn prepare_out_dir(request: &OutRequest<'_>) -> Result<RunPaths, OutDirError> {
    let out = request.out;
    if request.resume {
        let lock = OutLock::acquire(out)?;
        let mut restored = Vec::new();
        for dir in [checkpoint_dir(out), out.join("best")] {
            let recovery = recover_dir(&dir).map_err(|e| OutDirError::Repair {
                dir: dir.clone(),
                source: Box::new(e),
            })?;
            restored.extend(recovery.restored.map(|aside| (dir, aside)));
        }
        let checkpoint = checkpoint_dir(out);
        if !checkpoint.join("trainer_state.json").is_file() {
            return Err(OutDirError::NoCheckpoint {
                out: out.to_path_buf(),
                expected: checkpoint.join("trainer_state.json"),
            });
        }
        return Ok(RunPaths {
            weights: Some(checkpoint),
            lock,
            restored,
        });
    }
    if out.exists() && !out.is_dir() {
        return Err(OutDirError::NotADirectory(out.to_path_buf()));
    }
    let lock = if holds_something(out) {
        check_not_in_use(out)?;
        if !request.overwrite {
            return Err(OutDirError::NotEmpty(out.to_path_buf()));
        }
        check_inputs_outside(out, &request.inputs)?;
        check_is_a_run(out, request.plot)?;
        let lock = OutLock::acquire(out)?;
        // Again under the lock: nothing may have come in between.
        check_is_a_run(out, request.plot)?;
        clear_run(out)?;
        lock
    } else {
        std::fs::create_dir_all(out).map_err(io("creating", out))?;
        OutLock::acquire(out)?
    };
    Ok(RunPaths {
        weights: request.init.map(Path::to_path_buf),
        lock,
        restored: Vec::new(),
    })
}

/// Whether `path` (or, for a symbolic link, the link itself) lies in the directory whose
/// canonical path is `dir`.
fn lies_inside(path: &Path, dir: &Path) -> bool {
    let real = std::fs::canonicalize(path).ok();
    let link = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            std::fs::canonicalize(parent).ok().map(|p| p.join(name))
        }
        _ => None,
    };
    real.iter().chain(link.iter()).any(|p| p.starts_with(dir))
}

/// Refuses to replace `out` when one of the command's inputs lies inside it.
fn check_inputs_outside(out: &Path, inputs: &[(&str, &Path)]) -> Result<(), OutDirError> {
    let dir = std::fs::canonicalize(out).map_err(io("resolving", out))?;
    for (flag, path) in inputs {
        if lies_inside(path, &dir) {
            return Err(OutDirError::InputInside {
                flag: (*flag).to_string(),
                path: path.to_path_buf(),
                out: out.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// The names of the loss plots a run in `out` may have written: this command's `--plot` and
/// the one `run.json` recorded (plain file names only).
fn plot_names(out: &Path, plot: &Path) -> Vec<OsString> {
    let recorded = std::fs::read_to_string(out.join("run.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["plot"].as_str().map(PathBuf::from));
    [Some(plot.to_path_buf()), recorded]
        .into_iter()
        .flatten()
        .filter_map(|p| match p.components().collect::<Vec<_>>()[..] {
            [Component::Normal(name)] => Some(name.to_os_string()),
            _ => None,
        })
        .collect()
}

/// The directory in `--out` where `train mlm --dump-steps` writes its dump.
pub const DUMP_DIR: &str = "trajectory";

/// Whether `name` (a directory when `is_dir`) is something a run writes into its directory:
/// `checkpoint/`, `best/`, `trajectory/` (a dump), `metrics.jsonl`, `run.json`, a loss plot,
/// `.lock`, `done.json` and `elapsed.json`
/// (written by `experiment`), and what a killed run leaves (`.checkpoint.partial-PID/` and `.old-PID/`, likewise for `best`, and
/// `.FILE.PID-N.tmp` of a file being replaced).
fn written_by_a_run(name: &str, is_dir: bool, plots: &[OsString]) -> bool {
    let pid_suffix = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    if is_dir {
        return matches!(name, "checkpoint" | "best" | DUMP_DIR)
            || ["checkpoint", "best"].iter().any(|d| {
                ["partial", "old"].iter().any(|tag| {
                    name.strip_prefix(&format!(".{d}.{tag}-"))
                        .is_some_and(pid_suffix)
                })
            });
    }
    // `done.json` and `elapsed.json`: the experiment commands' records of a finished run and
    // of the time an interrupted one took so far.
    let files: Vec<&str> = ["metrics.jsonl", "run.json", "done.json", "elapsed.json"]
        .into_iter()
        .chain(plots.iter().filter_map(|p| p.to_str()))
        .collect();
    if name == LOCK_FILE || files.contains(&name) {
        return true;
    }
    // `.FILE.PID-N.tmp` (the temporary files of the CLI's atomic writes).
    files.iter().any(|file| {
        name.strip_prefix(&format!(".{file}."))
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|rest| rest.split_once('-'))
            .is_some_and(|(pid, n)| pid_suffix(pid) && pid_suffix(n))
    })
}

/// Refuses to replace `out` unless it is recognisably a run's directory: it holds `run.json`
/// or `checkpoint/trainer_state.json`, and nothing a run does not write.
fn check_is_a_run(out: &Path, plot: &Path) -> Result<(), OutDirError> {
    let plots = plot_names(out, plot);
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(out).map_err(io("reading", out))? {
        let entry = entry.map_err(io("reading", out))?;
        // The entry itself, not what a symbolic link points to.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        entries.push((entry.file_name(), is_dir));
    }
    entries.sort();
    for (name, is_dir) in &entries {
        let text = name.to_string_lossy();
        if !name
            .to_str()
            .is_some_and(|n| written_by_a_run(n, *is_dir, &plots))
        {
            return Err(OutDirError::Foreign {
                out: out.to_path_buf(),
                name: format!("{text}{}", if *is_dir { "/" } else { "" }),
            });
        }
    }
    if !out.join("run.json").is_file() && !out.join("checkpoint/trainer_state.json").is_file() {
        return Err(OutDirError::NoRun(out.to_path_buf()));
    }
    Ok(())
}

/// Removes everything in `out` but its lock file.
fn clear_run(out: &Path) -> Result<(), OutDirError> {
    for entry in std::fs::read_dir(out).map_err(io("reading", out))? {
        let entry = entry.map_err(io("reading", out))?;
        if entry.file_name() == std::ffi::OsStr::new(LOCK_FILE) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(io("removing", &path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_support::Scratch;

    /// A fresh scratch directory for test `name`.
    fn scratch(name: &str) -> Scratch {
        Scratch::new("roformer-out-dir", name)
    }

    fn request<'a>(out: &'a Path, resume: bool, overwrite: bool) -> OutRequest<'a> {
        OutRequest {
            out,
            resume,
            overwrite,
            init: None,
            inputs: Vec::new(),
            plot: Path::new("loss.png"),
        }
    }

    #[test]
    fn a_directory_is_refused_by_kind_and_replaced_only_when_it_holds_a_run() {
        let root = scratch("kinds");
        let out = root.join("run");
        let paths = prepare_out_dir(&request(&out, false, false)).unwrap();
        assert!(paths.restored.is_empty() && out.join(LOCK_FILE).is_file());
        // The lock is held: a second writer is refused, naming this process.
        match prepare_out_dir(&request(&out, true, false)) {
            Err(OutDirError::InUse { holder, .. }) => {
                assert_eq!(holder, format!("process {}", std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        drop(paths);
        assert!(matches!(
            prepare_out_dir(&request(&out, true, false)),
            Err(OutDirError::NoCheckpoint { .. })
        ));
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        assert!(matches!(
            prepare_out_dir(&request(&out, false, false)),
            Err(OutDirError::NotEmpty(_))
        ));
        let err = prepare_out_dir(&request(&out, false, true)).unwrap_err();
        assert!(matches!(&err, OutDirError::Foreign { name, .. } if name == "notes.txt"));
        assert!(
            err.to_string().contains("not part of a training run"),
            "{err}"
        );
        std::fs::remove_file(out.join("notes.txt")).unwrap();
        std::fs::write(out.join("metrics.jsonl"), "").unwrap();
        assert!(matches!(
            prepare_out_dir(&request(&out, false, true)),
            Err(OutDirError::NoRun(_))
        ));
        std::fs::write(out.join("run.json"), "{}").unwrap();
        let paths = prepare_out_dir(&request(&out, false, true)).unwrap();
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the lock stays");
        drop(paths);
    }
}
