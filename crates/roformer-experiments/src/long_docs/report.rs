//! What `experiment long-docs` reports: each arm at each length over the seeds (end of
//! training, collapsed runs counted), the dev-accuracy curves, the verdict of the longest
//! length against the shortest per arm, the figures and the section.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::super::figure::{BandFigure, Point, Series, XScale};
use super::super::stats::Spread;
use super::baseline::Baseline;
use super::data::DatasetStats;
use super::runs::{FineTuneRecord, Settings};
use super::task::Task;

/// The dev accuracy over seeds after `step` steps.
#[derive(Debug, Serialize)]
pub struct CurvePoint {
    /// Steps done.
    pub step: u64,
    /// Dev accuracy over the seeds.
    pub accuracy: Spread,
}

/// One arm at one length, over its seeds.
#[derive(Debug, Serialize)]
pub struct Cell {
    /// The arm.
    pub arm: String,
    /// The max length.
    pub length: usize,
    /// Dev accuracy at the end.
    pub accuracy: Spread,
    /// Dev macro-F1 at the end.
    pub macro_f1: Spread,
    /// Runs whose predictions collapsed at the end (see `runs::collapsed`).
    pub collapsed: usize,
    /// Runs.
    pub runs: usize,
    /// Mean wall time per run, minutes.
    pub minutes: f64,
    /// Dev accuracy by step (the steps every run evaluated).
    pub curve: Vec<CurvePoint>,
}

/// What guessing scores on the dev set, and how far from it a run's accuracy moves by the
/// dev set's sampling noise alone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Chance {
    /// The accuracy of always answering the dev set's most frequent label, `p`.
    pub accuracy: f64,
    /// Two standard errors of an accuracy near `p` over the `n` dev examples:
    /// `2 sqrt(p (1 - p) / n)`.
    pub noise: f64,
}

impl Chance {
    /// The chance level of a dev set with `per_label[i]` examples of label `i`.
    pub fn of(per_label: &[usize]) -> Chance {
        let n: usize = per_label.iter().sum();
        let most = per_label.iter().copied().max().unwrap_or(0);
        if n == 0 {
            return Chance {
                accuracy: 0.0,
                noise: 0.0,
            };
        }
        let p = most as f64 / n as f64;
        Chance {
            accuracy: p,
            noise: 2.0 * (p * (1.0 - p) / n as f64).sqrt(),
        }
    }

    /// The highest mean accuracy still read as chance: `p + noise`.
    fn ceiling(self) -> f64 {
        self.accuracy + self.noise
    }
}

/// The outcome of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Neither length learnt the task: both mean accuracies within [`Chance::noise`] of
    /// chance, so the comparison says nothing about length.
    NotLearned,
    /// Every seed at the longer length above every seed at the shorter.
    Held,
    /// The longer length ahead on the mean only.
    HeldInPart,
    /// The longer length not ahead on the mean.
    NotHeld,
}

/// Whether the longest length beat the shortest for one arm.
#[derive(Debug, Serialize)]
pub struct Verdict {
    /// The arm.
    pub arm: String,
    /// The shortest length.
    pub short: usize,
    /// The longest length.
    pub long: usize,
    /// Mean dev accuracy at `long` minus at `short`.
    pub gain: f64,
    /// Seeds where `long` beat `short` (the same pre-trained model and seed), and seeds.
    pub seeds_ahead: (usize, usize),
    /// Collapsed runs at either length.
    pub collapsed: usize,
    /// The outcome.
    pub outcome: Outcome,
    /// The verdict in words.
    pub text: String,
}

/// `results.json`.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command.
    pub command: String,
    /// The settings every run shared.
    pub settings: Settings,
    /// Fine-tuning seeds per arm and length.
    pub seeds: u64,
    /// The labels.
    pub labels: Vec<String>,
    /// The dataset.
    pub dataset: DatasetStats,
    /// Arms by lengths.
    pub cells: Vec<Cell>,
    /// The cheap baseline at each length.
    pub baselines: Vec<Baseline>,
    /// Chance on the dev set.
    pub chance: Chance,
    /// Per arm, the longest length against the shortest.
    pub verdicts: Vec<Verdict>,
    /// Runs not finished yet (the same command continues).
    pub pending: usize,
    /// The runs.
    pub runs: Vec<FineTuneRecord>,
}

