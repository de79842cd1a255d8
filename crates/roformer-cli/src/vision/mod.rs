//! `roformer vision ...`: the vision transformer (2D RoPE; DINOv3 checkpoints) and the
//! built-in Fashion-MNIST model.

mod classify;
mod embed;
mod eval;
mod forward;
pub(crate) mod train;

/// The `vision` commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a vision checkpoint (a DINOv3ViTModel directory) on pixel values and write its
    /// outputs (the exact, scriptable entry point).
    Forward(forward::Args),
    /// The embedding (pooled CLS token) of each image, as JSON lines or a .npy file.
    Embed(embed::Args),
    /// The five most probable labels of each image.
    Classify(classify::Args),
    /// Top-1 of a classifier on Fashion-MNIST's test images at a chosen size.
    Eval(eval::Args),
    /// Train a ViT on Fashion-MNIST (from scratch or from --init).
    Train(train::Args),
}

/// Runs a `vision` command.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Forward(args) => forward::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Classify(args) => classify::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Train(args) => train::run(args),
    }
}
