//! The arguments of `roformer bench attention`.

use std::path::PathBuf;

use roformer::measure::DEFAULT_CHUNK;

use super::cases::MaskingArg;
use crate::output::OutputArgs;

/// Arguments of `roformer bench attention`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per line: a record per case (or skipped case), then the crossover \
     lengths per masking"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    pub(super) stdout: OutputArgs,
    /// Write a plot of time and peak memory against length to this file (.png or .svg).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Shortest sequence length; lengths double from here.
    #[arg(long, default_value_t = 64)]
    pub(super) min_len: usize,
    /// Longest sequence length.
    #[arg(long, default_value_t = 65536)]
    pub(super) max_len: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 1)]
    pub(super) heads: usize,
    /// Dimensions per head (even).
    #[arg(long, default_value_t = 64)]
    pub(super) head_dim: usize,
    /// Which attention masks to measure.
    #[arg(long, value_enum, default_value_t = MaskingArg::Both)]
    pub(super) masking: MaskingArg,
    /// Skip softmax lengths whose N x N f32 score matrix (all heads) exceeds this many MiB.
    #[arg(long, default_value_t = 512)]
    pub(super) memory_budget_mib: u64,
    /// Seconds of timed rounds per case (at least 3 rounds run).
    #[arg(long, default_value_t = 0.3)]
    pub(super) seconds: f64,
    /// Tokens per chunk of the causal linear attention.
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    pub(super) chunk: usize,
    /// Internal: run one case in this process (`KIND:MASKING:LEN`) and print its measurement.
    #[arg(long, hide = true)]
    pub(super) case: Option<String>,
}

impl Args {
    /// The lengths measured: doubling from `min_len` up to `max_len`.
    pub(super) fn lengths(&self) -> Vec<usize> {
        std::iter::successors(Some(self.min_len), |&n| n.checked_mul(2))
            .take_while(|&n| n <= self.max_len)
            .collect()
    }
}