/// The records of `arm` at `length`.
fn runs_of<'a>(
    records: &'a [FineTuneRecord],
    arm: &'a str,
    length: usize,
) -> impl Iterator<Item = &'a FineTuneRecord> + 'a {
    records
        .iter()
        .filter(move |r| r.arm == arm && r.length == length)
}

/// Each arm at each length (cells without a finished run left out).
pub fn cells(arms: &[String], lengths: &[usize], records: &[FineTuneRecord]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for arm in arms {
        for &length in lengths {
            let mine: Vec<&FineTuneRecord> = runs_of(records, arm, length).collect();
            let ends: Vec<_> = mine.iter().filter_map(|r| r.end()).collect();
            let (Some(accuracy), Some(macro_f1)) = (
                Spread::of(ends.iter().map(|e| e.accuracy).collect()),
                Spread::of(ends.iter().map(|e| e.macro_f1).collect()),
            ) else {
                continue;
            };
            let seconds: f64 = mine.iter().map(|r| r.seconds).sum();
            cells.push(Cell {
                arm: arm.clone(),
                length,
                accuracy,
                macro_f1,
                collapsed: ends.iter().filter(|e| e.collapsed).count(),
                runs: mine.len(),
                minutes: seconds / 60.0 / mine.len() as f64,
                curve: curve(&mine),
            });
        }
    }
    cells
}

/// The dev accuracy over `runs` at each step of the first run that every run evaluated.
fn curve(runs: &[&FineTuneRecord]) -> Vec<CurvePoint> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .curve
        .iter()
        .filter_map(|p| {
            let at: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.curve.iter().find(|q| q.step == p.step))
                .map(|q| q.accuracy)
                .collect();
            (at.len() == runs.len())
                .then(|| Spread::of(at))
                .flatten()
                .map(|accuracy| CurvePoint {
                    step: p.step,
                    accuracy,
                })
        })
        .collect()
}

/// Per arm with both, the longest of `lengths` against the shortest (none with one length);
/// an arm at `chance` at both lengths did not learn the task.
pub fn verdicts(
    cells: &[Cell],
    records: &[FineTuneRecord],
    lengths: &[usize],
    chance: Chance,
) -> Vec<Verdict> {
    let (Some(&short), Some(&long)) = (lengths.iter().min(), lengths.iter().max()) else {
        return Vec::new();
    };
    if short == long {
        return Vec::new();
    }
    let mut verdicts = Vec::new();
    let arms = cells.iter().map(|c| c.arm.as_str());
    let mut seen: Vec<&str> = Vec::new();
    for arm in arms {
        if seen.contains(&arm) {
            continue;
        }
        seen.push(arm);
        let find = |length| cells.iter().find(|c| c.arm == arm && c.length == length);
        let (Some(s), Some(l)) = (find(short), find(long)) else {
            continue;
        };
        verdicts.push(verdict((s, l), records, chance));
    }
    verdicts
}

/// The verdict of cell `l` (the longer length) against cell `s` of the same arm.
fn verdict((s, l): (&Cell, &Cell), records: &[FineTuneRecord], chance: Chance) -> Verdict {
    let gain = l.accuracy.mean - s.accuracy.mean;
    let end = |length, seed| {
        runs_of(records, &s.arm, length)
            .find(|r| r.seed == seed)
            .and_then(|r| r.end())
            .map(|e| e.accuracy)
    };
    let pairs: Vec<(f64, f64)> = runs_of(records, &s.arm, s.length)
        .filter_map(|r| Some((end(s.length, r.seed)?, end(l.length, r.seed)?)))
        .collect();
    let ahead = pairs.iter().filter(|(a, b)| b > a).count();
    let at_chance = |c: &Cell| c.accuracy.mean <= chance.ceiling();
    let outcome = if at_chance(s) && at_chance(l) {
        Outcome::NotLearned
    } else if l.accuracy.min > s.accuracy.max {
        Outcome::Held
    } else if gain > 0.0 {
        Outcome::HeldInPart
    } else {
        Outcome::NotHeld
    };
    let how = match outcome {
        Outcome::NotLearned => format!(
            "both within two standard errors of chance ({:.3} + {:.3}): the task was not learnt \
             at either length, so the comparison shows nothing about length: **not held**",
            chance.accuracy, chance.noise
        ),
        Outcome::Held => format!(
            "every {} seed above every {} seed: **held**",
            l.length, s.length
        ),
        Outcome::HeldInPart => "ahead on the mean, but the seeds overlap: **held in part**".into(),
        Outcome::NotHeld => "not ahead: **not held**".into(),
    };
    let collapsed = s.collapsed + l.collapsed;
    let caveat = if collapsed > 0 {
        format!(
            "; {collapsed} of {} runs collapsed (fewer labels predicted than the task has, or \
             a label never recalled), so the comparison is not clean",
            s.runs + l.runs
        )
    } else {
        String::new()
    };
    let text = format!(
        "{}: {} tokens {:.3} against {} tokens {:.3} ({:+.1} points; {} ahead in {ahead} of {} \
         seeds), {how}{caveat}",
        s.arm,
        l.length,
        l.accuracy.mean,
        s.length,
        s.accuracy.mean,
        100.0 * gain,
        l.length,
        pairs.len()
    );
    Verdict {
        arm: s.arm.clone(),
        short: s.length,
        long: l.length,
        gain,
        seeds_ahead: (ahead, pairs.len()),
        collapsed,
        outcome,
        text,
    }
}

