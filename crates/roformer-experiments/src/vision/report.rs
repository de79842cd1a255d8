//! The experiment's outputs: `results.json` (every number), `accuracy.png` (test top-1 against
//! the image side, one line per arm and reading) and `section.md` (its part of
//! EXPERIMENTS.md: the settings file it ran with, the tables, and a verdict on each claim).
//!
//! A verdict compares two sets of seeds by their ranges: "holds" when every seed of the first
//! is above every seed of the second, "reversed" when every one is below, "not resolved"
//! when the ranges overlap.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::SeriesLabelPosition;
use roformer::vision::{Coordinates, PositionKind, VisionConfig};
use serde::Serialize;

use super::accuracy::Cell;
use super::plan::{conventions, Plan};
use super::properties::ArmProperties;
use super::runs::{Trained, TRAIN_SIDE};
use crate::figure::{BandFigure, Point, Series, XScale};
use crate::stats::Spread;
use roformer_runner::plot;

/// One run as `results.json` lists it.
#[derive(Debug, Serialize)]
struct RunRecord {
    name: String,
    arm: PositionKind,
    lr: f64,
    seed: u64,
    validation_top1: f64,
    seconds: f64,
}

/// `results.json`.
#[derive(Debug, Serialize)]
struct Results<'a> {
    command: &'a str,
    settings: &'a Plan,
    sweep: Vec<RunRecord>,
    finals: Vec<RunRecord>,
    test: &'a [Cell],
    properties: &'a [ArmProperties],
}

fn records(runs: &[Trained]) -> Vec<RunRecord> {
    runs.iter()
        .map(|t| RunRecord {
            name: t.run.name(),
            arm: t.run.arm,
            lr: t.run.lr,
            seed: t.run.seed,
            validation_top1: t.done.validation_top1,
            seconds: t.done.seconds,
        })
        .collect()
}

/// Writes the three outputs into `out`; returns their paths.
///
/// # Errors
/// File and drawing errors.
pub fn write(
    out: &Path,
    cited: &str,
    (plan, model): (&Plan, &VisionConfig),
    (sweep, finals): (&[Trained], &[Trained]),
    (test, properties): (&[Cell], &[ArmProperties]),
    command: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    let results = Results {
        command,
        settings: plan,
        sweep: records(sweep),
        finals: records(finals),
        test,
        properties,
    };
    let json = super::super::write_json(out, "results.json", &results)?;
    let figure = out.join("accuracy.png");
    plot::save(&accuracy_figure(plan, test), &figure, (900, 560))?;
    let mut text = String::new();
    header(&mut text, cited, (plan, model), command);
    sweep_table(&mut text, plan, sweep);
    test_table(&mut text, plan, test);
    properties_table(&mut text, properties);
    verdicts(&mut text, plan, test);
    let section = super::super::write_section(out, &text)?;
    Ok(vec![json, figure, section])
}

/// `rope_axial, indices` etc.: an arm and, for the rotary kinds, its reading.
fn label(arm: PositionKind, coordinates: Coordinates) -> String {
    if !arm.is_rotary() {
        return arm.as_str().to_string();
    }
    let reading = match coordinates {
        Coordinates::Indices => "indices",
        Coordinates::Interpolated => "interpolated",
        Coordinates::Normalised => "normalised",
    };
    format!("{}, {reading}", arm.as_str())
}

/// The test top-1 of every seed of `arm` read with `coordinates` at `side`, in percent.
fn seeds_at(test: &[Cell], arm: PositionKind, coordinates: Coordinates, side: usize) -> Vec<f64> {
    test.iter()
        .filter(|c| c.arm == arm && c.coordinates == coordinates && c.side == side)
        .map(|c| 100.0 * c.top1)
        .collect()
}

/// Per seed, the mean test top-1 (percent) over the sides larger than the training side.
fn larger_sides(plan: &Plan, test: &[Cell], arm: PositionKind, reading: Coordinates) -> Vec<f64> {
    let larger: Vec<usize> = plan
        .eval_sides
        .iter()
        .copied()
        .filter(|&s| s > TRAIN_SIDE)
        .collect();
    let mut per_seed = Vec::new();
    for &seed in &plan.seeds {
        let values: Vec<f64> = test
            .iter()
            .filter(|c| c.arm == arm && c.coordinates == reading && c.seed == seed)
            .filter(|c| larger.contains(&c.side))
            .map(|c| 100.0 * c.top1)
            .collect();
        if !values.is_empty() {
            per_seed.push(values.iter().sum::<f64>() / values.len() as f64);
        }
    }
    per_seed
}

