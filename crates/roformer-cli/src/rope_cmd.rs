//! `roformer rope ...`: inspect rotary schedules.

/// Which inspection to run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Inverse frequencies and attention factor a model's config.json implies.
    Freqs(FreqsArgs),
}

/// Arguments of `rope freqs`.
#[derive(Debug, clap::Args)]
pub struct FreqsArgs {}

/// Runs the chosen inspection.
pub fn run(_command: Command) -> anyhow::Result<()> {
    anyhow::bail!("rope freqs: in progress (issue 5)")
}
