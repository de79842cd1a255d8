//! Which position each token of a call sits at.

use crate::error::{Result, RopeError};

/// The positions of the tokens of one call, for a batch of `batch` sequences of `seq` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Positions<'a> {
    /// Token `s` of every sequence sits at `offset + s` (decoding with a KV cache of `offset`
    /// entries; `offset = 0` for a fresh sequence).
    Range {
        /// Position of the first token.
        offset: usize,
    },
    /// One integer position per token: `seq` entries shared by all sequences, or `batch * seq`
    /// entries, sequence-major (packed or left-padded batches).
    Explicit(&'a [u32]),
    /// One real position per token, laid out as [`Positions::Explicit`] (position
    /// interpolation, fractional strides).
    Fractional(&'a [f64]),
}

impl Positions<'_> {
    /// Positions `0..seq` of a fresh sequence.
    pub const START: Positions<'static> = Positions::Range { offset: 0 };

    /// Whether each sequence of the batch has positions of its own (`batch * seq` entries)
    /// rather than sharing one list of `seq`.
    ///
    /// # Errors
    /// [`RopeError::PositionsLength`] when an explicit list has neither length, and
    /// [`RopeError::NonFinitePosition`] for a NaN or infinite fractional position.
    pub fn per_sequence(&self, batch: usize, seq: usize) -> Result<bool> {
        let len = match self {
            Positions::Range { .. } => return Ok(false),
            Positions::Explicit(p) => p.len(),
            Positions::Fractional(p) => {
                if let Some(index) = p.iter().position(|v| !v.is_finite()) {
                    return Err(RopeError::NonFinitePosition {
                        index,
                        value: p[index],
                    });
                }
                p.len()
            }
        };
        let batch_seq = batch.saturating_mul(seq);
        if len == seq {
            Ok(false)
        } else if len == batch_seq {
            Ok(true)
        } else {
            Err(RopeError::PositionsLength {
                seq,
                batch_seq,
                got: len,
            })
        }
    }

    /// Number of distinct rows of angles this call needs: `seq`, or `batch * seq` when
    /// [`Positions::per_sequence`].
    ///
    /// # Errors
    /// As [`Positions::per_sequence`].
    pub fn rows(&self, batch: usize, seq: usize) -> Result<usize> {
        Ok(if self.per_sequence(batch, seq)? {
            batch * seq
        } else {
            seq
        })
    }

    /// Position of row `row` (`row < self.rows(..)`), as f64 (exact for integers below 2^53).
    /// A range may run past `usize::MAX`: its positions are summed exactly and rounded once.
    #[inline]
    pub fn get(&self, row: usize) -> f64 {
        match self {
            Positions::Range { offset } => (*offset as u128 + row as u128) as f64,
            Positions::Explicit(p) => f64::from(p[row]),
            Positions::Fractional(p) => p[row],
        }
    }

    /// The largest integer position + 1 if every position is a non-negative integer that a
    /// table indexed by position can serve, `None` for fractional positions.
    pub fn integer_end(&self, rows: usize) -> Option<usize> {
        match self {
            Positions::Range { offset } => offset.checked_add(rows),
            Positions::Explicit(p) => Some(
                p.iter()
                    .map(|&v| (v as usize).saturating_add(1))
                    .max()
                    .unwrap_or(0),
            ),
            Positions::Fractional(_) => None,
        }
    }
}
