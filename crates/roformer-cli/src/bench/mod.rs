//! `roformer bench ...`: speed measured against peers in the same run.

mod attention;
mod llama;
mod memory;
mod model;
mod products;
mod rope;
mod serve;
mod timing;
mod train;
mod vision;

/// Which benchmark to run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The rotary kernels against memcpy and candle-nn.
    Rope(rope::Args),
    /// RoFormer forward throughput.
    Model(model::Args),
    /// Softmax against linear attention by sequence length.
    Attention(attention::Args),
    /// The matrix products of a training step, f32 against bf16, beside the instruction
    /// ceilings of one core.
    Products(products::Args),
    /// Masked-LM training steps (forward, backward, optimiser): tokens/s and peak memory.
    Train(train::Args),
    /// LLaMA prefill and decode tokens/s on a GGUF file, and RoPE's share of a step.
    Llama(llama::Args),
    /// Vision transformer images/s: DINOv3 ViT-S/16 inference, or Fashion-MNIST training
    /// steps (`--part train`).
    Vision(vision::Args),
    /// HTTP throughput and latency of `roformer serve` (or the FastAPI peer) under load.
    Serve(serve::Args),
}

/// Runs the chosen benchmark.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Rope(a) => rope::run(a),
        Command::Model(a) => model::run(a),
        Command::Attention(a) => attention::run(a),
        Command::Products(a) => products::run(a),
        Command::Train(a) => train::run(a),
        Command::Llama(a) => llama::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Vision(a) => vision::run(a),
    }
}
