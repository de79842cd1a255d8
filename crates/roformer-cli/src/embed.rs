//! In progress: replaced by its issue's implementation.

/// Arguments (in progress).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command (in progress).
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("embed: in progress")
}
