//! `--sweep`: best against best. Every arm is trained on seed 0 at each peak learning rate of
//! the sweep; an arm's best rate is the one with the lowest final validation loss (a diverged
//! run never wins); then every seed runs at that rate, and the arms are compared at their
//! own best rates (the table and curves of [`super::convergence`]).
//!
//! The results, figures and section are rewritten after every finished run, so that an
//! experiment stopped part-way has its finished runs reported and says what is left; the same
//! command continues it.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use super::figure::{BandFigure, Point, Series, XScale};
use super::pretrain::{self, arm_name, run_one, Prepared, RunRecord, RunSpec};
use super::summary::{curves_figure, summarise, table, verdict, Results};
use super::{command_line, write_json, write_section};
use roformer_runner::output::outln;
use roformer_runner::plot;
use roformer_runner::train::masked_lm::Position;

/// One cell of the sweep: an arm at a rate, seed 0.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Cell {
    /// The arm.
    pub arm: String,
    /// The peak learning rate.
    pub lr: f64,
    /// The final validation loss (`None`: diverged).
    pub final_loss: Option<f64>,
    /// The final validation accuracy (`None`: diverged).
    pub final_accuracy: Option<f64>,
    /// The step whose loss or gradient was not finite, if the run diverged.
    pub diverged_at: Option<u64>,
    /// Wall time of the run, minutes.
    pub minutes: f64,
}

/// An arm's best rate: the lowest final validation loss of its sweep.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Best {
    /// The arm.
    pub arm: String,
    /// The rate.
    pub lr: f64,
    /// Seed 0's final validation loss at that rate.
    pub final_loss: f64,
}

/// What `--sweep` writes to `results.json`.
#[derive(Debug, Serialize)]
pub struct SweepResults {
    /// The command that produced them.
    pub command: String,
    /// `softmax` or `linear`.
    pub attention: String,
    /// The precision of the matrix products.
    pub precision: String,
    /// The rates swept.
    pub rates: Vec<f64>,
    /// Seeds at each arm's best rate.
    pub seeds: u64,
    /// The finished sweep runs (seed 0), by arm then rate.
    pub sweep: Vec<Cell>,
    /// Each arm whose sweep finished, with its best rate.
    pub best: Vec<Best>,
    /// The runs not finished yet (directory names in `runs/`, or what is still to be planned).
    pub pending: Vec<String>,
    /// The arms at their best rates, over the finished seeds (`None` until the reference arm's
    /// sweep has finished).
    pub best_against_best: Option<Results>,
    /// Total wall time of the finished runs, minutes.
    pub minutes: f64,
}

/// The directory name of `arm` at rate `lr`, seed `seed`: `rotary-lr3e-3-s0`.
pub fn run_name(arm: Position, lr: f64, seed: u64) -> String {
    format!("{}-lr{lr:e}-s{seed}", arm_name(arm))
}

/// The sweep cell of a finished run.
fn cell(r: &RunRecord, lr: f64) -> Cell {
    let last = r.final_eval();
    Cell {
        arm: r.arm.clone(),
        lr,
        final_loss: last.map(|e| e.1),
        final_accuracy: last.map(|e| e.2),
        diverged_at: r.diverged_at,
        minutes: r.seconds / 60.0,
    }
}

