//! `--resume`: which flags a resume may change, and the arguments it runs with (the run's
//! record, `run.json`, is [`roformer_runner::train::record`]).
//!
//! A resume takes every argument from `run.json`, except:
//! - `--out`, `--stop-after`, `--json` and `--quiet`: this invocation's own;
//! - [`MAY_CHANGE`] (`--steps`, `--precision`, `--save-every`, `--eval-every`): the run's
//!   unless given again, since they change neither the data nor the steps already taken
//!   (`--steps` must stay at or above the steps done; a run with more steps decays its
//!   learning rate over the new total from here on).
//!
//! Any other flag given with `--resume` must repeat the run's value (so that the command that
//! started a run, with `--resume` added, continues it); a different value is refused, naming
//! the flag, the run's value and the given one.

use std::path::Path;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::CommandFactory;
use serde::de::DeserializeOwned;
use serde::Serialize;

use roformer::train::out_dir::check_not_in_use;
use roformer_runner::json;
use roformer_runner::train::record::{read_record, Recorded, RunRecord};

/// The flags (clap ids) a resume may change; the others must keep the run's value.
pub const MAY_CHANGE: [&str; 4] = ["steps", "precision", "save_every", "eval_every"];

/// The flags (clap ids) that belong to each invocation, not to the run (`--overwrite` cannot
/// be given with `--resume`, and a resume is never recorded as one).
const OWN: [&str; 6] = ["out", "resume", "overwrite", "stop_after", "json", "quiet"];

/// The flags (clap ids) given on this process's command line for `roformer train SUB` (none
/// when it is another command, as when `experiment` runs a training).
pub fn given_flags(sub: &str) -> Vec<String> {
    let Ok(matches) = crate::Cli::command().try_get_matches_from(std::env::args_os()) else {
        return Vec::new();
    };
    let Some(("train", train)) = matches.subcommand() else {
        return Vec::new();
    };
    match train.subcommand() {
        Some((name, m)) if name == sub => m
            .ids()
            .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
            .map(|id| id.as_str().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// The arguments a resume runs with: `recorded`, with this invocation's own flags and the
/// [`MAY_CHANGE`] flags that were `given` taken from `now`.
///
/// # Errors
/// A given flag outside those that differs from the run's value, naming both values.
pub fn merge<A: Serialize + DeserializeOwned>(
    now: &A,
    recorded: A,
    given: &[String],
) -> anyhow::Result<A> {
    let now = json::to_value(now)?;
    let mut merged = json::to_value(&recorded)?;
    for id in given {
        let (is, was) = (&now[id.as_str()], &merged[id.as_str()]);
        let free = OWN.contains(&id.as_str()) || MAY_CHANGE.contains(&id.as_str());
        if !free && is != was {
            bail!(
                "{} {} cannot change on --resume: the run has {} {}; drop the flag (a resume may \
                 change {})",
                flag_name(id),
                value_text(is),
                flag_name(id),
                value_text(was),
                MAY_CHANGE.map(flag_name).join(", ")
            );
        }
    }
    for id in OWN.iter().copied().chain(
        MAY_CHANGE
            .iter()
            .copied()
            .filter(|id| given.iter().any(|g| g == id)),
    ) {
        merged[id] = now[id].clone();
    }
    serde_json::from_value(merged).context("merging the run's arguments with the given ones")
}

/// `--max-grad-norm` for the clap id `max_grad_norm`.
fn flag_name(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

/// A recorded value as it would be typed (`a,b` for a list, none for an absent value).
fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => {
            items.iter().map(value_text).collect::<Vec<_>>().join(",")
        }
        serde_json::Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

/// The arguments this invocation runs with: `args` for a new run; for `--resume`, the run's
/// recorded arguments merged with `args` (see [`merge`]; `sub` is `mlm` or `classify`), and
/// what else the record holds.
///
/// # Errors
/// A directory in use by another run, a missing or malformed `run.json`, and the errors of
/// [`merge`].
pub fn resolve<A: Serialize + DeserializeOwned>(
    args: A,
    out: &Path,
    resume: bool,
    sub: &str,
) -> anyhow::Result<(A, Option<Recorded>)> {
    if !resume {
        return Ok((args, None));
    }
    check_not_in_use(out)?;
    let record: RunRecord<A> = read_record(out)?;
    let merged = merge(&args, record.args, &given_flags(sub))?;
    Ok((
        merged,
        Some(Recorded {
            fingerprint: record.fingerprint,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Args {
        out: String,
        resume: bool,
        json: bool,
        quiet: bool,
        stop_after: Option<u64>,
        steps: Option<u64>,
        precision: Option<String>,
        save_every: u64,
        eval_every: u64,
        lr: f64,
        corpus: Vec<String>,
    }

    fn run() -> Args {
        Args {
            out: "a".into(),
            resume: false,
            json: true,
            quiet: false,
            stop_after: Some(4),
            steps: Some(8),
            precision: None,
            save_every: 0,
            eval_every: 0,
            lr: 2e-3,
            corpus: vec!["poems".into()],
        }
    }

    fn given(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_resume_takes_its_own_flags_and_the_changeable_ones_given() {
        let now = Args {
            out: "copy".into(),
            resume: true,
            json: false,
            stop_after: None,
            steps: Some(16),
            save_every: 2,
            eval_every: 5,
            lr: 5e-4, // a default, not given: the run's stays
            ..run()
        };
        let merged = merge(
            &now,
            run(),
            &given(&["out", "resume", "steps", "save_every"]),
        )
        .unwrap();
        assert_eq!(merged.out, "copy");
        assert!(merged.resume && !merged.json);
        assert_eq!(merged.stop_after, None);
        assert_eq!(merged.steps, Some(16));
        assert_eq!(merged.save_every, 2);
        assert_eq!(merged.eval_every, 0, "not given: the run's");
        assert_eq!(merged.lr, 2e-3);
    }

    #[test]
    fn another_flag_may_repeat_the_runs_value_but_not_change_it() {
        let same = Args {
            resume: true,
            ..run()
        };
        assert!(merge(&same, run(), &given(&["resume", "lr", "corpus"])).is_ok());
        let changed = Args {
            resume: true,
            lr: 0.01,
            ..run()
        };
        let err = merge(&changed, run(), &given(&["resume", "lr"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--lr 0.01 cannot change on --resume: the run has --lr 0.002; drop the flag (a \
             resume may change --steps, --precision, --save-every, --eval-every)"
        );
        let corpus = Args {
            corpus: vec!["other".into(), "more".into()],
            ..run()
        };
        let err = merge(&corpus, run(), &given(&["corpus"])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--corpus other,more cannot change"),
            "{err}"
        );
    }
}