/// Dev accuracy at the end against max length, one line per arm.
pub fn by_length_figure(results: &Results, task: Task, arms: &[String]) -> BandFigure {
    BandFigure {
        title: format!("{}: dev accuracy by max length", task.title()),
        x_desc: "max length (tokens)".into(),
        y_desc: "dev accuracy at the end".into(),
        x_scale: XScale::Log2,
        series: arms
            .iter()
            .map(|arm| Series {
                name: arm.clone(),
                points: (results.cells.iter().filter(|c| &c.arm == arm))
                    .map(|c| point(c.length as f64, &c.accuracy))
                    .collect(),
            })
            .collect(),
        reference: Some((1.0 / results.labels.len() as f64, "chance".into())),
        legend: plotters::prelude::SeriesLabelPosition::MiddleRight,
    }
}

/// Dev accuracy against step at max length `length`, one line per arm (in the colours of
/// the by-length figure).
pub fn curves_figure(results: &Results, task: Task, arms: &[String], length: usize) -> BandFigure {
    BandFigure {
        title: format!(
            "{}, {length} tokens: dev accuracy while fine-tuning",
            task.title()
        ),
        x_desc: "step".into(),
        y_desc: "dev accuracy".into(),
        x_scale: XScale::Linear,
        series: arms
            .iter()
            .map(|arm| Series {
                name: arm.clone(),
                points: (results.cells.iter())
                    .filter(|c| &c.arm == arm && c.length == length)
                    .flat_map(|c| &c.curve)
                    .map(|p| point(p.step as f64, &p.accuracy))
                    .collect(),
            })
            .collect(),
        reference: Some((1.0 / results.labels.len() as f64, "chance".into())),
        legend: plotters::prelude::SeriesLabelPosition::LowerRight,
    }
}

/// The figure's point of `spread` at `x`.
fn point(x: f64, spread: &Spread) -> Point {
    Point {
        x,
        mean: spread.mean,
        min: spread.min,
        max: spread.max,
    }
}

/// The Markdown table: a row per arm and length.
pub fn table(results: &Results) -> String {
    let mut s = "| arm | max length | dev accuracy, mean ± std (min–max) | dev macro-F1 | \
                 collapsed runs | minutes per run |\n|---|---:|---|---|---:|---:|\n"
        .to_string();
    for c in &results.cells {
        s += &format!(
            "| {} | {} | {} | {} | {} of {} | {:.1} |\n",
            c.arm,
            c.length,
            c.accuracy.show(3),
            c.macro_f1.show(3),
            c.collapsed,
            c.runs,
            c.minutes
        );
    }
    for b in &results.baselines {
        s += &format!(
            "| baseline: {} | {} | {:.3} | {:.3} | | |\n",
            b.method, b.length, b.accuracy, b.macro_f1
        );
    }
    s
}

/// Per length, the arms whose mean dev accuracy is above the cheap baseline's and those
/// that are not.
fn against_baseline(results: &Results) -> String {
    let mut lines = String::new();
    for b in &results.baselines {
        let (above, below): (Vec<&Cell>, Vec<&Cell>) = (results.cells.iter())
            .filter(|c| c.length == b.length)
            .partition(|c| c.accuracy.mean > b.accuracy);
        let names = |cells: &[&Cell]| -> String {
            if cells.is_empty() {
                return "none".into();
            }
            let named: Vec<String> = (cells.iter())
                .map(|c| format!("{} {:.3}", c.arm, c.accuracy.mean))
                .collect();
            named.join(", ")
        };
        lines += &format!(
            "- at {} tokens the baseline ({}) scores {:.3}; above it: {}; not above: {}.\n",
            b.length,
            b.method,
            b.accuracy,
            names(&above),
            names(&below)
        );
    }
    lines
}

