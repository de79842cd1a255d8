//! Refusing an output that would replace one of the command's own inputs (`forward --input
//! x.json --output x.json`, `vocab build --corpus c.txt --out c.txt`).
//!
//! Two paths name the same file when they resolve to the same device and inode (symbolic and
//! hard links included; elsewhere than on Unix, when their canonical paths are equal). Only an
//! output that already exists can be an input: a path that does not exist yet replaces
//! nothing.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::output;

/// What a command reads, with the flag that names it.
#[derive(Debug, Clone)]
pub enum InputPath {
    /// A file (or whatever the path names).
    File(&'static str, PathBuf),
    /// A directory whose files are all read (a corpus directory): no output may be a file
    /// under it.
    Tree(&'static str, PathBuf),
}

/// The files of a checkpoint directory that the loaders read: `config.json`, the weights and
/// the tokenizer files (those that exist).
pub fn checkpoint_files(flag: &'static str, dir: &Path) -> Vec<InputPath> {
    [
        "config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "vocab.txt",
        "tokenizer_config.json",
    ]
    .iter()
    .map(|name| dir.join(name))
    .filter(|p| p.exists())
    .map(|p| InputPath::File(flag, p))
    .collect()
}

/// The identity of the file `path` names, symbolic links followed (`None` when it does not
/// exist or cannot be examined).
#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The identity of the file `path` names: its canonical path where there are no inodes.
#[cfg(not(unix))]
fn identity(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// Whether the existing file `output` is `input` itself or, for an [`InputPath::Tree`] that is a
/// directory, lies under it.
fn is_input(output: &Path, input: &InputPath) -> bool {
    let (InputPath::File(_, path) | InputPath::Tree(_, path)) = input;
    if identity(output).is_some_and(|o| identity(path) == Some(o)) {
        return true;
    }
    match (
        input,
        std::fs::canonicalize(output),
        std::fs::canonicalize(path),
    ) {
        (InputPath::Tree(..), Ok(o), Ok(d)) => o.starts_with(d),
        _ => false,
    }
}

/// Refuses to write `output` (named by flag `out_flag`) when it is one of `inputs`: the same
/// file, or a file under an input directory. Standard output (`-`) and a path that does not
/// exist yet are never inputs.
///
/// # Errors
/// "--output X is the same file as --input Y: writing it would replace the input; choose
/// another output path".
pub fn refuse_output_among_inputs(
    out_flag: &str,
    output: &Path,
    inputs: &[InputPath],
) -> anyhow::Result<()> {
    if output::is_stdout(output) || identity(output).is_none() {
        return Ok(());
    }
    for input in inputs {
        if !is_input(output, input) {
            continue;
        }
        let (InputPath::File(flag, path) | InputPath::Tree(flag, path)) = input;
        let how = if identity(output) == identity(path) {
            "is the same file as"
        } else {
            "lies inside"
        };
        bail!(
            "{out_flag} {} {how} {flag} {}: writing it would replace an input of this command; \
             choose another {out_flag} path",
            output.display(),
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::Scratch;

    fn scratch(name: &str) -> Scratch {
        Scratch::new("roformer-inputs", name)
    }

    #[test]
    fn the_same_file_by_any_name_is_refused() {
        let dir = scratch("same");
        let a = dir.join("a.json");
        std::fs::write(&a, "{}").unwrap();
        let input = [InputPath::File("--input", a.clone())];
        let err = refuse_output_among_inputs("--output", &a, &input).unwrap_err();
        assert!(
            err.to_string().contains("is the same file as --input"),
            "{err}"
        );
        // Another spelling, a symbolic link and a hard link are the same file.
        let dotted = dir.join(".").join("a.json");
        assert!(refuse_output_among_inputs("--output", &dotted, &input).is_err());
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(refuse_output_among_inputs("--output", &link, &input).is_err());
        let hard = dir.join("hard.json");
        std::fs::hard_link(&a, &hard).unwrap();
        assert!(refuse_output_among_inputs("--output", &hard, &input).is_err());
        // A different file, a new path and standard output are fine.
        let b = dir.join("b.json");
        std::fs::write(&b, "{}").unwrap();
        assert!(refuse_output_among_inputs("--output", &b, &input).is_ok());
        let new = dir.join("new.json");
        assert!(refuse_output_among_inputs("--output", &new, &input).is_ok());
        assert!(refuse_output_among_inputs("--output", Path::new("-"), &input).is_ok());
    }

    #[test]
    fn a_file_under_an_input_directory_is_refused() {
        let dir = scratch("tree");
        let corpus = dir.join("corpus");
        std::fs::create_dir_all(corpus.join("sub")).unwrap();
        let inside = corpus.join("sub/vocab.txt");
        std::fs::write(&inside, "x").unwrap();
        let outside = dir.join("vocab.txt");
        std::fs::write(&outside, "x").unwrap();
        let input = [InputPath::Tree("--corpus", corpus.clone())];
        let err = refuse_output_among_inputs("--out", &inside, &input).unwrap_err();
        assert!(err.to_string().contains("lies inside --corpus"), "{err}");
        assert!(refuse_output_among_inputs("--out", &outside, &input).is_ok());
        // A corpus given as a file is that file.
        let file = [InputPath::Tree("--corpus", outside.clone())];
        assert!(refuse_output_among_inputs("--out", &outside, &file).is_err());
        assert!(refuse_output_among_inputs("--out", &inside, &file).is_ok());
    }
}
