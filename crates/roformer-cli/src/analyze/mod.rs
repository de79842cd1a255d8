//! `roformer analyze ...`: the paper's analyses as numbers and plots.

mod attention_2d;
mod decay;
mod limits;

/// Which analysis to run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Long-term decay of the attention bound with distance (the paper's Figure 2).
    Decay(decay::Args),
    /// RoPE-only attention from the centre patch of a grid, axial 2D against flattened 1D.
    #[command(name = "attention-2d")]
    Attention2d(attention_2d::Args),
}

/// Runs the chosen analysis.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Decay(a) => decay::run(a),
        Command::Attention2d(a) => attention_2d::run(a),
    }
}
