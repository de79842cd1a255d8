//! `roformer train ...`: masked-LM pre-training and classification fine-tuning, with a
//! progress bar, `metrics.jsonl`, a loss plot, checkpoints as Hugging Face directories, and
//! Ctrl-C writing a checkpoint before it exits.

pub(crate) mod classify;
pub(crate) mod common;
mod loss_plot;
pub(crate) mod mlm;
mod progress;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The training commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Pre-train a masked LM on a corpus.
    Mlm(mlm::Args),
    /// Fine-tune a sequence classifier from a checkpoint.
    Classify(classify::Args),
}

/// Runs a training command; the first Ctrl-C finishes the current step, writes a checkpoint
/// and exits cleanly (a second one exits at once).
///
/// # Errors
/// The command's errors.
pub fn run(command: Command) -> anyhow::Result<()> {
    let stop = stop_flag();
    match command {
        Command::Mlm(a) => mlm::run(a, &stop),
        Command::Classify(a) => classify::run(a, &stop),
    }
}

/// A flag that the first Ctrl-C sets (the run finishes its step, saves and stops); a second
/// Ctrl-C exits at once with status 130.
pub fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A handler can only be set once per process; failing to set it only loses the clean stop.
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nstopping after this step (Ctrl-C again to quit at once)");
    });
    stop
}
