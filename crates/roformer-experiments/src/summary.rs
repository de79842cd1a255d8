//! What the pre-training experiments report from their runs: each arm's final loss and curve
//! over the seeds, the table, the curves figure and the verdict of one arm against another
//! (shared by `convergence`, `linear` and their sweeps).

use anyhow::bail;
use serde::Serialize;

use super::command_line;
use super::figure::{BandFigure, Point, Series, XScale};
use super::pretrain::{arm_name, RunRecord};
use super::stats::Spread;
use roformer_runner::train::masked_lm::Position;

/// One arm's results.
#[derive(Debug, Serialize)]
pub struct ArmResult {
    /// The arm.
    pub arm: String,
    /// Final validation loss over seeds.
    pub final_loss: Spread,
    /// Final validation accuracy (masked tokens, punctuation included) over seeds.
    pub final_accuracy: Spread,
    /// Per seed: the first evaluated step whose loss is at most the reference's mean final
    /// loss (`None`: not reached).
    pub steps_to_reference: Vec<Option<u64>>,
    /// The validation-loss curve: (step, mean, min, max) over seeds.
    pub curve: Vec<(u64, f64, f64, f64)>,
    /// Wall time per run, seconds.
    pub seconds: Vec<f64>,
}

/// An experiment's results (`results.json`).
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command that produced them.
    pub command: String,
    /// `softmax` or `linear`.
    pub attention: String,
    /// The reference arm and its mean final loss.
    pub reference: (String, f64),
    /// The arms.
    pub arms: Vec<ArmResult>,
    /// The runs (directories, evaluations).
    pub runs: Vec<RunRecord>,
}

/// Summarises the runs of `arms` against the `reference` arm (diverged runs left out).
///
/// # Errors
/// An arm without finished runs, or a run without evaluation.
pub fn summarise(
    records: &[RunRecord],
    arms: &[Position],
    reference: Position,
    attention: &str,
) -> anyhow::Result<Results> {
    let runs_of = |arm: &str| -> Vec<&RunRecord> {
        records
            .iter()
            .filter(|r| r.arm == arm && r.diverged_at.is_none())
            .collect()
    };
    let final_of = |r: &RunRecord| -> anyhow::Result<(f64, f64)> {
        match r.evals.last() {
            Some(&(_, loss, acc)) => Ok((loss, acc)),
            None => bail!("{}: no validation loss recorded", r.dir.display()),
        }
    };
    let reference_losses = runs_of(arm_name(reference))
        .into_iter()
        .map(|r| final_of(r).map(|f| f.0))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let Some(reference_loss) = Spread::of(reference_losses) else {
        bail!("no finished {} run", arm_name(reference));
    };
    let mut results = Vec::new();
    for &arm in arms {
        let runs = runs_of(arm_name(arm));
        let finals = runs
            .iter()
            .map(|r| final_of(r))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (Some(final_loss), Some(final_accuracy)) = (
            Spread::of(finals.iter().map(|f| f.0).collect()),
            Spread::of(finals.iter().map(|f| f.1).collect()),
        ) else {
            bail!("no finished {} run", arm_name(arm));
        };
        let steps_to_reference = runs
            .iter()
            .map(|r| {
                r.evals
                    .iter()
                    .find(|e| e.1 <= reference_loss.mean)
                    .map(|e| e.0)
            })
            .collect();
        let steps: Vec<u64> = runs[0].evals.iter().map(|e| e.0).collect();
        let curve = steps
            .iter()
            .filter_map(|&s| {
                let at: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.evals.iter().find(|e| e.0 == s).map(|e| e.1))
                    .collect();
                (at.len() == runs.len())
                    .then(|| Spread::of(at))
                    .flatten()
                    .map(|sp| (s, sp.mean, sp.min, sp.max))
            })
            .collect();
        results.push(ArmResult {
            arm: arm_name(arm).into(),
            final_loss,
            final_accuracy,
            steps_to_reference,
            curve,
            seconds: runs.iter().map(|r| r.seconds).collect(),
        });
    }
    Ok(Results {
        command: command_line(),
        attention: attention.into(),
        reference: (arm_name(reference).into(), reference_loss.mean),
        arms: results,
        runs: records.to_vec(),
    })
}

/// The curves figure of `results`.
pub fn curves_figure(results: &Results, title: &str) -> BandFigure {
    BandFigure {
        title: title.into(),
        x_desc: "step".into(),
        y_desc: "validation MLM loss".into(),
        x_scale: XScale::Linear,
        series: results
            .arms
            .iter()
            .map(|a| Series {
                name: a.arm.clone(),
                points: a
                    .curve
                    .iter()
                    .map(|&(s, mean, min, max)| Point {
                        x: s as f64,
                        mean,
                        min,
                        max,
                    })
                    .collect(),
            })
            .collect(),
        reference: None,
        legend: plotters::prelude::SeriesLabelPosition::UpperRight,
    }
}

/// The Markdown table of `results`.
pub fn table(results: &Results) -> String {
    let (reference, target) = &results.reference;
    let mut s = format!(
        "| arm | final validation loss, mean ± std (min–max) | final accuracy | steps to reach \
         {reference}'s final loss {target:.3}, per seed | minutes per run |\n|---|---|---|---|---|\n"
    );
    for a in &results.arms {
        let steps: Vec<String> = a
            .steps_to_reference
            .iter()
            .map(|s| s.map_or("not reached".into(), |s| s.to_string()))
            .collect();
        let minutes = a.seconds.iter().sum::<f64>() / a.seconds.len().max(1) as f64 / 60.0;
        s += &format!(
            "| {} | {} | {} | {} | {minutes:.1} |\n",
            a.arm,
            a.final_loss.show(3),
            a.final_accuracy.show(3),
            steps.join(", ")
        );
    }
    s
}

/// Whether `arm` beat `other` on final loss: **held** when every seed of `arm` ends below
/// every seed of `other`, **held in part** when only the mean is below, **not held**
/// otherwise.
pub fn verdict(results: &Results, arm: &str, other: &str) -> String {
    let find = |name: &str| results.arms.iter().find(|a| a.arm == name);
    let (Some(a), Some(b)) = (find(arm), find(other)) else {
        return format!("{arm} or {other} is missing");
    };
    let gap = b.final_loss.mean - a.final_loss.mean;
    if a.final_loss.max < b.final_loss.min {
        format!(
            "{arm} ends {gap:.3} nats below {other} (mean), and every {arm} seed is below every \
             {other} seed: **held** at this scale"
        )
    } else if gap > 0.0 {
        format!(
            "{arm} ends {gap:.3} nats below {other} on the mean, but the seeds overlap: \
             **held in part** at this scale"
        )
    } else {
        format!(
            "{arm} ends {:.3} nats *above* {other}: **not held** at this scale",
            -gap
        )
    }
}
