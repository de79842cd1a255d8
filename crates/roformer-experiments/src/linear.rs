//! `experiment linear`: the convergence experiment with the paper's linear attention (eq. 19:
//! `phi(q) = elu(q) + 1`, rotary applied after the feature map), rotary against no positions
//! and absolute positions (the paper's Figure 3, right: RoPE also speeds up linear attention).

use std::sync::atomic::AtomicBool;

use super::convergence::out_dir;
use super::settings::SettingsFile;
use super::summary::{curves_figure, summarise, table, verdict};
use super::sweep::{self, Naming};
use super::{pretrain, write_json, write_section};
use roformer_runner::output::outln;
use roformer_runner::plot;
use roformer_runner::train::masked_lm::Position;

/// The settings of `experiment linear`.
const SETTINGS: SettingsFile = SettingsFile {
    path: "experiments/linear/settings.json",
    built_in: include_str!("../../../experiments/linear/settings.json"),
};

/// Runs `experiment linear`.
///
/// # Errors
/// The runs' errors, file errors.
pub fn run(flags: &pretrain::Flags, stop: &AtomicBool) -> anyhow::Result<()> {
    let args = &flags.resolve(&SETTINGS, Position::Absolute)?;
    let out = out_dir(args, "linear");
    let arms = args.arms.clone();
    if !args.settings.sweep.is_empty() {
        let naming = Naming {
            heading:
                "### 4. Linear attention, best against best: each arm at its own learning rate",
            stem: "linear",
        };
        return sweep::experiment(args, (&out, "linear"), &arms, &naming, stop);
    }
    let records = pretrain::run_arms(args, &out, "linear", &arms, stop)?;
    let results = summarise(&records, &arms, Position::Absolute, "linear")?;
    write_json(&out, "results.json", &results)?;
    let figure_path = out.join("linear.png");
    plot::save(
        &curves_figure(&results, "Linear attention: MLM validation loss"),
        &figure_path,
        (900, 560),
    )?;
    let section = format!(
        "### 4. Linear attention with and without RoPE\n\n```sh\n{}\n```\n\n\
         Settings: {}.\n\n\
         The convergence experiment's model, data and schedule with `attention_type: \"linear\"`; \
         {} seeds per arm.\n\n{}\n![validation loss]({})\n\n\
         Rotary against absolute: {}. Rotary against none: {}.\n",
        results.command,
        args.cited,
        args.settings.seeds,
        table(&results),
        figure_path.display(),
        verdict(&results, "rotary", "absolute"),
        verdict(&results, "rotary", "none"),
    );
    let section_path = write_section(&out, &section)?;
    outln!("{}", table(&results))?;
    outln!("section: {}", section_path.display())?;
    Ok(())
}