/// The best rate of `arm` among `cells`, once all of `rates` have a cell for it: the lowest
/// final loss (`None` when the sweep is unfinished or every rate diverged).
pub fn best_rate(cells: &[Cell], arm: &str, rates: &[f64]) -> Option<Best> {
    let mine: Vec<&Cell> = cells.iter().filter(|c| c.arm == arm).collect();
    if rates.iter().any(|&lr| !mine.iter().any(|c| c.lr == lr)) {
        return None;
    }
    mine.iter()
        .filter_map(|c| c.final_loss.map(|loss| (c.lr, loss)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(lr, final_loss)| Best {
            arm: arm.into(),
            lr,
            final_loss,
        })
}

/// Runs the sweep and the seeds at the best rates, skipping finished runs; `report` is called
/// with the results so far after every run (and once at the start).
///
/// # Errors
/// A run's errors, a stop by Ctrl-C, file errors, and `report`'s.
pub fn run(
    args: &pretrain::Args,
    prepared: &Prepared,
    (arms, reference): (&[Position], Position),
    stop: &AtomicBool,
    report: &dyn Fn(&SweepResults) -> anyhow::Result<()>,
) -> anyhow::Result<SweepResults> {
    let total =
        arms.len() * (args.settings.sweep.len() + args.settings.seeds.saturating_sub(1) as usize);
    let mut records = Vec::new();
    let mut results = gather(args, prepared, (arms, reference), &records)?;
    report(&results)?;
    // Runs (arm, lr, seed), then gathers and reports everything so far.
    let step = |records: &mut Vec<_>, arm: Position, lr: f64, seed: u64| {
        let spec = RunSpec {
            name: run_name(arm, lr, seed),
            arm,
            seed,
            lr,
        };
        let index = (records.len() + 1, total);
        records.push(run_one(args, prepared, &spec, index, stop)?);
        let results = gather(args, prepared, (arms, reference), records)?;
        report(&results)?;
        anyhow::Ok(results)
    };
    for &arm in arms {
        for &lr in &args.settings.sweep {
            results = step(&mut records, arm, lr, 0)?;
        }
    }
    for &arm in arms {
        let Some(best) = best_rate(&results.sweep, arm_name(arm), &args.settings.sweep) else {
            continue;
        };
        for seed in 1..args.settings.seeds {
            results = step(&mut records, arm, best.lr, seed)?;
        }
    }
    Ok(results)
}

/// The results of the finished runs among `records` (plus the finished runs on disk that
/// this invocation has not reached yet, so that a report is never behind the last one).
fn gather(
    args: &pretrain::Args,
    prepared: &Prepared,
    (arms, reference): (&[Position], Position),
    records: &[RunRecord],
) -> anyhow::Result<SweepResults> {
    let mut finished: Vec<RunRecord> = records.to_vec();
    let mut pending = Vec::new();
    let mut sweep = Vec::new();
    let mut best = Vec::new();
    for &arm in arms {
        for &lr in &args.settings.sweep {
            match find_or_read(prepared, &mut finished, &run_name(arm, lr, 0))? {
                Some(r) => sweep.push(cell(&r, lr)),
                None => pending.push(run_name(arm, lr, 0)),
            }
        }
        let Some(b) = best_rate(&sweep, arm_name(arm), &args.settings.sweep) else {
            if args.settings.seeds > 1 {
                pending.push(format!(
                    "{}: seeds 1-{} at its best rate (sweep unfinished or diverged)",
                    arm_name(arm),
                    args.settings.seeds - 1
                ));
            }
            continue;
        };
        for seed in 1..args.settings.seeds {
            let name = run_name(arm, b.lr, seed);
            if find_or_read(prepared, &mut finished, &name)?.is_none() {
                pending.push(name);
            }
        }
        best.push(b);
    }
    let best_against_best = best_summary(&finished, &best, (arms, reference), prepared)?;
    // `+ 0.0`: an empty sum is -0.
    let minutes = finished.iter().map(|r| r.seconds).sum::<f64>() / 60.0 + 0.0;
    Ok(SweepResults {
        command: command_line(),
        attention: prepared.attention.into(),
        precision: args.precision.name().into(),
        rates: args.settings.sweep.clone(),
        seeds: args.settings.seeds,
        sweep,
        best,
        pending,
        best_against_best,
        minutes,
    })
}

/// The finished run named `name`: from `finished`, or read from its `done.json` (and added
/// to `finished`); `None` when it has not finished.
fn find_or_read(
    prepared: &Prepared,
    finished: &mut Vec<RunRecord>,
    name: &str,
) -> anyhow::Result<Option<RunRecord>> {
    let dir = prepared.out.join("runs").join(name);
    if let Some(r) = finished.iter().find(|r| r.dir == dir) {
        return Ok(Some(r.clone()));
    }
    if !super::done::is_done(&dir) {
        return Ok(None);
    }
    let r: RunRecord = super::done::read_done(&dir)?;
    finished.push(r.clone());
    Ok(Some(r))
}

/// The arms with a best rate, over their finished seeds at it (diverged seeds left out), in
/// the order of `arms`; `None` until the reference arm has a best rate.
fn best_summary(
    finished: &[RunRecord],
    best: &[Best],
    (arms, reference): (&[Position], Position),
    prepared: &Prepared,
) -> anyhow::Result<Option<Results>> {
    if !best.iter().any(|b| b.arm == arm_name(reference)) {
        return Ok(None);
    }
    let at_best: Vec<RunRecord> = finished
        .iter()
        .filter(|r| {
            r.diverged_at.is_none() && best.iter().any(|b| b.arm == r.arm && r.lr == Some(b.lr))
        })
        .cloned()
        .collect();
    let mut with_best: Vec<Position> = arms
        .iter()
        .copied()
        .filter(|&a| best.iter().any(|b| b.arm == arm_name(a)))
        .collect();
    with_best.retain(|&a| at_best.iter().any(|r| r.arm == arm_name(a)));
    let mut sorted = at_best;
    sorted.sort_by(|a, b| (a.seed, &a.arm).cmp(&(b.seed, &b.arm)));
    summarise(&sorted, &with_best, reference, prepared.attention).map(Some)
}

/// The sweep figure: seed 0's final validation loss against the rate (log x), one line per
/// arm; diverged runs have no point.
pub fn sweep_figure(results: &SweepResults, title: &str) -> BandFigure {
    let mut series: Vec<Series> = Vec::new();
    for c in &results.sweep {
        let Some(loss) = c.final_loss else { continue };
        let point = Point {
            x: c.lr,
            mean: loss,
            min: loss,
            max: loss,
        };
        match series.iter_mut().find(|s| s.name == c.arm) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name: c.arm.clone(),
                points: vec![point],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    BandFigure {
        title: title.into(),
        x_desc: "peak learning rate (log scale)".into(),
        y_desc: "final validation MLM loss, seed 0".into(),
        x_scale: XScale::Log10,
        series,
        reference: None,
        legend: plotters::prelude::SeriesLabelPosition::UpperLeft,
    }
}

/// The sweep table: one row per arm, one column per rate, seed 0's final validation loss
/// (the best in bold; `diverged at N`; `-` not run yet).
pub fn sweep_table(results: &SweepResults, arms: &[Position]) -> String {
    let heads: Vec<String> = results.rates.iter().map(|r| format!("{r:e}")).collect();
    let mut s = format!(
        "| arm | {} | best |\n|---|{}---|\n",
        heads.join(" | "),
        "---:|".repeat(heads.len())
    );
    for &arm in arms {
        let name = arm_name(arm);
        let best = results.best.iter().find(|b| b.arm == name);
        let cells: Vec<String> = results
            .rates
            .iter()
            .map(|&lr| {
                let c = results.sweep.iter().find(|c| c.arm == name && c.lr == lr);
                match c {
                    None => "-".into(),
                    Some(Cell {
                        diverged_at: Some(step),
                        ..
                    }) => format!("diverged at {step}"),
                    Some(c) => {
                        let loss = format!("{:.3}", c.final_loss.unwrap_or(f64::NAN));
                        if best.is_some_and(|b| b.lr == lr) {
                            format!("**{loss}**")
                        } else {
                            loss
                        }
                    }
                }
            })
            .collect();
        let best = best.map_or("-".into(), |b| format!("{:e}", b.lr));
        s += &format!("| {name} | {} | {best} |\n", cells.join(" | "));
    }
    s
}

/// How the section names the experiment: its heading, the figures' titles and file stems.
pub struct Naming {
    /// The section's heading (`### 1. ...`).
    pub heading: &'static str,
    /// The stem of the figures' files (`convergence` gives `convergence-sweep.png` and
    /// `convergence.png`).
    pub stem: &'static str,
}

/// Writes `results.json`, the two figures and `section.md` of `results` into `out`.
///
/// # Errors
/// File or drawing errors.
pub fn write_report(
    args: &pretrain::Args,
    out: &Path,
    naming: &Naming,
    arms: &[Position],
    results: &SweepResults,
) -> anyhow::Result<()> {
    write_json(out, "results.json", results)?;
    let sweep_path = out.join(format!("{}-sweep.png", naming.stem));
    plot::save(
        &sweep_figure(results, "Final validation loss by learning rate (seed 0)"),
        &sweep_path,
        (900, 560),
    )?;
    let curves_path = out.join(format!("{}.png", naming.stem));
    let best_part = match &results.best_against_best {
        Some(best) => {
            plot::save(
                &curves_figure(best, "MLM validation loss, each arm at its best rate"),
                &curves_path,
                (900, 560),
            )?;
            best_section(results, best, &curves_path)
        }
        None => "Best against best: not yet (the reference arm's sweep is unfinished).\n".into(),
    };
    let section = format!(
        "{}\n\n```sh\n{}\n```\n\n{}\n\n**Sweep** (seed 0, final validation loss at step {}; \
         best in bold):\n\n{}\n![final loss by rate]({})\n\n{}\n{}",
        naming.heading,
        results.command,
        setup(args, results),
        args.settings.steps,
        sweep_table(results, arms),
        sweep_path.display(),
        best_part,
        left(results),
    );
    write_section(out, &section)?;
    Ok(())
}

/// The model, budget and precision of the runs.
fn setup(args: &pretrain::Args, results: &SweepResults) -> String {
    format!(
        "Settings: {}. Model: hidden {}, {} layers, {} heads, intermediate {}, vocabulary {} \
         characters, {} attention; {} steps of {}x{} tokens, AdamW (warm-up {}, linear decay, \
         weight decay {}, clipping at {}), dropout 0, {} matrix products. Each arm at the peak rates {} on \
         seed 0; its best rate (lowest final validation loss) then on seeds 0-{}. {} runs \
         finished, {:.0} minutes of training in all.",
        args.cited,
        args.settings.hidden,
        args.settings.layers,
        args.settings.heads,
        4 * args.settings.hidden,
        args.settings.vocab_size,
        results.attention,
        args.settings.steps,
        args.settings.batch,
        args.settings.seq_len,
        args.settings.warmup,
        args.settings.weight_decay,
        args.settings.max_grad_norm,
        results.precision,
        results
            .rates
            .iter()
            .map(|r| format!("{r:e}"))
            .collect::<Vec<_>>()
            .join(", "),
        args.settings.seeds.saturating_sub(1),
        results.sweep.len()
            + results.best_against_best.as_ref().map_or(0, |b| b
                .runs
                .iter()
                .filter(|r| r.seed > 0)
                .count()),
        results.minutes,
    )
}

/// The best-against-best part of the section: rates, table, figure, verdicts.
fn best_section(results: &SweepResults, best: &Results, figure: &Path) -> String {
    let rates: Vec<String> = results
        .best
        .iter()
        .map(|b| format!("{} {:e}", b.arm, b.lr))
        .collect();
    let verdicts: Vec<String> = best
        .arms
        .iter()
        .filter(|a| a.arm != "rotary")
        .map(|a| {
            format!(
                "- Rotary against {}: {}.",
                a.arm,
                verdict(best, "rotary", &a.arm)
            )
        })
        .collect();
    format!(
        "**Best against best** (best rates: {}):\n\n{}\n![validation loss, best rates]({})\n\n{}\n",
        rates.join(", "),
        table(best),
        figure.display(),
        verdicts.join("\n"),
    )
}

/// Runs a whole `--sweep` experiment into `out` with `attention`, `arms` against the
/// reference arm `absolute`, reporting after every run, and prints the tables.
///
/// # Errors
/// A run's errors, a stop by Ctrl-C, file errors.
pub fn experiment(
    args: &pretrain::Args,
    (out, attention): (&Path, &'static str),
    arms: &[Position],
    naming: &Naming,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let prepared = pretrain::prepare(args, out, attention)?;
    let report = |r: &SweepResults| write_report(args, out, naming, arms, r);
    let results = run(args, &prepared, (arms, Position::Absolute), stop, &report)?;
    outln!("{}", sweep_table(&results, arms))?;
    if let Some(best) = &results.best_against_best {
        outln!("{}", table(best))?;
    }
    outln!("section: {}", out.join("section.md").display())?;
    Ok(())
}

/// What is left to run, if anything.
fn left(results: &SweepResults) -> String {
    if results.pending.is_empty() {
        return String::new();
    }
    format!(
        "\n**Not finished yet** ({}; the same command continues): {}.\n",
        results.pending.len(),
        results.pending.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(arm: &str, lr: f64, loss: Option<f64>) -> Cell {
        Cell {
            arm: arm.into(),
            lr,
            final_loss: loss,
            final_accuracy: loss.map(|_| 0.1),
            diverged_at: loss.is_none().then_some(7),
            minutes: 1.0,
        }
    }

    #[test]
    fn the_best_rate_is_the_lowest_finished_loss_once_the_sweep_is_complete() {
        let rates = [1e-3, 3e-3, 1e-2];
        let cells = vec![
            cell("rotary", 1e-3, Some(6.0)),
            cell("rotary", 3e-3, Some(5.5)),
            cell("rotary", 1e-2, None),
            cell("absolute", 1e-3, Some(6.5)),
            cell("absolute", 3e-3, Some(7.0)),
        ];
        let best = best_rate(&cells, "rotary", &rates).unwrap();
        assert_eq!((best.lr, best.final_loss), (3e-3, 5.5));
        assert_eq!(best_rate(&cells, "absolute", &rates), None, "1e-2 not run");
        let all_diverged = vec![cell("t5", 1e-3, None), cell("t5", 3e-3, None)];
        assert_eq!(best_rate(&all_diverged, "t5", &rates[..2]), None);
    }

    #[test]
    fn run_names_carry_the_rate() {
        assert_eq!(run_name(Position::Rotary, 3e-4, 0), "rotary-lr3e-4-s0");
        assert_eq!(run_name(Position::T5, 1e-2, 2), "t5-lr1e-2-s2");
    }
}
