//! The fine-tuning runs of `experiment long-docs`: the pre-trained run each starts from, the
//! run itself (dev evaluated every `--eval-every` steps), its record with the dev curve, and
//! whether its predictions collapsed.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use roformer::optim::Decay;
use roformer::train::classify::ClassifyOptions;
use roformer::train::run::EvalMetrics;
use roformer::train::{ModelStart, TaskOptions, TrainOptions, TrainRun};
use serde::{Deserialize, Serialize};

use super::super::done::{is_done, mark_done, read_done};
use super::super::pretrain::RunRecord;
use super::super::{check_stopped, start_of, train_run};
use super::data::Sizes;
use super::task::Task;
use roformer::train::out_dir::check_not_in_use;
use roformer_runner::json;
use roformer_runner::precision::PrecisionArg;
use roformer_runner::train::checks::check_vocab_fits;
use roformer_runner::train::classify::explain;

/// The arms to fine-tune: `asked` (each must have pre-trained runs), or, when none is asked,
/// those of `defaults` (the settings' arms) that `pretrained` has.
///
/// # Errors
/// An asked arm without pre-trained runs, or no default arm among them (naming `--arms` and
/// the arms `from` has).
pub fn arms_of(
    (asked, defaults): (&[String], &[String]),
    pretrained: &[RunRecord],
    from: &Path,
) -> anyhow::Result<Vec<String>> {
    let mut present: Vec<&str> = pretrained.iter().map(|r| r.arm.as_str()).collect();
    present.sort_unstable();
    present.dedup();
    let has = |arm: &str| present.contains(&arm);
    if asked.is_empty() {
        let arms: Vec<String> = defaults.iter().filter(|a| has(a)).cloned().collect();
        anyhow::ensure!(
            !arms.is_empty(),
            "{} has finished runs of {} only, none of the default arms {}: name the arms with \
             --arms",
            from.join("runs").display(),
            present.join(", "),
            defaults.join(", ")
        );
        return Ok(arms);
    }
    for arm in asked {
        anyhow::ensure!(
            has(arm),
            "--arms names {arm}, but {} has no finished {arm} run (it has {}): leave {arm} out \
             of --arms, or pre-train it with `roformer experiment convergence --arms ...`",
            from.join("runs").display(),
            present.join(", ")
        );
    }
    Ok(asked.to_vec())
}

/// The pre-trained run that fine-tuning seed `seed` starts from: the `(seed mod n)`-th of the
/// arm's `n` runs `runs` (in seed order); `None` when there is none.
pub fn base_of<'a>(runs: &[&'a RunRecord], seed: u64) -> Option<&'a RunRecord> {
    let n = runs.len() as u64;
    (n > 0).then(|| runs[(seed % n) as usize])
}

/// A fine-tuning run of the plan.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    /// The arm.
    pub arm: &'a str,
    /// The max length.
    pub length: usize,
    /// The fine-tuning seed.
    pub seed: u64,
    /// The pre-trained run it starts from.
    pub base: &'a RunRecord,
}

impl Planned<'_> {
    /// Its directory name in `runs/`: `rotary-L512-s3`.
    pub fn name(&self) -> String {
        format!("{}-L{}-s{}", self.arm, self.length, self.seed)
    }
}

/// The runs: fine-tuning seeds `0..seeds`, each over every arm and length (seed by seed, so
/// that a stopped experiment has whole seeds), each arm's seed `s` from [`base_of`].
pub fn plan<'a>(
    arms: &'a [String],
    lengths: &[usize],
    seeds: u64,
    pretrained: &'a [RunRecord],
) -> Vec<Planned<'a>> {
    let mut runs = Vec::new();
    for seed in 0..seeds {
        for arm in arms {
            let mine: Vec<&RunRecord> = pretrained.iter().filter(|r| &r.arm == arm).collect();
            let Some(base) = base_of(&mine, seed) else {
                continue;
            };
            runs.extend(lengths.iter().map(|&length| Planned {
                arm,
                length,
                seed,
                base,
            }));
        }
    }
    runs
}

/// What every run of an experiment shares; a finished run with other settings is not reused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The task.
    pub task: Task,
    /// The dataset's sizes.
    pub sizes: Sizes,
    /// Fine-tuning steps.
    pub steps: u64,
    /// Dev evaluation every this many steps (and at the end).
    pub eval_every: u64,
    /// Examples per step.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// The precision of the matrix products.
    pub precision: PrecisionArg,
}

