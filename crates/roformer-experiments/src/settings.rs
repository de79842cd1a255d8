//! Each experiment's numbers (its arms, rates, seeds, steps and sizes) live in a settings file,
//! `experiments/NAME/settings.json` beside the experiment's default output, so that a reader
//! changes a number without reading Rust. The flags of the same names override a setting for
//! one command, and the section an experiment writes cites the file it read. The same files
//! are compiled in: an experiment run from a directory without its file (another working
//! directory, an installed binary) uses its build's copy, and says so in its section.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::de::DeserializeOwned;

/// `--settings`, the flag of every experiment.
#[derive(Debug, Clone, clap::Args)]
pub struct SettingsFlag {
    /// The settings [default: the experiment's `settings.json` in `experiments/` (its default
    /// output directory), else the copy built in]; the flags below override them.
    #[arg(long = "settings")]
    pub path: Option<PathBuf>,
}

/// An experiment's settings file: where it is looked for, and the copy compiled in.
pub struct SettingsFile {
    /// `experiments/NAME/settings.json`, relative to the working directory.
    pub path: &'static str,
    /// The file's text at build time.
    pub built_in: &'static str,
}

/// Settings read from a file, and how a report cites them.
pub struct Read<T> {
    /// The settings.
    pub settings: T,
    /// "`experiments/convergence/settings.json`", or, read from the copy compiled in,
    /// "`experiments/convergence/settings.json` (the copy built in)".
    pub cited: String,
}

impl SettingsFile {
    /// Reads `given`'s file, or else this file, or else its copy compiled in.
    ///
    /// # Errors
    /// An unreadable file, or one that is not the experiment's settings (a field missing,
    /// unknown or of the wrong type).
    pub fn read<T: DeserializeOwned>(&self, given: &SettingsFlag) -> anyhow::Result<Read<T>> {
        let default = PathBuf::from(self.path);
        let (text, cited) = match given.path.as_deref() {
            Some(path) => (read_text(path)?, format!("`{}`", path.display())),
            None if default.is_file() => (read_text(&default)?, format!("`{}`", self.path)),
            None => (
                self.built_in.to_string(),
                format!("`{}` (the copy built in)", self.path),
            ),
        };
        let settings = serde_json::from_str(&text)
            .with_context(|| format!("{cited}: not this experiment's settings"))?;
        Ok(Read { settings, cited })
    }
}

/// The text of the settings file `path`.
fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Replaces `setting` with the flag's value `given`, if any.
pub fn set<T>(setting: &mut T, given: Option<T>) {
    if let Some(value) = given {
        *setting = value;
    }
}

#[cfg(test)]
mod tests {
    use test_support::Scratch;

    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Numbers {
        steps: u64,
    }

    const FILE: SettingsFile = SettingsFile {
        path: "experiments/no-such-experiment/settings.json",
        built_in: r#"{ "steps": 500 }"#,
    };

    #[test]
    fn a_missing_file_is_read_from_the_copy_built_in_and_cited_so() {
        let read: Read<Numbers> = FILE.read(&SettingsFlag { path: None }).unwrap();
        assert_eq!(read.settings, Numbers { steps: 500 });
        assert_eq!(
            read.cited,
            "`experiments/no-such-experiment/settings.json` (the copy built in)"
        );
    }

    #[test]
    fn a_given_file_is_read_and_an_unknown_setting_is_refused() {
        let dir = Scratch::new("roformer-experiments-settings", "given");
        let path = dir.write("settings.json", r#"{ "steps": 6 }"#);
        let given = SettingsFlag {
            path: Some(path.clone()),
        };
        let read: Read<Numbers> = FILE.read(&given).unwrap();
        assert_eq!(read.settings, Numbers { steps: 6 });
        assert_eq!(read.cited, format!("`{}`", path.display()));
        std::fs::write(&path, r#"{ "steps": 6, "stpes": 7 }"#).unwrap();
        let err = FILE.read::<Numbers>(&given).err().unwrap();
        assert!(format!("{err:#}").contains("stpes"), "{err:#}");
    }

    #[test]
    fn a_flag_given_replaces_its_setting() {
        let mut steps = 500;
        set(&mut steps, None);
        assert_eq!(steps, 500);
        set(&mut steps, Some(6));
        assert_eq!(steps, 6);
    }
}
