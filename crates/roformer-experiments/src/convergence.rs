//! `experiment convergence`: masked-LM pre-training with each position scheme, everything else
//! identical, and how fast each one's validation loss falls (the paper's Figure 3, left:
//! RoFormer's MLM loss falls faster than BERT's).
//!
//! Reported per arm, over seeds: the validation-loss curve (mean, min–max band), the final
//! validation loss and accuracy, and for each seed the first evaluated step at which its loss
//! reaches the reference arm's (absolute, BERT's) mean final loss.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use super::pretrain;
use super::settings::SettingsFile;
use super::summary::{curves_figure, summarise, table, verdict};
use super::sweep::{self, Naming};
use super::{write_json, write_section};
use roformer_runner::output::outln;
use roformer_runner::plot;
use roformer_runner::train::masked_lm::Position;

/// The settings of `experiment convergence`.
const SETTINGS: SettingsFile = SettingsFile {
    path: "experiments/convergence/settings.json",
    built_in: include_str!("../../../experiments/convergence/settings.json"),
};

/// The output directory: `--out`, or `experiments/NAME`.
pub fn out_dir(args: &pretrain::Args, name: &str) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| Path::new("experiments").join(name))
}

/// Runs `experiment convergence`.
///
/// # Errors
/// The runs' errors, file errors.
pub fn run(flags: &pretrain::Flags, stop: &AtomicBool) -> anyhow::Result<()> {
    let args = &flags.resolve(&SETTINGS, Position::Absolute)?;
    let out = out_dir(args, "convergence");
    let arms = args.arms.clone();
    if !args.settings.sweep.is_empty() {
        let naming = Naming {
            heading: "### 1. Convergence, best against best: each arm at its own learning rate",
            stem: "convergence",
        };
        return sweep::experiment(args, (&out, "softmax"), &arms, &naming, stop);
    }
    let records = pretrain::run_arms(args, &out, "softmax", &arms, stop)?;
    let results = summarise(&records, &arms, Position::Absolute, "softmax")?;
    write_json(&out, "results.json", &results)?;
    let figure_path = out.join("convergence.png");
    plot::save(
        &curves_figure(&results, "MLM validation loss by position scheme"),
        &figure_path,
        (900, 560),
    )?;
    let section = format!(
        "### 1. Convergence: rotary against absolute, sinusoidal and no positions\n\n\
         ```sh\n{}\n```\n\n\
         Settings: {}.\n\n\
         Model: hidden {}, {} layers, {} heads, intermediate {}, vocabulary {} characters; \
         {} steps of {}x{} tokens, AdamW lr {} (warm-up {}, linear decay), dropout 0; \
         {} seeds per arm (seed = initial weights, data order and masks, shared by the arms).\n\n\
         {}\n![validation loss]({})\n\n\
         Rotary against absolute: {}.\n",
        results.command,
        args.cited,
        args.settings.hidden,
        args.settings.layers,
        args.settings.heads,
        4 * args.settings.hidden,
        args.settings.vocab_size,
        args.settings.steps,
        args.settings.batch,
        args.settings.seq_len,
        args.settings.lr,
        args.settings.warmup,
        args.settings.seeds,
        table(&results),
        figure_path.display(),
        verdict(&results, "rotary", "absolute"),
    );
    let section_path = write_section(&out, &section)?;
    outln!("{}", table(&results))?;
    outln!(
        "results: {}\nfigure: {}\nsection: {}",
        out.join("results.json").display(),
        figure_path.display(),
        section_path.display()
    )?;
    Ok(())
}