/// The section's paragraph on the dataset: its construction and sizes.
fn dataset_text(results: &Results, task: Task, lengths: &[usize]) -> String {
    let sizes = &results.settings.sizes;
    let d = &results.dataset;
    let list = |rows: &[(String, usize, usize)]| -> String {
        let items: Vec<String> = rows
            .iter()
            .map(|(l, t, v)| format!("{l} {t}/{v}"))
            .collect();
        items.join(", ")
    };
    let seen: Vec<String> = lengths
        .iter()
        .map(|&l| {
            let chars = match super::data::share(d.segments, l) {
                Some(n) => n as f64,
                None => l.saturating_sub(2) as f64,
            };
            format!(
                "{l} tokens {:.0} %",
                100.0 * (chars / d.mean_chars).min(1.0)
            )
        })
        .collect();
    let construction = match task {
        Task::Collection => format!(
            "A document is {} consecutive poems by one poet (at most {} documents per poet), \
             labelled Tang shi, Song shi or Song ci; the same number per class, chosen by a \
             hash of the text. The corpus writes the Song ci in simplified characters and the \
             shi in traditional ones, so ci against shi is easy; Tang against Song shi is the \
             hard part (the two-class solution gives it up).",
            sizes.poems_per_doc, sizes.max_per_poet
        ),
        Task::Authorship => format!(
            "An example is an anchor ({k} consecutive poems by poet X) and two candidates: {k} \
             other poems of X (the chunk half of X's poems further on) and {k} poems of another \
             poet Y of the same collection and the same side of the split (Y and its poems \
             chosen by a hash); the label says which candidate is X's, first or second, \
             exactly half each (examples ordered by a hash of the anchor, labels alternating); \
             at most {} anchors per poet. The input is `[CLS] anchor [SEP] candidate [SEP] \
             candidate [SEP]` (token types 0, then 1), each text cut to an equal share of the \
             max length, so a longer input shows more of all three.",
            sizes.max_per_poet,
            k = sizes.poems_per_doc
        ),
    };
    format!(
        "{construction} Poets are split between training and dev by a hash of the name ({:.0} \
         % of them to dev; no poet on both sides). Examples per label (training/dev): {}; per \
         collection: {}. A text has {:.0} characters on average; the share of one that a \
         model sees: {}.",
        100.0 * sizes.dev_poets,
        list(&d.labels),
        list(&d.collections),
        d.mean_chars,
        seen.join(", ")
    )
}

/// Per arm, the pre-trained seed of each fine-tuning seed: `rotary 0, 1, 2, 0, 1`.
fn seed_map(results: &Results) -> String {
    let (mut arms, mut seen): (Vec<String>, Vec<&str>) = (Vec::new(), Vec::new());
    for c in &results.cells {
        if seen.contains(&c.arm.as_str()) {
            continue;
        }
        seen.push(&c.arm);
        let mut runs: Vec<&FineTuneRecord> = runs_of(&results.runs, &c.arm, c.length).collect();
        runs.sort_by_key(|r| r.seed);
        let seeds: Vec<String> = runs.iter().map(|r| r.pretrained_seed.to_string()).collect();
        arms.push(format!("{} {}", c.arm, seeds.join(", ")));
    }
    arms.join("; ")
}

