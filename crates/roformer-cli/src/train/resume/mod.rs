//! `--resume`: the settings a run records in `run.json` ([`Settings`]) and those a resume runs
//! with (the run's record is written by [`roformer_runner::train::record`]).
//!
//! A command's flags, laid over a base, give the settings it asks for
//! ([`Flags::settings_over`]): over the library's defaults for a new run, over the recorded
//! settings for a resume. A resume then takes from what it asked only what the library's
//! [`Resumable::MAY_CHANGE`] lists (`--steps`, `--precision`, `--save-every`, `--eval-every`)
//! and refuses any other difference, naming the flag, the run's value and the given one; a
//! flag that repeats the run's value is no difference. `--out`, `--stop-after`, `--json` and
//! `--quiet` are each invocation's own and never recorded as settings.
//!
//! `run.json` before this version held the command's flags flat, by their names; such a file
//! is read as the flags it holds, laid over the defaults as a new run would.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use roformer::train::out_dir::check_not_in_use;
use roformer::train::{resumed, Resumable, ResumeConflict, TrainOptions};
use roformer_runner::train::fingerprint::Fingerprint;
use roformer_runner::train::record::{read_record, Recorded, RunRecord};

/// The version of `run.json` that holds [`Settings`] (the flat files before it have none).
pub const VERSION: u32 = 2;

/// What a training run records in `run.json`: its model (`M`: the flags that choose it), its
/// data (`D`: the library's data options), its optimisation settings, and the loss plot's
/// name; with the directory it ran in, for the reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings<M, D> {
    /// [`VERSION`].
    pub version: u32,
    /// The run's directory when it was recorded (a copied run records its new place when it
    /// resumes; never compared).
    pub out: PathBuf,
    /// What the model starts from.
    pub model: M,
    /// The task's data.
    pub data: D,
    /// The optimisation settings, as asked (the precision before a CPU without bf16 falls
    /// back to f32).
    pub train: TrainOptions,
    /// The loss plot's file name in the run's directory.
    pub plot: PathBuf,
}

/// A training command's flags, as [`resolve`] needs them.
pub trait Flags: DeserializeOwned {
    /// The flags that choose the model.
    type Model: Resumable + Clone;
    /// The library's data options.
    type Data: Resumable + Clone;

    /// The settings of a new run with no flag given (the library's defaults).
    fn defaults(&self) -> Settings<Self::Model, Self::Data>;

    /// `base` with every flag given laid over it.
    fn settings_over(
        &self,
        base: &Settings<Self::Model, Self::Data>,
    ) -> Settings<Self::Model, Self::Data>;

    /// A recorded value of one of the command's enum flags as the flag takes it (`alibi`, not
    /// the Rust name `Alibi`), for the fields whose serialised form is not the flag's value;
    /// `None` for any other field (the library's `decay` and `precision` serialise as their
    /// flags' values already).
    fn flag_value(_field: &str, _value: &serde_json::Value) -> Option<String> {
        None
    }
}

/// [`Flags::flag_value`] of a command.
pub type FlagValue = fn(&str, &serde_json::Value) -> Option<String>;

/// The settings of the runs of the command whose flags are `F`.
pub type SettingsOf<F> = Settings<<F as Flags>::Model, <F as Flags>::Data>;

/// The settings this invocation runs with: `args` over the defaults for a new run; for
/// `--resume`, the run's recorded settings merged with `args` (see the module doc), and what
/// else the record holds.
///
/// # Errors
/// A directory in use by another run, a missing or malformed `run.json`, and a flag that a
/// resume may not change given with another value than the run's.
pub fn resolve<F: Flags>(
    args: &F,
    out: &Path,
    resume: bool,
) -> anyhow::Result<(SettingsOf<F>, Option<Recorded>)> {
    if !resume {
        let mut settings = args.settings_over(&args.defaults());
        settings.out = out.to_path_buf();
        return Ok((settings, None));
    }
    check_not_in_use(out)?;
    let (recorded, fingerprint) = read_settings(args, out)?;
    let merged = merge(
        &recorded,
        &args.settings_over(&recorded),
        out,
        F::flag_value,
    )?;
    Ok((merged, Some(Recorded { fingerprint })))
}

