//! What a masked-LM run of the CLI and of the experiments shares: the position types it
//! offers (a fresh model of a config and a vocabulary is `roformer::train::ModelStart::fresh`),
//! the check of the position table, and the flags named when a run fails before its first step.

use anyhow::bail;
use clap::ValueEnum;
use roformer::config::PositionEmbeddingType;
use roformer::train::TrainError;
use roformer::RoFormerConfig;
use serde::{Deserialize, Serialize};

/// `--position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Position {
    /// RoPE (RoFormer).
    Rotary,
    /// Learned absolute positions (BERT).
    Absolute,
    /// Fixed sinusoidal positions added to the embeddings.
    Sinusoidal,
    /// ALiBi: a linear, head-specific bias on the scores, no embedding (Press et al.).
    Alibi,
    /// T5's relative bias: bucketed distances, a learned scalar per bucket and head, shared
    /// across layers (config `t5_relative`).
    T5,
    /// No positions.
    None,
}

impl From<Position> for PositionEmbeddingType {
    fn from(p: Position) -> Self {
        match p {
            Position::Rotary => PositionEmbeddingType::Rotary,
            Position::Absolute => PositionEmbeddingType::Absolute,
            Position::Sinusoidal => PositionEmbeddingType::Sinusoidal,
            Position::Alibi => PositionEmbeddingType::Alibi,
            Position::T5 => PositionEmbeddingType::T5Relative,
            Position::None => PositionEmbeddingType::None,
        }
    }
}

/// Checks that `--seq-len` fits an absolute position table.
///
/// # Errors
/// It does not.
pub fn check_position_table(cfg: &RoFormerConfig, seq_len: usize) -> anyhow::Result<()> {
    if cfg.position_embedding_type == PositionEmbeddingType::Absolute
        && seq_len > cfg.max_position_embeddings
    {
        bail!(
            "--seq-len {seq_len} is past the absolute position table (max_position_embeddings = \
             {})",
            cfg.max_position_embeddings
        );
    }
    Ok(())
}

/// The flags that shape a masked-LM run's blocks.
#[derive(Debug, Clone, Copy)]
pub struct BlockFlags {
    /// `--seq-len`.
    pub seq_len: usize,
    /// `--validation`.
    pub validation: f64,
    /// `--line-by-line`.
    pub line_by_line: bool,
}

/// A masked-LM run's failure before its first step, with the flags behind it: a run too large
/// for memory, or a corpus too short for one block.
pub fn explain(e: TrainError, flags: &BlockFlags) -> anyhow::Error {
    match e {
        e @ TrainError::TooLarge(_) => anyhow::Error::new(e).context(
            "the run does not fit in memory: lower --batch or --seq-len, or use a smaller model",
        ),
        e @ TrainError::NoTrainingBlock { .. } => {
            let line_by_line = if flags.line_by_line {
                ", --line-by-line"
            } else {
                ""
            };
            let given = format!(
                "--seq-len {}, --validation {}{line_by_line}",
                flags.seq_len, flags.validation
            );
            anyhow::Error::new(e).context(given)
        }
        e => e.into(),
    }
}
