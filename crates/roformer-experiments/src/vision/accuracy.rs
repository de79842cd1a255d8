//! Test top-1 of the final runs at every side, each rotary arm under both readings of a grid
//! of another size; cached per run in `test.json`, so a repeated command does not evaluate
//! again.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use candle_core::{DType, Device};
use roformer::images::augment::Augmentation;
use roformer::images::batch::BatchBuilder;
use roformer::images::fashion_mnist::{self, Part, Split};
use roformer::images::planes::Channels;
use roformer::train::score_split;
use roformer::vision::{Coordinates, PositionKind, VisionModelDir};
use serde::{Deserialize, Serialize};

use super::plan::{conventions, Plan};
use super::runs::Trained;

/// Patch tokens one forward pass holds: 250 images of 49 patches.
const TOKENS_PER_PASS: usize = 250 * 49;

/// One run's test top-1 under one reading at one side.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// The position kind.
    pub arm: PositionKind,
    /// The seed.
    pub seed: u64,
    /// How the patches of the grid were placed.
    pub coordinates: Coordinates,
    /// The side of the test images.
    pub side: usize,
    /// Top-1 on the test images.
    pub top1: f64,
    /// The test images scored.
    pub images: usize,
}

/// A run's `test.json`: the settings it was measured with, and its cells.
#[derive(Debug, Serialize, Deserialize)]
struct TestRecord {
    /// The plan's `test_images`.
    test_images: usize,
    /// The plan's `eval_sides`.
    sides: Vec<usize>,
    /// The run's cells.
    cells: Vec<Cell>,
}

/// The cells of every final run (read from its `test.json` when it has the same sides and
/// image count, else evaluated and written there).
///
/// # Errors
/// The data's and the models' errors; a stop.
pub fn measure(
    plan: &Plan,
    data: &Path,
    finals: &[Trained],
    stop: &AtomicBool,
) -> anyhow::Result<Vec<Cell>> {
    let mut test: Option<Split> = None;
    let mut cells = Vec::new();
    for trained in finals {
        if let Some(cached) = cached(plan, &trained.dir) {
            cells.extend(cached);
            continue;
        }
        let split = match &test {
            Some(split) => split,
            None => test.insert(test_split(data, plan.test_images)?),
        };
        eprintln!("testing {}", trained.run.name());
        let mut own = Vec::new();
        for coordinates in conventions(trained.run.arm) {
            own.extend(evaluate(plan, trained, coordinates, split, stop)?);
        }
        let record = TestRecord {
            test_images: plan.test_images,
            sides: plan.eval_sides.clone(),
            cells: own,
        };
        super::super::write_json(&trained.dir, "test.json", &record)?;
        cells.extend(record.cells);
    }
    Ok(cells)
}

/// The first `limit` test images.
fn test_split(data: &Path, limit: usize) -> anyhow::Result<Split> {
    let all = fashion_mnist::load_split(data, Part::Test)
        .with_context(|| format!("reading the test images in {}", data.display()))?;
    let n = limit.min(all.len());
    Ok(all.select(&(0..n).collect::<Vec<_>>())?)
}

/// The cells of `dir/test.json`, when it was measured with the plan's sides and test images.
fn cached(plan: &Plan, dir: &Path) -> Option<Vec<Cell>> {
    let text = std::fs::read_to_string(dir.join("test.json")).ok()?;
    let record: TestRecord = serde_json::from_str(&text).ok()?;
    let same = record.test_images == plan.test_images && record.sides == plan.eval_sides;
    same.then_some(record.cells)
}

/// The run's final model read with `coordinates`, scored at every side.
fn evaluate(
    plan: &Plan,
    trained: &Trained,
    coordinates: Coordinates,
    test: &Split,
    stop: &AtomicBool,
) -> anyhow::Result<Vec<Cell>> {
    let best = trained.dir.join("best");
    let mut dir = VisionModelDir::open(&best)?;
    dir.config.coordinates = coordinates;
    let model = dir.load_classifier(DType::F32, &Device::Cpu)?.model;
    let patch = model.config().patch_size;
    let mut cells = Vec::new();
    for &side in &plan.eval_sides {
        let builder = BatchBuilder::new(Augmentation::none(side), Channels::Grey, 0)?;
        let per_pass = (TOKENS_PER_PASS / (side / patch).max(1).pow(2)).max(1);
        let Some(scored) = score_split(&model, &builder, test, (side, per_pass), stop)? else {
            bail!("stopped; give the same command again to continue");
        };
        cells.push(Cell {
            arm: trained.run.arm,
            seed: trained.run.seed,
            coordinates,
            side,
            top1: scored.counts.right() as f64 / scored.counts.items().max(1) as f64,
            images: scored.counts.items(),
        });
    }
    Ok(cells)
}