fn accuracy_figure(plan: &Plan, test: &[Cell]) -> BandFigure {
    let mut series = Vec::new();
    for &arm in &plan.arms {
        for reading in conventions(arm) {
            let points: Vec<Point> = (plan.eval_sides.iter())
                .filter_map(|&side| {
                    let s = Spread::of(seeds_at(test, arm, reading, side))?;
                    Some(Point {
                        x: side as f64,
                        mean: s.mean,
                        min: s.min,
                        max: s.max,
                    })
                })
                .collect();
            series.push(Series {
                name: label(arm, reading),
                points,
            });
        }
    }
    BandFigure {
        title: "Fashion-MNIST test top-1, trained at 28 x 28".into(),
        x_desc: "image side (pixels; patches of 4)".into(),
        y_desc: "test top-1 (%), mean and range over seeds".into(),
        x_scale: XScale::Linear,
        series,
        reference: Some((10.0, "chance".into())),
        legend: SeriesLabelPosition::LowerRight,
    }
}

fn header(text: &mut String, cited: &str, (plan, model): (&Plan, &VisionConfig), command: &str) {
    let images = plan.steps * plan.batch_size as u64;
    let _ = writeln!(
        text,
        "Command: `{command}`. Settings: {cited}. The model: a ViT of width {}, {} layers, {} \
         heads, patches of {} (a 7 x 7 grid at 28 x 28), a CLS token and {} registers, each arm \
         replacing its position kind. Every run trains {} steps of {} images at 28 x 28 \
         ({images} images, about {:.2} epochs of the 55,000), with no augmentation; the rotary \
         arms on the seed's integer patch indices. Each arm's rate is the best of its sweep by \
         validation top-1 (5,000 images cut from the training set); the test set (the first \
         {} of its images) only reports.\n",
        model.hidden_size,
        model.num_hidden_layers,
        model.num_attention_heads,
        model.patch_size,
        model.num_register_tokens,
        plan.steps,
        plan.batch_size,
        images as f64 / 55_000.0,
        plan.test_images,
    );
}

fn sweep_table(text: &mut String, plan: &Plan, sweep: &[Trained]) {
    let _ = writeln!(
        text,
        "**Sweep** (validation top-1 %, seed {}):\n",
        plan.sweep_seed
    );
    let heads: Vec<String> = plan.rates.iter().map(|r| format!("{r:e}")).collect();
    let _ = writeln!(text, "| arm | {} |", heads.join(" | "));
    let _ = writeln!(text, "|---|{}", "---:|".repeat(plan.rates.len()));
    for &arm in &plan.arms {
        let best = super::runs::best_rate(sweep, arm);
        let cells: Vec<String> = (plan.rates.iter())
            .map(|&lr| {
                let run = sweep.iter().find(|t| t.run.arm == arm && t.run.lr == lr);
                match run {
                    Some(t) if Some(lr) == best => {
                        format!("**{:.2}**", 100.0 * t.done.validation_top1)
                    }
                    Some(t) => format!("{:.2}", 100.0 * t.done.validation_top1),
                    None => "-".into(),
                }
            })
            .collect();
        let _ = writeln!(text, "| {} | {} |", arm.as_str(), cells.join(" | "));
    }
    text.push('\n');
}

fn test_table(text: &mut String, plan: &Plan, test: &[Cell]) {
    let _ = writeln!(
        text,
        "**Test top-1 %** at each side, mean ± standard deviation over seeds {:?} (range):\n",
        plan.seeds
    );
    let heads: Vec<String> = plan.eval_sides.iter().map(ToString::to_string).collect();
    let _ = writeln!(text, "| arm, reading | {} |", heads.join(" | "));
    let _ = writeln!(text, "|---|{}", "---:|".repeat(plan.eval_sides.len()));
    for &arm in &plan.arms {
        for reading in conventions(arm) {
            let cells: Vec<String> = (plan.eval_sides.iter())
                .map(|&side| {
                    Spread::of(seeds_at(test, arm, reading, side)).map_or("-".into(), |s| s.show(2))
                })
                .collect();
            let _ = writeln!(text, "| {} | {} |", label(arm, reading), cells.join(" | "));
        }
    }
    text.push_str("\n![test top-1 against the image side](accuracy.png)\n\n");
}

