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
}

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
    let merged = merge(&recorded, &args.settings_over(&recorded), out)?;
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
/// A field that may not change asked with another value, named by its flag.
fn merge<M: Resumable + Clone, D: Resumable + Clone>(
    recorded: &Settings<M, D>,
    asked: &Settings<M, D>,
    out: &Path,
) -> anyhow::Result<Settings<M, D>> {
    let refused = |c: ResumeConflict| anyhow::anyhow!(conflict_message(&c));
    if asked.plot != recorded.plot {
        bail!(conflict_message(&ResumeConflict {
            field: "plot".into(),
            was: serde_json::json!(recorded.plot),
            asked: serde_json::json!(asked.plot),
            may_change: TrainOptions::MAY_CHANGE,
        }));
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
/// may change --steps, ...)".
fn conflict_message(c: &ResumeConflict) -> String {
    let flag = flag_of(&c.field);
    let shown = |v: &serde_json::Value| value_text(&c.field, v);
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

/// A recorded value as it would be typed (`a,b` for a list, none for an absent value; the
/// flag's sense for `packed`, which `--line-by-line` inverts).
fn value_text(field: &str, value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Bool(packed) if field == "packed" => (!packed).to_string(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| value_text(field, v))
            .collect::<Vec<_>>()
            .join(","),
        serde_json::Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use roformer::train::classify::ClassifyOptions;
    use roformer::train::mlm::MlmDataOptions;
    use roformer::Precision;

    use super::*;

    /// The flags of `train mlm --out run`, parsed.
    fn mlm(flags: &[&str]) -> crate::train::mlm::Args {
        let mut args = vec!["mlm", "--out", "run"];
        args.extend_from_slice(flags);
        let cli = <crate::train::mlm::Args as clap::Args>::augment_args(clap::Command::new("mlm"));
        let matches = cli.try_get_matches_from(args).unwrap();
        <crate::train::mlm::Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap()
    }

    /// The run that `train mlm` with `flags` records.
    fn recorded(flags: &[&str]) -> Settings<crate::train::mlm::Model, MlmDataOptions> {
        let args = mlm(flags);
        args.settings_over(&args.defaults())
    }

    fn started() -> Settings<crate::train::mlm::Model, MlmDataOptions> {
        recorded(&[
            "--corpus", "poems", "--vocab", "v", "--config", "c", "--steps", "8", "--lr", "2e-3",
        ])
    }

    #[test]
    fn a_resume_takes_a_flag_it_may_change_and_keeps_the_rest() {
        let run = started();
        let args = mlm(&[
            "--resume",
            "--steps",
            "16",
            "--save-every",
            "2",
            "--precision",
            "bf16",
        ]);
        let merged = merge(&run, &args.settings_over(&run), Path::new("copy")).unwrap();
        assert_eq!(merged.train.steps, Some(16));
        assert_eq!(merged.train.save_every, 2);
        assert_eq!(merged.train.precision, Precision::Bf16);
        assert_eq!(merged.train.eval_every, 0, "not given: the run's");
        assert_eq!(
            merged.train.lr, 2e-3,
            "not given: the run's, not the default"
        );
        assert_eq!(merged.out, Path::new("copy"));
        assert_eq!((merged.model, merged.data), (run.model, run.data));
    }

    #[test]
    fn a_resume_refuses_another_flag_naming_it_but_takes_the_runs_value_again() {
        let run = started();
        let same = mlm(&["--resume", "--lr", "0.002", "--corpus", "poems"]);
        assert!(merge(&run, &same.settings_over(&run), Path::new("run")).is_ok());
        let err = merge(
            &run,
            &mlm(&["--resume", "--lr", "0.01"]).settings_over(&run),
            Path::new("run"),
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "--lr 0.01 cannot change on --resume: the run has --lr 0.002; drop the flag (a \
             resume may change --steps, --precision, --save-every, --eval-every)"
        );
        for (flags, want) in [
            (
                &["--corpus", "other", "more"][..],
                "--corpus other,more cannot change",
            ),
            (
                &["--seq-len", "32"],
                "--seq-len 32 cannot change on --resume: the run has --seq-len 128",
            ),
            (
                &["--line-by-line"],
                "--line-by-line true cannot change on --resume: the run has --line-by-line false",
            ),
            (&["--batch", "4"], "--batch 4 cannot change"),
            (&["--position", "alibi"], "--position Alibi cannot change"),
            (&["--plot", "loss.svg"], "--plot loss.svg cannot change"),
        ] {
            let asked = mlm(&[&["--resume"], flags].concat()).settings_over(&run);
            let err = merge(&run, &asked, Path::new("run")).unwrap_err();
            assert!(err.to_string().starts_with(want), "{flags:?}: {err}");
        }
    }

    #[test]
    fn every_recorded_field_names_a_flag_of_its_command() {
        let commands = crate::Cli::command();
        let train = commands.find_subcommand("train").unwrap();
        let longs = |sub: &str| -> Vec<String> {
            let command = train.find_subcommand(sub).unwrap();
            command
                .get_arguments()
                .filter_map(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .collect()
        };
        let fields = |value: serde_json::Value| -> Vec<String> {
            value.as_object().unwrap().keys().cloned().collect()
        };
        let train_fields = fields(serde_json::to_value(TrainOptions::default()).unwrap());
        let mlm_fields = [
            fields(serde_json::to_value(MlmDataOptions::default()).unwrap()),
            fields(serde_json::to_value(started().model).unwrap()),
        ]
        .concat();
        let classify_fields = [
            fields(serde_json::to_value(ClassifyOptions::default()).unwrap()),
            vec!["init".to_string()],
        ]
        .concat();
        for (sub, own) in [("mlm", mlm_fields), ("classify", classify_fields)] {
            let flags = longs(sub);
            for field in train_fields
                .iter()
                .chain(&own)
                .chain(["plot".to_string()].iter())
            {
                assert!(
                    flags.contains(&flag_of(field)),
                    "{sub}: {field} -> {}",
                    flag_of(field)
                );
            }
        }
    }

    #[test]
    fn a_flat_run_json_of_before_reads_as_the_flags_it_holds() {
        // The run.json that `train mlm --config c --vocab v --corpus poems --steps 8 --lr 2e-3
        // --out run` wrote before the settings were typed.
        let dir = std::env::temp_dir().join(format!("roformer-old-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = r#"{"config": "c", "vocab": "v", "init": null, "position": null,
            "corpus": ["poems"], "format": "Auto", "text_field": "text", "seq_len": 128,
            "line_by_line": false, "whole_word": false, "also_simplified": false,
            "also_lines": 0.0, "alone_share": 0.0, "validation": 0.05, "batch": 16,
            "steps": 8, "lr": 0.002, "seed": 0, "eval_batches": 50, "grad_accum": 1,
            "warmup": 0, "decay": "Linear", "weight_decay": 0.01, "max_grad_norm": 1.0,
            "eval_every": 0, "save_every": 0, "out": "run", "overwrite": false,
            "resume": false, "plot": "loss.png", "stop_after": null, "precision": null,
            "json": true, "quiet": false}"#;
        std::fs::write(dir.join("run.json"), old).unwrap();
        let (settings, fingerprint) = read_settings(&mlm(&["--resume"]), &dir).unwrap();
        assert!(fingerprint.is_none());
        let mut want = started();
        want.out = PathBuf::from("run");
        let mut got = settings;
        got.out = PathBuf::from("run");
        assert_eq!(got, want);

        // A record of another version, and a malformed one: clear errors.
        std::fs::write(dir.join("run.json"), r#"{"version": 3}"#).unwrap();
        let err = read_settings(&mlm(&["--resume"]), &dir).unwrap_err();
        assert!(
            err.to_string()
                .contains("is of version 3; this roformer reads version 2"),
            "{err:#}"
        );
        std::fs::write(dir.join("run.json"), r#"{"steps": "many"}"#).unwrap();
        let err = read_settings(&mlm(&["--resume"]), &dir).unwrap_err();
        assert!(
            err.to_string()
                .contains("of an earlier version) is malformed"),
            "{err:#}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