/// A dev evaluation of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// Steps done.
    pub step: u64,
    /// Dev loss.
    pub loss: f64,
    /// Dev accuracy.
    pub accuracy: f64,
    /// Dev macro-F1.
    pub macro_f1: f64,
    /// `confusion[gold][predicted]`, labels in index order.
    pub confusion: Vec<Vec<usize>>,
    /// Whether the predictions collapsed ([`collapsed`]).
    pub collapsed: bool,
}

/// Whether the predictions behind `confusion` (`[gold][predicted]`) collapsed: they use fewer
/// labels than the task has, or a label of the gold has recall 0 (none of its items is
/// predicted as it).
pub fn collapsed(confusion: &[Vec<usize>]) -> bool {
    let n = confusion.len();
    let predicted = |p: usize| {
        confusion
            .iter()
            .any(|row| row.get(p).is_some_and(|&c| c > 0))
    };
    let used = (0..n).filter(|&p| predicted(p)).count();
    let unrecalled = confusion
        .iter()
        .enumerate()
        .any(|(g, row)| row.iter().sum::<usize>() > 0 && row.get(g).is_none_or(|&c| c == 0));
    used < n || unrecalled
}

/// What a finished fine-tuning run recorded (`done.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FineTuneRecord {
    /// The arm.
    pub arm: String,
    /// The max length.
    pub length: usize,
    /// The fine-tuning seed.
    pub seed: u64,
    /// The pre-trained run's directory.
    pub pretrained: PathBuf,
    /// The pre-trained run's seed.
    pub pretrained_seed: u64,
    /// The settings it ran with.
    pub settings: Settings,
    /// The dev evaluations, by step (the last at the end).
    pub curve: Vec<EvalPoint>,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl FineTuneRecord {
    /// The dev evaluation at the end.
    pub fn end(&self) -> Option<&EvalPoint> {
        self.curve.last()
    }
}

/// The dev evaluations in run directory `dir`'s `metrics.jsonl`.
///
/// # Errors
/// An unreadable file, or an evaluation without macro-F1 or confusion matrix.
fn read_curve(dir: &Path) -> anyhow::Result<Vec<EvalPoint>> {
    let path = dir.join("metrics.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut curve: Vec<EvalPoint> = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}: not JSON lines", path.display()))?;
        if v["event"] != "eval" {
            continue;
        }
        let m: EvalMetrics = serde_json::from_value(v)
            .with_context(|| format!("{}: not an evaluation", path.display()))?;
        let matrix = m.confusion.and_then(|c| c.into_matrix());
        let (Some(macro_f1), Some(confusion)) = (m.macro_f1, matrix) else {
            anyhow::bail!(
                "{}: the evaluation at step {} has no macro-F1 or confusion matrix",
                path.display(),
                m.step
            );
        };
        curve.retain(|p| p.step != m.step);
        curve.push(EvalPoint {
            step: m.step,
            loss: m.loss,
            accuracy: m.accuracy,
            macro_f1,
            collapsed: collapsed(&confusion),
            confusion,
        });
    }
    Ok(curve)
}

/// The record of the finished run `planned` in `dir`, if it ran with `settings` from the
/// same pre-trained run.
///
/// # Errors
/// An unreadable record, or one of other settings (naming both).
fn reuse(dir: &Path, planned: &Planned<'_>, settings: &Settings) -> anyhow::Result<FineTuneRecord> {
    let record: FineTuneRecord = read_done(dir)?;
    if record.settings != *settings || record.pretrained != planned.base.dir {
        anyhow::bail!(
            "{}: finished with {} from {}, but this command asks {} from {}: give another \
             --out, or the flags it ran with",
            dir.display(),
            json::to_string(&record.settings)?,
            record.pretrained.display(),
            json::to_string(settings)?,
            planned.base.dir.display()
        );
    }
    Ok(record)
}

