//! `roformer experiment vision`: seed 003's claims about 2D RoPE, tested on Fashion-MNIST with
//! the library's ViT.
//!
//! ```text
//! for each arm (rope_axial, rope_mixed, rope_flat, absolute, none):
//!   sweep: a run at each rate on the sweep seed; the best rate by validation top-1 at 28
//!   final: a run on each seed at that rate (the sweep's run is the sweep seed's)
//! each final run, on the test images at every side (20..56), the rotary arms read two ways:
//!   indices as they are (extrapolation) and stretched onto the training grid (interpolation)
//! each rotary arm's sweep-seed model: relativity and invertibility of its rotations
//! -> results.json, accuracy.png, section.md (the part of EXPERIMENTS.md)
//! ```
//!
//! All settings come from `experiments/vision/settings.json` ([`plan::Plan`]). Every run trains
//! at 28 x 28 without augmentation, on the 55,000 training images (60,000 less the validation cut); the 5,000
//! validation images choose the rates; the test images only report.

mod accuracy;
mod plan;
mod properties;
mod report;
mod runs;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use crate::settings::SettingsFlag;
use plan::Plan;
use runs::{best_rate, Run};

/// `roformer experiment vision --data DIR --out DIR`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory of Fashion-MNIST's gzipped IDX files (`scripts/fetch_fashion_mnist.sh`).
    #[arg(long)]
    data: PathBuf,
    /// The experiment's directory: runs/, results.json, accuracy.png, section.md.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    settings: SettingsFlag,
}

/// Runs the experiment: the runs it lacks, then the evaluations and the report.
///
/// # Errors
/// Bad settings, the runs' and the data's errors, a stop.
pub fn run(args: &Args, stop: &AtomicBool) -> anyhow::Result<()> {
    let (plan, model, cited) = Plan::read(&args.settings)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let paths = (args.data.as_path(), args.out.as_path());
    let train = |run: Run| runs::train(&plan, &model, paths, run, stop);
    let mut sweep = Vec::new();
    for &arm in &plan.arms {
        for &lr in &plan.rates {
            let seed = plan.sweep_seed;
            sweep.push(train(Run { arm, lr, seed })?);
        }
    }
    let mut finals = Vec::new();
    for &arm in &plan.arms {
        let lr = best_rate(&sweep, arm).context("an arm without sweep runs")?;
        for &seed in &plan.seeds {
            finals.push(train(Run { arm, lr, seed })?);
        }
    }
    let accuracy = accuracy::measure(&plan, &args.data, &finals, stop)?;
    let properties = properties::measure(&plan, &model, &finals)?;
    let command = super::command_line();
    let written = report::write(
        &args.out,
        &cited,
        (&plan, &model),
        (&sweep, &finals),
        (&accuracy, &properties),
        &command,
    )?;
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