fn properties_table(text: &mut String, properties: &[ArmProperties]) {
    text.push_str(
        "**The trained rotations** (each arm's sweep-seed model): the relativity error is the \
         widest spread of the scores of patch pairs at one offset, as a share of the range of \
         all scores (0: the scores depend on the offset alone); the separation is the smallest \
         RMS distance between the rotations of two patches (0: two patches share a rotation, \
         and the position cannot be read back), over all heads and for the weakest head; \
         below/right is the distance to the patch below over that to the patch to the right.\n\n",
    );
    text.push_str(
        "| arm | run | side | reading | relativity error | separation | weakest head | \
         recovered | below/right |\n|---|---|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for arm in properties {
        for g in &arm.grids {
            let rot = g.rotations.as_ref();
            let show =
                |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {:.1e} | {} | {} | {} | {} |",
                arm.arm.as_str(),
                arm.run,
                g.side,
                label(arm.arm, g.coordinates)
                    .split(", ")
                    .nth(1)
                    .unwrap_or("-"),
                g.relativity_error,
                show(rot.map(|r| r.separation), 3),
                show(rot.map(|r| r.weakest_head), 3),
                show(rot.map(|r| 100.0 * r.recovered), 1),
                show(rot.and_then(|r| r.neighbour_ratio), 2),
            );
        }
    }
    text.push('\n');
}

/// "holds", "reversed" or "not resolved" for seeds `a` against seeds `b`.
fn verdict(a: &Spread, b: &Spread) -> &'static str {
    if a.min > b.max {
        "holds"
    } else if a.max < b.min {
        "reversed"
    } else {
        "not resolved (the seeds' ranges overlap)"
    }
}

/// `"A 84.10 against B 83.20: holds"`, or `None` when either side has no seeds.
fn compare((name_a, a): (&str, Vec<f64>), (name_b, b): (&str, Vec<f64>)) -> Option<String> {
    let (a, b) = (Spread::of(a)?, Spread::of(b)?);
    Some(format!(
        "{name_a} {:.2} against {name_b} {:.2}: {}",
        a.mean,
        b.mean,
        verdict(&a, &b)
    ))
}

/// One verdict line, `- claim: comparisons`, or `- claim: not measured (an arm is missing)`.
fn verdict_line(text: &mut String, claim: &str, comparisons: Vec<Option<String>>) {
    let found: Vec<String> = comparisons.into_iter().flatten().collect();
    let body = if found.is_empty() {
        "not measured (an arm it needs is not in the settings)".to_string()
    } else {
        found.join("; ")
    };
    let _ = writeln!(text, "- {claim}: {body}.");
}

fn verdicts(text: &mut String, plan: &Plan, test: &[Cell]) {
    use Coordinates::{Indices, Interpolated};
    use PositionKind::{Absolute, RopeAxial, RopeFlat, RopeMixed};
    text.push_str(
        "**Verdicts**, by the seeds' ranges: a claim holds when every seed of the first set is \
         above every seed of the second, is reversed when every one is below, and is not \
         resolved when the ranges overlap. Top-1 in percent; \"above 28\" is the mean over the \
         sides larger than the training side.\n\n",
    );
    let at28 = |arm| seeds_at(test, arm, Indices, TRAIN_SIDE);
    let above = |arm, reading| larger_sides(plan, test, arm, reading);
    verdict_line(
        text,
        "(a) 2D beats the flattened index (at 28)",
        vec![
            compare(("axial", at28(RopeAxial)), ("flat", at28(RopeFlat))),
            compare(("mixed", at28(RopeMixed)), ("flat", at28(RopeFlat))),
        ],
    );
    let mut retention = Vec::new();
    for arm in [RopeAxial, RopeMixed] {
        for reading in [Indices, Interpolated] {
            let name = label(arm, reading);
            retention.push(compare(
                (&name, above(arm, reading)),
                ("absolute (bicubic)", above(Absolute, Indices)),
            ));
        }
    }
    verdict_line(
        text,
        "(b) RoPE keeps more at larger images than absolute positions (above 28)",
        retention,
    );
    let mut mixed = vec![compare(
        ("mixed at 28", at28(RopeMixed)),
        ("axial", at28(RopeAxial)),
    )];
    for reading in [Indices, Interpolated] {
        let (m, a) = (label(RopeMixed, reading), label(RopeAxial, reading));
        mixed.push(compare(
            (&format!("{m}, above 28"), above(RopeMixed, reading)),
            (&a, above(RopeAxial, reading)),
        ));
    }
    verdict_line(text, "(c) mixed against axial", mixed);
}
