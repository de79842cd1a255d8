//! The report of `experiment length`: the table, the figure, and what the numbers say.

use std::path::Path;

use serde::Serialize;

use crate::figure::{BandFigure, Point, Series, XScale};
use crate::stats::Spread;

/// One row at one length.
#[derive(Debug, Serialize)]
pub struct Cell {
    /// The block length.
    pub length: usize,
    /// The scaling's factor `s` at this length (`None` without scaling).
    pub factor: Option<f64>,
    /// Validation loss over seeds (`None`: past the absolute table).
    pub loss: Option<Spread>,
    /// Validation accuracy over seeds.
    pub accuracy: Option<Spread>,
}

/// One row: an arm's models as trained, or a rotary arm's under a scaling.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The arm.
    pub arm: String,
    /// The scaling (`pi`, `ntk`, `dynamic-ntk`, `yarn`; `None`: as trained).
    pub scaling: Option<String>,
    /// Its cells by length.
    pub cells: Vec<Cell>,
}

impl Row {
    /// The row's name: the arm, with its scaling (`rotary+yarn`).
    pub fn name(&self) -> String {
        match &self.scaling {
            Some(s) => format!("{}+{s}", self.arm),
            None => self.arm.clone(),
        }
    }
}

/// `results.json`.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command.
    pub command: String,
    /// The training length of the models.
    pub trained_at: Option<usize>,
    /// Seeds per arm (the most any arm has).
    pub seeds: usize,
    /// Rows by arm, each arm's scalings after it.
    pub rows: Vec<Row>,
}

/// A training length for the report (`?` when unknown).
fn trained_at_text(trained_at: Option<usize>) -> String {
    trained_at.map_or("?".into(), |t| t.to_string())
}

/// `section.md`: the command, the setting, the table, the figure and the findings.
pub fn section(results: &Results, (tokens, cited): (usize, &str), figure_path: &Path) -> String {
    let missing = missing_arms(results);
    format!(
        "### 2. Inputs longer than trained on\n\n```sh\n{}\n```\n\n\
         Settings: {cited}.\n\n\
         The models of experiment 1 (trained on {}-token blocks), on the validation poems \
         packed into blocks of each length, about {tokens} tokens per length, the same blocks \
         and masks for every model. Rotary models also run under each inference-time scaling \
         (`roformer::rope_scaling`): `pi` (position interpolation, frequencies / s), `ntk` \
         (NTK-aware, base 10000 s^(d/(d-2))), `yarn` (YaRN, attention factor 0.1 ln s + 1), \
         each with s = max(length / {}, 1), and `dynamic-ntk` (transformers' dynamic NTK with \
         factor 1: the base grows with the block's length n past the training length, which \
         for blocks of one length is NTK-aware at s = n / {}). At s = 1 a scaling is no \
         scaling. `n/a`: past the absolute table.\n\n\
         **Loss by length, {} seeds** (mean ± std over the seeds)\n\n{}\n\
         ![loss by length]({})\n\n**From the numbers.**\n\n{}{missing}",
        results.command,
        trained_at_text(results.trained_at),
        trained_at_text(results.trained_at),
        trained_at_text(results.trained_at),
        results.seeds,
        table(results),
        figure_path.display(),
        findings(results),
    )
}

/// A note on the ALiBi and T5 arms when the runs have none.
fn missing_arms(results: &Results) -> String {
    let has = |arm: &str| results.rows.iter().any(|r| r.arm == arm);
    if has("alibi") && (has("t5") || has("t5_relative")) {
        return String::new();
    }
    "\nThe runs evaluated have no ALiBi or no T5 arm: once `experiment convergence` has trained \
     them (its `--arms`), the same command adds their rows.\n"
        .into()
}

/// The mean loss of `row` at `length`, if measured.
fn loss_at(row: &Row, length: usize) -> Option<f64> {
    row.cells
        .iter()
        .find(|c| c.length == length)
        .and_then(|c| c.loss.as_ref())
        .map(|l| l.mean)
}

/// Per row, the loss at the training length against the longest length measured; then the
/// lowest row at each length past the training length.
fn findings(results: &Results) -> String {
    let Some(trained) = results.trained_at else {
        return "The training length is unknown.\n".into();
    };
    let mut s = String::new();
    for r in &results.rows {
        let longest = r
            .cells
            .iter()
            .rev()
            .find_map(|c| c.loss.as_ref().map(|l| (c.length, l.mean)));
        if let (Some(at), Some((n, far))) = (loss_at(r, trained), longest) {
            s += &format!(
                "- {}: {at:.3} at {trained}, {far:.3} at {n} ({:+.3}).\n",
                r.name(),
                far - at
            );
        }
    }
    let lengths: Vec<usize> = results
        .rows
        .first()
        .map_or(Vec::new(), |r| r.cells.iter().map(|c| c.length).collect());
    for n in lengths.into_iter().filter(|&n| n > trained) {
        let best = results
            .rows
            .iter()
            .filter_map(|r| loss_at(r, n).map(|l| (r.name(), l)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((name, l)) = best {
            s += &format!("- Lowest at {n}: {name} ({l:.3}).\n");
        }
    }
    s
}

/// Loss against block length, one line per row (lengths past an absolute table left out).
pub fn figure(results: &Results) -> BandFigure {
    BandFigure {
        title: format!(
            "Validation MLM loss by block length (trained at {})",
            trained_at_text(results.trained_at)
        ),
        x_desc: "block length (tokens)".into(),
        y_desc: "validation MLM loss".into(),
        x_scale: XScale::Log2,
        series: results
            .rows
            .iter()
            .map(|r| Series {
                name: r.name(),
                points: r
                    .cells
                    .iter()
                    .filter_map(|c| {
                        c.loss.as_ref().map(|l| Point {
                            x: c.length as f64,
                            mean: l.mean,
                            min: l.min,
                            max: l.max,
                        })
                    })
                    .collect(),
            })
            .collect(),
        reference: None,
        legend: plotters::prelude::SeriesLabelPosition::UpperLeft,
    }
}

/// The Markdown table: rows by lengths.
pub fn table(results: &Results) -> String {
    let lengths: Vec<usize> = results
        .rows
        .first()
        .map(|r| r.cells.iter().map(|c| c.length).collect())
        .unwrap_or_default();
    let mut s = "| arm |".to_string();
    for l in &lengths {
        s += &format!(" {l} |");
    }
    s += "\n|---|";
    s += &"---|".repeat(lengths.len());
    s += "\n";
    for r in &results.rows {
        s += &format!("| {} |", r.name());
        for c in &r.cells {
            s += &match &c.loss {
                Some(l) => format!(" {:.3} ± {:.3} |", l.mean, l.std),
                None => " n/a |".into(),
            };
        }
        s += "\n";
    }
    s
}
