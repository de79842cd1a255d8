//! `roformer train ...`: masked-LM pre-training and classification fine-tuning, with a
//! progress bar, `metrics.jsonl`, a loss plot, checkpoints as Hugging Face directories, and
//! Ctrl-C, SIGTERM and SIGHUP writing a checkpoint before it exits
//! ([`roformer_runner::train::signals`]).

pub(crate) mod args;
mod classify;
mod mlm;
mod resume;
mod save_fault;

use roformer_runner::train::stop_flag;

/// The training commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Pre-train a masked LM on a corpus.
    Mlm(mlm::Args),
    /// Fine-tune a sequence classifier from a checkpoint.
    Classify(classify::Args),
}

/// Runs a training command. The first Ctrl-C, SIGTERM or SIGHUP stops the run at its next
/// micro-batch or evaluation batch and saves its last completed step; Ctrl-C then exits 0,
/// SIGTERM and SIGHUP with an error that names the signal, since the run did not finish.
/// Duplicates within 1 s are the same request; a second request quits at once, keeping the
/// last checkpoint ([`roformer_runner::train::signals`]).
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