/// The records of the plan's finished runs, in plan order; the others are left to a command
/// that trains.
///
/// # Errors
/// A finished run of other settings, an unreadable record.
pub fn finished_records(
    plan: &[Planned<'_>],
    settings: &Settings,
    out: &Path,
) -> anyhow::Result<Vec<FineTuneRecord>> {
    (plan.iter())
        .filter_map(|planned| {
            let dir = out.join("runs").join(planned.name());
            is_done(&dir).then(|| reuse(&dir, planned, settings))
        })
        .collect()
}

/// Runs the plan, skipping finished runs and runs another process is training (so that
/// processes given the same command share its runs); `data` gives each length's (training,
/// dev) files, and `report` is called after every run it trains with the records of every
/// run finished so far, by any process. Returns those records, in plan order.
///
/// # Errors
/// A finished run of other settings, the runs' errors, a stop by Ctrl-C, `report`'s.
pub fn fine_tune_all(
    plan: &[Planned<'_>],
    data: &dyn Fn(usize) -> Option<(PathBuf, PathBuf)>,
    settings: &Settings,
    (out, labels): (&Path, &[String]),
    stop: &AtomicBool,
    report: &dyn Fn(&[FineTuneRecord]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<FineTuneRecord>> {
    for (i, planned) in plan.iter().enumerate() {
        let dir = out.join("runs").join(planned.name());
        if is_done(&dir) {
            reuse(&dir, planned, settings)?;
            continue;
        }
        // Another process of the same experiment is training it: leave it to that one.
        if let Err(e) = check_not_in_use(&dir) {
            eprintln!("[{}/{}] skipped: {e:#}", i + 1, plan.len());
            continue;
        }
        let files = data(planned.length)
            .with_context(|| format!("no dataset written for length {}", planned.length))?;
        eprintln!(
            "[{}/{}] fine-tuning {} at {} tokens, seed {} (from {})",
            i + 1,
            plan.len(),
            planned.arm,
            planned.length,
            planned.seed,
            planned.base.dir.display()
        );
        let seconds = match fine_tune(planned, (&files.0, &files.1), settings, labels, &dir, stop) {
            Ok(seconds) => seconds,
            // Taken by another process between the check above and this one's lock.
            Err(e) if check_not_in_use(&dir).is_err() => {
                eprintln!("[{}/{}] skipped: {e:#}", i + 1, plan.len());
                continue;
            }
            Err(e) => return Err(e),
        };
        check_stopped(stop)?;
        let curve = read_curve(&dir)?;
        anyhow::ensure!(!curve.is_empty(), "{}: no dev evaluation", dir.display());
        let record = FineTuneRecord {
            arm: planned.arm.into(),
            length: planned.length,
            seed: planned.seed,
            pretrained: planned.base.dir.clone(),
            pretrained_seed: planned.base.seed,
            settings: settings.clone(),
            curve,
            seconds,
        };
        mark_done(&dir, &record)?;
        report(&finished_records(plan, settings, out)?)?;
    }
    finished_records(plan, settings, out)
}

/// What an experiment's fine-tuning run records in its `run.json`.
#[derive(Debug, Serialize)]
struct FineTuneRun<'a> {
    /// The task.
    task: &'a str,
    /// The arm.
    arm: &'a str,
    /// The max length.
    length: usize,
    /// The fine-tuning seed.
    seed: u64,
    /// The pre-trained run.
    pretrained: &'a Path,
    /// The settings every run of the experiment shares: what an interrupted run must share
    /// with the command that continues it.
    settings: &'a Settings,
    /// The loss plot's file name.
    plot: &'static str,
}

/// Fine-tunes the pre-trained run of `planned` on `data` (training, dev) into `dir` (or
/// continues the run a stop interrupted there): the run's wall seconds, all its parts.
///
/// # Errors
/// The run's errors.
fn fine_tune(
    planned: &Planned<'_>,
    data: (&Path, &Path),
    settings: &Settings,
    labels: &[String],
    dir: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<f64> {
    let init = planned.base.dir.join("checkpoint");
    let record = FineTuneRun {
        task: settings.task.name(),
        arm: planned.arm,
        length: planned.length,
        seed: planned.seed,
        pretrained: &planned.base.dir,
        settings,
        plot: "loss.png",
    };
    let (start, interrupted) = start_of(dir, &record, || Ok(ModelStart::from_checkpoint(&init)?))?;
    check_vocab_fits(&init, start.tokenizer.vocab_size(), start.config.vocab_size)?;
    let task = ClassifyOptions {
        train: data.0.to_path_buf(),
        eval: Some(data.1.to_path_buf()),
        labels: labels.to_vec(),
        max_length: planned.length,
        batch_size: settings.batch,
        seed: planned.seed,
    };
    let options = TrainRun {
        options: TrainOptions {
            steps: Some(settings.steps),
            lr: settings.lr,
            warmup: settings.steps / 10,
            decay: Decay::Linear,
            weight_decay: 0.01,
            max_grad_norm: Some(1.0),
            seed: planned.seed,
            eval_every: settings.eval_every,
            // A checkpoint at every evaluation: a run killed outright (not stopped) loses at
            // most that many steps when the command continues it.
            save_every: settings.eval_every,
            precision: settings.precision.resolve(),
            ..TrainOptions::FINE_TUNING
        },
        resume: interrupted.is_some(),
        ..TrainRun::new(dir, &start, TaskOptions::Classify(task))
    };
    let inputs = vec![
        ("--init", init.as_path()),
        ("--train", data.0),
        ("--eval", data.1),
    ];
    let run = (inputs, interrupted.as_ref());
    train_run(&options, run, &record, "Classifier", stop, explain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pretrained(arm: &str, seed: u64) -> RunRecord {
        RunRecord {
            arm: arm.into(),
            seed,
            dir: PathBuf::from(format!("{arm}-s{seed}")),
            evals: vec![(500, 6.0, 0.1)],
            seconds: 1.0,
            lr: Some(1e-3),
            diverged_at: None,
        }
    }

    #[test]
    fn fine_tuning_seed_s_starts_from_the_arms_run_s_mod_n() {
        // rotary has 3 pre-trained seeds, t5 2 (seeds 1 and 4: not 0..n).
        let runs = vec![
            pretrained("rotary", 0),
            pretrained("rotary", 1),
            pretrained("rotary", 2),
            pretrained("t5", 1),
            pretrained("t5", 4),
        ];
        let arms = vec!["rotary".to_string(), "t5".to_string()];
        let plan = plan(&arms, &[128, 512], 5, &runs);
        assert_eq!(plan.len(), 5 * 2 * 2);
        let bases: Vec<(String, u64)> = plan
            .iter()
            .filter(|p| p.length == 512)
            .map(|p| (p.name(), p.base.seed))
            .collect();
        let expected: Vec<(String, u64)> = [
            ("rotary-L512-s0", 0),
            ("t5-L512-s0", 1),
            ("rotary-L512-s1", 1),
            ("t5-L512-s1", 4),
            ("rotary-L512-s2", 2),
            ("t5-L512-s2", 1),
            ("rotary-L512-s3", 0),
            ("t5-L512-s3", 4),
            ("rotary-L512-s4", 1),
            ("t5-L512-s4", 1),
        ]
        .iter()
        .map(|(n, s)| (n.to_string(), *s))
        .collect();
        assert_eq!(bases, expected);
        // Every base is a run of its own arm.
        assert!(plan.iter().all(|p| p.base.arm == p.arm));
        assert!(base_of(&[], 3).is_none());
    }

    #[test]
    fn default_arms_are_those_pre_trained_and_an_asked_arm_without_runs_is_refused() {
        let runs = vec![
            pretrained("absolute", 0),
            pretrained("none", 0),
            pretrained("rotary", 0),
        ];
        let from = Path::new("conv");
        let defaults = ["rotary", "absolute", "alibi", "t5", "sinusoidal"].map(String::from);
        assert_eq!(
            arms_of((&[], &defaults), &runs, from).unwrap(),
            ["rotary".to_string(), "absolute".to_string()]
        );
        let asked = ["none".to_string(), "rotary".to_string()];
        assert_eq!(arms_of((&asked, &defaults), &runs, from).unwrap(), asked);
        let err = arms_of((&["alibi".to_string()], &defaults), &runs, from)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--arms names alibi") && err.contains("absolute, none, rotary"),
            "{err}"
        );
        let err = arms_of((&[], &defaults), &runs[1..2], from)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--arms") && err.contains("none only"), "{err}");
    }

    #[test]
    fn collapse_is_fewer_labels_predicted_or_a_label_never_recalled() {
        // All three labels predicted and recalled.
        assert!(!collapsed(&[vec![5, 1, 0], vec![2, 3, 1], vec![0, 1, 4]]));
        // The two-class solution: label 1 never predicted.
        assert!(collapsed(&[vec![5, 0, 1], vec![3, 0, 3], vec![0, 0, 6]]));
        // One class for everything.
        assert!(collapsed(&[vec![0, 4], vec![0, 4]]));
        // Every label predicted, but label 0's items never as 0 (recall 0).
        assert!(collapsed(&[vec![0, 3, 1], vec![1, 2, 1], vec![0, 0, 4]]));
        // A label absent from the gold is not "unrecalled", but must still be predicted.
        assert!(!collapsed(&[vec![3, 1], vec![0, 0]]));
        assert!(collapsed(&[vec![3, 0], vec![0, 0]]));
    }
}