/// The section of EXPERIMENTS.md.
pub fn section(
    results: &Results,
    (task, cited): (Task, &str),
    lengths: &[usize],
    figures: &[PathBuf],
) -> String {
    let s = &results.settings;
    let mut verdicts: Vec<String> = results
        .verdicts
        .iter()
        .map(|v| format!("- {}\n", v.text))
        .collect();
    let images: Vec<String> = figures
        .iter()
        .map(|f| format!("![{}]({})\n\n", file_stem(f), f.display()))
        .collect();
    if verdicts.is_empty() {
        verdicts.push("- none: no arm has runs at two lengths.\n".into());
    }
    if results.pending > 0 {
        verdicts.push(format!(
            "\n**Not finished yet**: {} runs (the same command continues); the numbers above \
             are those of the finished runs.\n",
            results.pending
        ));
    }
    let collapsed: usize = results.cells.iter().map(|c| c.collapsed).sum();
    let runs: usize = results.cells.iter().map(|c| c.runs).sum();
    format!(
        "### {}\n\n```sh\n{}\n```\n\nSettings: {cited}.\n\n{}\n\nEach arm's pre-trained models (experiment 1's \
         runs, at the arm's best rate when it ran a sweep) are fine-tuned with {} seeds: \
         fine-tuning seed s starts from the arm's pre-trained run number s mod n of its n \
         seeds (a pre-trained model used twice gets another initial head and data order; \
         pre-trained seed of each fine-tuning seed: {}), at each max length. {} steps of {} examples, \
         AdamW lr {} (warm-up a tenth, linear decay, weight decay 0.01, clipping at 1), {} \
         matrix products; dev evaluated every {} steps. A run **collapsed** when its dev \
         predictions at the end use fewer labels than the task has or never recall one \
         label: {collapsed} of {runs} runs.\n\n{}\n{}**Verdict** (the longest length against the \
         shortest, per arm; held when every seed at the longer length is above every seed at \
         the shorter; not learnt when the means at both lengths are within two standard \
         errors of chance, {:.3} + {:.3} here):\n\n{}\n**Against the cheap baseline** \
         (counting characters on the same cut texts, `baseline.rs`; the strongest cheap \
         method, not chance):\n\n{}",
        task.heading(),
        results.command,
        dataset_text(results, task, lengths),
        results.seeds,
        seed_map(results),
        s.steps,
        s.batch,
        s.lr,
        s.precision.name(),
        s.eval_every,
        table(results),
        images.concat(),
        results.chance.accuracy,
        results.chance.noise,
        verdicts.concat(),
        against_baseline(results)
    )
}

/// The file name of `path` without its extension, as an image's alt text.
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell of `arm` at `length` whose runs ended at `accuracies`.
    fn cell(arm: &str, length: usize, accuracies: &[f64]) -> Cell {
        let spread = Spread::of(accuracies.to_vec()).unwrap();
        Cell {
            arm: arm.into(),
            length,
            accuracy: spread.clone(),
            macro_f1: spread,
            collapsed: 0,
            runs: accuracies.len(),
            minutes: 1.0,
            curve: Vec::new(),
        }
    }

    #[test]
    fn chance_is_the_majority_share_with_two_binomial_standard_errors() {
        let c = Chance::of(&[500, 500]);
        assert_eq!(c.accuracy, 0.5);
        // 2 sqrt(0.25 / 1000) = 0.0316...
        assert!((c.noise - 0.031_622_776_601_683_79).abs() < 1e-15, "{c:?}");
        let c = Chance::of(&[350, 350, 350]);
        assert!((c.accuracy - 1.0 / 3.0).abs() < 1e-15);
        // Unbalanced: guessing the larger label.
        assert_eq!(Chance::of(&[300, 100]).accuracy, 0.75);
        assert_eq!(Chance::of(&[]).noise, 0.0);
    }

    #[test]
    fn both_lengths_at_chance_is_not_learnt_whatever_the_gap() {
        let chance = Chance::of(&[500, 500]);
        // 0.53 against 0.50: every long seed above every short one, but both within 0.532.
        let cells = [
            cell("rotary", 128, &[0.50, 0.50, 0.501]),
            cell("rotary", 512, &[0.525, 0.53, 0.531]),
        ];
        let v = verdicts(&cells, &[], &[128, 512], chance);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].outcome, Outcome::NotLearned, "{}", v[0].text);
        assert!(v[0].text.contains("not learnt"), "{}", v[0].text);
        // Above the band at one length: the ordinary verdict.
        let cells = [
            cell("rotary", 128, &[0.50, 0.50, 0.501]),
            cell("rotary", 512, &[0.55, 0.56, 0.57]),
        ];
        let v = verdicts(&cells, &[], &[128, 512], chance);
        assert_eq!(v[0].outcome, Outcome::Held, "{}", v[0].text);
        // A chance of a third (three labels) leaves 0.5 far above the band.
        let cells = [
            cell("t5", 128, &[0.50, 0.52]),
            cell("t5", 512, &[0.49, 0.51]),
        ];
        let v = verdicts(&cells, &[], &[128, 512], Chance::of(&[350, 350, 350]));
        assert_eq!(v[0].outcome, Outcome::NotHeld, "{}", v[0].text);
    }
}
