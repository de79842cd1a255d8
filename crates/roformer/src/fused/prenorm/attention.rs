//! The attention between a block's two row stages at inference, with bf16 products: from the
//! heads' operands (q, `K^T` and V of each (sequence, head), q and k turned, as
//! [`super::qkv::head_operands`] writes them) to the context as bf16 pair words in the row
//! layout the output projection reads.
//!
//! ```text
//! per (sequence s, head), per tile of query rows:
//!     S = q k^T / sqrt(d),  E = exp(S - max S),  c = (E V) / sum E
//!     c rounded into its head's words of the context rows
//! ```
//!
//! No `[b, heads, t, t]` tensor is made (a tile of scores stays in cache). The fused attention
//! op (`autograd::attention`) is the reference the tests hold this to.

use rayon::prelude::*;

use super::qkv::HeadOperands;
use super::MAX_BLOCK_PANELS;
use crate::cpu::bf16::{pack_rows_fast, packed_len, PackedA, MR};
use crate::cpu::math::{add_mask_max, exp_sum_fused};
use crate::cpu::product::product_prepacked;
use crate::cpu::{Dst, SharedOut};

/// The sizes of one attention: `b` sequences of `t` tokens, `heads` heads of `d` (even)
/// columns each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    /// Sequences.
    pub(crate) b: usize,
    /// Tokens per sequence.
    pub(crate) t: usize,
    /// Heads.
    pub(crate) heads: usize,
    /// Columns per head.
    pub(crate) d: usize,
}

/// The context of the heads' operands (q and k already turned) as bf16 pair words: row `i`'s
/// words at `i * h / 2` (`h = heads * d`; the row layout of [`crate::cpu::bf16::pack_rows_fast`], padded to
/// panels of `MR` rows).
///
/// # Errors
/// The products' errors.
pub(crate) fn context_words(operands: &HeadOperands) -> candle_core::Result<Vec<u32>> {
    let Heads { b, t, heads, d } = operands.dims();
    let rows = b * t;
    let mut words = vec![0u32; packed_len(rows, heads * d, MR)];
    let out = SharedOut::new(&mut words);
    (0..b * heads).into_par_iter().try_for_each(|task| {
        let (s, head) = (task / heads, task % heads);
        head_context(operands, (s, head), out)
    })?;
    Ok(words)
}

/// The context of sequence `s`, head `head` into its words of `out` (see [`context_words`]).
fn head_context(
    operands: &HeadOperands,
    (s, head): (usize, usize),
    out: SharedOut<u32>,
) -> candle_core::Result<()> {
    let dims = operands.dims();
    let Heads { t, heads, d, .. } = dims;
    let h = heads * d;
    let missing = || candle_core::Error::Msg("attention: packed operand sizes".into());
    let (q, kt, vp) = operands.head(s, head).ok_or_else(missing)?;
    let scale = 1.0 / (d as f32).sqrt();
    let (pairs_q, pairs_row) = (d / 2, h / 2);
    let mut scores = Vec::new();
    let mut p_words = Vec::new();
    let mut inv_sums = Vec::new();
    let mut context = Vec::new();
    let tile = MAX_BLOCK_PANELS * MR;
    for start in (0..t).step_by(tile) {
        let r = start..(start + tile).min(t);
        let m = r.len();
        let a_words = &q[r.start * pairs_q..(r.start + m.next_multiple_of(MR)) * pairs_q];
        let a = PackedA::from_words(a_words, m, d, true).ok_or_else(missing)?;
        scores.resize(m * t, 0.0);
        product_prepacked(
            Dst::Slice(&mut scores),
            (0, t),
            false,
            (a, kt),
            scale,
            false,
        )?;
        // exp(S - max S) rounded as it stands; each row's 1 / sum scales its d context values
        // after the product instead of its t probabilities before it.
        inv_sums.clear();
        for row in scores.chunks_exact_mut(t) {
            let max = add_mask_max(row, None);
            inv_sums.push(1.0 / exp_sum_fused(row, max));
        }
        p_words.clear();
        p_words.resize(packed_len(m, t, MR), 0);
        pack_rows_fast(&scores, t, 0, SharedOut::new(&mut p_words));
        let p = PackedA::from_words(&p_words, m, t, true).ok_or_else(missing)?;
        context.resize(m * d, 0.0);
        product_prepacked(Dst::Slice(&mut context), (0, d), false, (p, vp), 1.0, false)?;
        for (i, (c, inv)) in context.chunks_exact_mut(d).zip(&inv_sums).enumerate() {
            c.iter_mut().for_each(|x| *x *= inv);
            let row = s * dims.t + r.start + i;
            // SAFETY: task (s, head) alone writes head `head`'s words of its sequence's rows.
            let segment = unsafe { out.slice(row * pairs_row + head * pairs_q, pairs_q) };
            pack_rows_fast(c, d, 0, SharedOut::new(segment));
        }
    }
    Ok(())
}
