//! `roformer vision ...`: the vision transformer (2D RoPE; DINOv3 checkpoints).

mod forward;

/// The `vision` commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a vision checkpoint (a DINOv3ViTModel directory) on pixel values and write its
    /// outputs (the exact, scriptable entry point).
    Forward(forward::Args),
}

/// Runs a `vision` command.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Forward(args) => forward::run(args),
    }
}