/// The settings of `run.json` in `out` and its fingerprint: [`Settings`], or the flat flags
/// of an earlier version laid over the defaults.
///
/// # Errors
/// A missing or malformed file.
fn read_settings<F: Flags>(
    args: &F,
    out: &Path,
) -> anyhow::Result<(SettingsOf<F>, Option<Fingerprint>)> {
    let record: RunRecord<serde_json::Value> = read_record(out)?;
    let path = out.join("run.json");
    match record.args.get("version") {
        None => {
            let old: F = serde_json::from_value(record.args).with_context(|| {
                format!(
                    "{} (a run.json of an earlier version) is malformed",
                    path.display()
                )
            })?;
            return Ok((old.settings_over(&args.defaults()), record.fingerprint));
        }
        Some(version) if *version != VERSION => bail!(
            "{} is of version {version}; this roformer reads version {VERSION} (and the flat \
             files before it)",
            path.display()
        ),
        Some(_) => {}
    }
    let settings: SettingsOf<F> = serde_json::from_value(record.args)
        .with_context(|| format!("{} is malformed", path.display()))?;
    Ok((settings, record.fingerprint))
}

/// What a resume of the run that recorded `recorded` runs with when `asked` is asked for, in
/// `out`.
///
/// # Errors
/// A field that may not change asked with another value, named by its flag, each value as
/// the flag takes it (`named`: the command's [`Flags::flag_value`]).
fn merge<M: Resumable + Clone, D: Resumable + Clone>(
    recorded: &Settings<M, D>,
    asked: &Settings<M, D>,
    out: &Path,
    named: FlagValue,
) -> anyhow::Result<Settings<M, D>> {
    let refused = |c: ResumeConflict| anyhow::anyhow!(conflict_message(&c, named));
    if asked.plot != recorded.plot {
        bail!(conflict_message(
            &ResumeConflict {
                field: "plot".into(),
                was: serde_json::json!(recorded.plot),
                asked: serde_json::json!(asked.plot),
                may_change: TrainOptions::MAY_CHANGE,
            },
            named
        ));
    }
    Ok(Settings {
        version: VERSION,
        out: out.to_path_buf(),
        model: resumed(&recorded.model, &asked.model).map_err(refused)?,
        data: resumed(&recorded.data, &asked.data).map_err(refused)?,
        train: resumed(&recorded.train, &asked.train).map_err(refused)?,
        plot: recorded.plot.clone(),
    })
}

/// The flags a resume may change, as typed.
pub fn may_change() -> impl Iterator<Item = String> {
    TrainOptions::MAY_CHANGE.iter().map(|f| flag_of(f))
}

/// "--lr 0.01 cannot change on --resume: the run has --lr 0.002; drop the flag (a resume
/// may change --steps, ...)", an enum's values named by `named`.
fn conflict_message(c: &ResumeConflict, named: FlagValue) -> String {
    let flag = flag_of(&c.field);
    let shown = |v: &serde_json::Value| value_text(&c.field, v, named);
    format!(
        "{flag} {} cannot change on --resume: the run has {flag} {}; drop the flag (a resume \
         may change {})",
        shown(&c.asked),
        shown(&c.was),
        may_change().collect::<Vec<_>>().join(", ")
    )
}

/// The flag of a recorded field: `--max-grad-norm` for `max_grad_norm`, and the fields that
/// the library names otherwise than the flags.
fn flag_of(field: &str) -> String {
    match field {
        "batch_size" => "--batch".into(),
        "validation_fraction" => "--validation".into(),
        "line_share" => "--also-lines".into(),
        "packed" => "--line-by-line".into(),
        "max_eval_batches" => "--eval-batches".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// A recorded value as it would be typed: an enum flag's by `named` (the command's
/// [`Flags::flag_value`]), a list as `a,b`, none for an absent value, and the flag's sense for
/// `packed`, which `--line-by-line` inverts.
fn value_text(field: &str, value: &serde_json::Value, named: FlagValue) -> String {
    if let Some(name) = named(field, value) {
        return name;
    }
    match value {
        serde_json::Value::Bool(packed) if field == "packed" => (!packed).to_string(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| value_text(field, v, named))
            .collect::<Vec<_>>()
            .join(","),
        serde_json::Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
