//! The attention between a block's two row stages at inference, with bf16 products: from the
//! stacked projections `[q | k | v]` (f32 rows, as [`super::normed_product`] writes them) to
//! the context as bf16 pair words in the row layout the output projection reads.
//!
//! ```text
//! per (sequence s, head):  q, k <- R q, R k            the token's rotation (a table row each)
//!                          K^T and V packed once       right operands of the two products
//!   per tile of query rows: S = q k^T / sqrt(d),  E = exp(S - max S),  c = (E V) / sum E
//!                          c rounded into its head's words of the context rows
//! ```
//!
//! No `[b, heads, t, t]` tensor is made (a tile of scores stays in cache), q, k and v are
//! read from the projections where they lie (no split into separate buffers), and each key
//! and value is rounded and packed once per (sequence, head), not once per tile. The fused
//! attention op (`autograd::attention`) is the reference the tests hold this to.

use rayon::prelude::*;
use rotary::{rotate_inplace, CosSinView, Direction, Shape};

use super::{pack_rows, MAX_BLOCK_PANELS};
use crate::cpu::bf16::{
    pack_pairs_into, pack_panels, pack_rows_fast, packed_len, Packed, PackedA, MR, NR,
};
use crate::cpu::math::{add_mask_max, exp_sum_fused};
use crate::cpu::product::product_prepacked;
use crate::cpu::{Dst, Mat, SharedOut};

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

/// The context of `qkv` (`[b * t, 3 h]`, `h = heads * d`) as bf16 pair words: row `i`'s
/// words at `i * h / 2` (the row layout of [`super::pack_rows`], padded to panels of `MR`
/// rows), q and k turned by `rope` (one row per token of a sequence, or per token of the
/// batch) when given.
///
/// # Errors
/// Sizes that do not fit (an odd head dim, a table of other rows); rotary errors; the
/// products' errors.
pub(crate) fn context_words(
    qkv: &[f32],
    dims: Heads,
    rope: Option<CosSinView<'_>>,
) -> candle_core::Result<Vec<u32>> {
    let Heads { b, t, heads, d } = dims;
    let h = heads * d;
    let rows = b * t;
    let table_fits = rope.is_none_or(|r| r.rows() == t || r.rows() == rows);
    if d == 0 || !d.is_multiple_of(2) || qkv.len() != rows * 3 * h || !table_fits {
        return Err(candle_core::Error::Msg(format!(
            "attention: projections of {} for {b} x {t} tokens, {heads} heads of {d} (even), \
             a table of {:?} rows",
            qkv.len(),
            rope.map(|r| r.rows())
        )));
    }
    let mut words = vec![0u32; packed_len(rows, h, MR)];
    let out = SharedOut::new(&mut words);
    (0..b * heads).into_par_iter().try_for_each(|task| {
        let (s, head) = (task / heads, task % heads);
        let table = match rope {
            Some(r) if r.rows() == rows => r.slice(s * t, t),
            other => other,
        };
        head_context(qkv, dims, (s, head), table, out)
    })?;
    Ok(words)
}

/// One head's operands in the words its products read: q (rows of pair words, panels of `MR`
/// rows), `K^T` (`d x t`: panels of `NR` keys, pairs along `d`) and V (`t x d`: pairs of tokens
/// in panels of `NR`), gathered from the q/k/v rows of sequence `s`, q and k turned by `rope`.
fn head_operands(
    qkv: &[f32],
    dims: Heads,
    (s, head): (usize, usize),
    rope: Option<CosSinView<'_>>,
) -> candle_core::Result<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let Heads { t, heads, d, .. } = dims;
    let h = heads * d;
    // The head's q, k and v rows, [t, d] each, q and k turned.
    let part = |which: usize, turn: bool| -> candle_core::Result<Vec<f32>> {
        let mut x = Vec::with_capacity(t * d);
        for i in 0..t {
            let at = (s * t + i) * 3 * h + which * h + head * d;
            x.extend_from_slice(&qkv[at..at + d]);
        }
        if let (true, Some(table)) = (turn, rope) {
            rotate_inplace(
                &mut x,
                Shape::token_major(1, t, 1, d),
                table,
                Direction::Forward,
            )
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        }
        Ok(x)
    };
    let (q, k, v) = (part(0, true)?, part(1, true)?, part(2, false)?);
    let mut k_words = vec![0u32; packed_len(t, d, NR)];
    pack_panels(Mat::rows(&k, d), (t, d), NR, (false, false), &mut k_words);
    let mut v_words = vec![0u32; packed_len(d, t, NR)];
    pack_pairs_into(&v, (d, t), 0, NR, SharedOut::new(&mut v_words));
    Ok((pack_rows(&q, d), k_words, v_words))
}

/// The context of sequence `s`, head `head` into its words of `out` (see [`context_words`]).
fn head_context(
    qkv: &[f32],
    dims: Heads,
    (s, head): (usize, usize),
    rope: Option<CosSinView<'_>>,
    out: SharedOut<u32>,
) -> candle_core::Result<()> {
    let Heads { t, heads, d, .. } = dims;
    let h = heads * d;
    let (q, k_words, v_words) = head_operands(qkv, dims, (s, head), rope)?;
    let missing = || candle_core::Error::Msg("attention: packed operand sizes".into());
    let kt = Packed::from_words(&k_words, d, t).ok_or_else(missing)?;
    let vp = Packed::from_words(&v_words, t, d).ok_or_else(missing)?;
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
