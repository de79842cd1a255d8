//! Writing output: every command that writes a file goes through [`write()`], and every line it
//! prints on standard output through `outln!` (which fails where `println!` would panic).
//!
//! What happens depends on what the path names:
//! - `-`: standard output;
//! - a regular file, or nothing yet: replaced atomically. The bytes go to a temporary file in
//!   the same directory, which is renamed over the path once complete, so a failed write
//!   leaves the old file (or nothing), never half a file;
//! - a FIFO, a character or block device (anything else that exists and is not a directory):
//!   opened and written in place, as a stream (`/dev/null`, `/dev/stdout`, a named pipe);
//! - a symbolic link: followed to its final target, which is written by the rules above; the
//!   link stays a link;
//! - a directory: an error.
//!
//! New files get mode `0o666` less the umask, as files the shell creates do (no explicit mode
//! is ever asked for).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// `--json`: the flag's one declaration, flattened into every command that prints (a command
/// says what its JSON holds with `#[command(mut_arg("json", ..))]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
pub struct OutputArgs {
    /// JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How many symbolic links are followed before giving up (Linux's limit).
const MAX_LINKS: usize = 40;

/// Whether `path` names standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Writes `bytes` to `path` by the rules of this module.
///
/// # Errors
/// A directory, a symbolic link loop, or any I/O error (the message names `path`).
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_to(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

fn write_to(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if is_stdout(path) {
        let mut out = io::stdout().lock();
        out.write_all(bytes)?;
        return Ok(out.flush()?);
    }
    let target = follow_links(path)?;
    match std::fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => bail!("it is a directory"),
        Ok(meta) if !meta.is_file() => {
            let mut stream = OpenOptions::new().write(true).open(&target)?;
            stream.write_all(bytes)?;
            Ok(stream.flush()?)
        }
        Ok(_) => replace(&target, bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => replace(&target, bytes),
        Err(e) => Err(e.into()),
    }
}

/// The path that `path` names once every symbolic link on its last component is followed (a
/// dangling link gives the path it points to, to be created).
fn follow_links(path: &Path) -> anyhow::Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&path)?;
                // A relative target is relative to the link's directory; `join` keeps an
                // absolute one as it is.
                path = match path.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            _ => return Ok(path),
        }
    }
    bail!("more than {MAX_LINKS} levels of symbolic links")
}

/// Writes `bytes` to a new temporary file beside `path` and renames it over `path`; the
/// temporary file is removed if anything fails.
fn replace(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let (temp_path, mut file) = temp_file(path)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp_path, path));
    if let Err(e) = written {
        drop(file);
        let _ = std::fs::remove_file(&temp_path);
        return Err(e.into());
    }
    Ok(())
}

/// A new file `.NAME.PID-N.tmp` in the directory of `path`, created with the default mode
/// (`0o666` less the umask).
fn temp_file(path: &Path) -> anyhow::Result<(PathBuf, File)> {
    let Some(name) = path.file_name() else {
        bail!("the path names no file");
    };
    let dir = path.parent().unwrap_or(Path::new(""));
    for n in 0..100 {
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}-{n}.tmp", std::process::id()));
        let temp_path = dir.join(temp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => return Ok((temp_path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no free temporary file name beside it")
}

/// `println!` that returns the write's `std::io::Result<()>` instead of panicking when it
/// fails: a reader that has gone (`roformer ... | head -1`) is an error `main` ends quietly
/// on, not a panic.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub use crate::outln;

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::Scratch;

    fn scratch(name: &str) -> Scratch {
        Scratch::new("roformer-cli-output", name)
    }

    #[test]
    fn new_and_regular_files_are_replaced_without_leftovers() {
        let dir = scratch("replace");
        let path = dir.join("out.txt");
        write(&path, b"one").unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left: {names:?}");
    }

    #[test]
    fn links_are_followed_relative_to_their_directory() {
        let dir = scratch("links");
        std::os::unix::fs::symlink("target.txt", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("link", dir.join("link2")).unwrap();
        write(&dir.join("link2"), b"x").unwrap();
        assert_eq!(std::fs::read(dir.join("target.txt")).unwrap(), b"x");
        assert!(std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        let err = write(&dir.join("loop"), b"x").unwrap_err();
        assert!(format!("{err:#}").contains("symbolic links"), "{err:#}");
    }

    #[test]
    fn directories_and_missing_parents_are_errors() {
        let dir = scratch("errors");
        let err = write(&dir, b"x").unwrap_err();
        assert!(format!("{err:#}").contains("directory"), "{err:#}");
        assert!(write(&dir.join("no/such/file"), b"x").is_err());
    }
}
