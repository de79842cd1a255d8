//! The q/k/v stage of the attention half at inference: `[q | k | v] = LayerNorm(x) Wqkv^T +
//! bqkv` by blocks of rows, each block's q and k turned and all three rounded to bf16 while the
//! block is in cache, straight into the layouts the attention's products read, per (sequence
//! `s`, head):
//!
//! ```text
//! q    rows of pair words, panels of MR rows   word i * d/2 + p               = (q[i, 2p], q[i, 2p + 1])
//! K^T  panels of NR keys, pairs along d        word ((j / NR) d/2 + p) NR + j % NR = (k[j, 2p], k[j, 2p + 1])
//! V    panels of NR columns, pairs of tokens   word ((c / NR) ceil(t/2) + p) NR + c % NR = (v[2p, c], v[2p + 1, c])
//! ```
//!
//! (`i`, `j` tokens of the sequence; zeros pad the last panels and an odd `t`.) So no
//! `[rows, 3 hidden]` f32 projections are written to memory and read back, and nothing is
//! gathered, turned or packed per head afterwards. The two tokens of a pair of V may lie in
//! two blocks (on two threads): each writes its own half of the word.

use rayon::prelude::*;
use rotary::{rotate_inplace, CosSinView, Direction, Shape};

use super::{add_row, blocks, check_dense, check_norm, normed_words, product_rows, rows_of};
use super::{Heads, PackedDense, RowLayerNorm};
use crate::cpu::bf16::{pack_rows_fast, packed_len, Packed, MR, NR};
use crate::cpu::SharedOut;

/// q, `K^T` and V of every (sequence, head) as bf16 pair words (see the module doc), q and k
/// turned.
pub(crate) struct HeadOperands {
    q: Vec<u32>,
    kt: Vec<u32>,
    v: Vec<u32>,
    dims: Heads,
}

/// The words of one head's q, `K^T` and V for `t` tokens of `d` columns.
fn head_lens(t: usize, d: usize) -> (usize, usize, usize) {
    (
        packed_len(t, d, MR),
        packed_len(t, d, NR),
        packed_len(d, t, NR),
    )
}

impl HeadOperands {
    /// The sizes they were made for.
    pub(crate) fn dims(&self) -> Heads {
        self.dims
    }

    /// Head `head` of sequence `s`: q (`t` rows of `d / 2` words, padded to panels of `MR`
    /// rows), `K^T` (`d x t`) and V (`t x d`) packed as right operands.
    pub(crate) fn head(&self, s: usize, head: usize) -> Option<(&[u32], Packed<'_>, Packed<'_>)> {
        let Heads { t, heads, d, .. } = self.dims;
        let at = s * heads + head;
        let (lq, lk, lv) = head_lens(t, d);
        let q = self.q.get(at * lq..(at + 1) * lq)?;
        let kt = Packed::from_words(self.kt.get(at * lk..(at + 1) * lk)?, d, t)?;
        let v = Packed::from_words(self.v.get(at * lv..(at + 1) * lv)?, t, d)?;
        Some((q, kt, v))
    }

    /// q, k and v back as f32, `[b, heads, t, d]` each, read from the words through the
    /// layouts of the module doc (for the tests).
    #[cfg(test)]
    pub(super) fn unpacked(&self) -> [Vec<f32>; 3] {
        let Heads { b, t, heads, d } = self.dims;
        let (lq, lk, lv) = head_lens(t, d);
        let half = |w: u32, hi: bool| f32::from_bits(if hi { w & 0xffff_0000 } else { w << 16 });
        let mut out = [vec![], vec![], vec![]];
        for at in 0..b * heads {
            for i in 0..t {
                for c in 0..d {
                    let (p, odd) = (c / 2, c % 2 == 1);
                    out[0].push(half(self.q[at * lq + i * (d / 2) + p], odd));
                    let key = at * lk + ((i / NR) * (d / 2) + p) * NR + i % NR;
                    out[1].push(half(self.kt[key], odd));
                    let value = at * lv + ((c / NR) * t.div_ceil(2) + i / 2) * NR + c % NR;
                    out[2].push(half(self.v[value], i % 2 == 1));
                }
            }
        }
        out
    }
}

/// The q/k/v stage for `x` `[b * t, hidden]` (`hidden = heads * d`, `d` even), `qkv` the three
/// projections stacked (`W^T`: `hidden x 3 hidden`, `[q | k | v]`), q and k turned by `rope`
/// (a row per token of a sequence, or of the batch) when given.
///
/// # Errors
/// Sizes that do not fit each other; rotary errors; the products' errors.
pub(crate) fn head_operands(
    x: &[f32],
    norm: RowLayerNorm<'_>,
    qkv: PackedDense<'_>,
    dims: Heads,
    rope: Option<CosSinView<'_>>,
) -> candle_core::Result<HeadOperands> {
    let Heads { b, t, heads, d } = dims;
    let h = heads * d;
    let rows = rows_of(x, h, "q/k/v")?;
    check_norm(norm, h)?;
    check_dense(qkv, "q/k/v")?;
    let table_fits = rope.is_none_or(|r| r.rows() == t || r.rows() == rows);
    let fits = d > 0 && d.is_multiple_of(2) && rows == b * t && qkv.weight.k() == h;
    if !fits || qkv.weight.n() != 3 * h || !table_fits {
        return Err(candle_core::Error::Msg(format!(
            "q/k/v: {rows} rows of {h} for {b} x {t} tokens, {heads} heads of {d} (even), a \
             layer of {} -> {}, a table of {:?} rows",
            qkv.weight.k(),
            qkv.weight.n(),
            rope.map(|r| r.rows())
        )));
    }
    let (lq, lk, lv) = head_lens(t, d);
    let mut out = HeadOperands {
        q: vec![0; b * heads * lq],
        kt: vec![0; b * heads * lk],
        v: vec![0; b * heads * lv],
        dims,
    };
    let q = SharedOut::new(&mut out.q);
    let kt = SharedOut::new(&mut out.kt);
    // V's words as their bf16 halves (little-endian: the even token's half first).
    let v_len = 2 * out.v.len();
    // SAFETY: `out.v` holds `v_len` u16 halves (u32 is two u16s, more strictly aligned), and
    // it is used only through this view until the tasks end.
    let v = SharedOut::new(unsafe {
        std::slice::from_raw_parts_mut(out.v.as_mut_ptr().cast::<u16>(), v_len)
    });
    blocks(rows).into_par_iter().try_for_each(|r| {
        let words = normed_words(&x[r.start * h..r.end * h], norm);
        let mut u = product_rows(&words, r.len(), qkv)?;
        let mut words = vec![0u32; 3 * h / 2];
        for (row, u) in (r.start..).zip(u.chunks_exact_mut(3 * h)) {
            if let Some(b) = qkv.bias {
                add_row(u, b);
            }
            if let Some(table) = rope {
                let at = if table.rows() == rows { row } else { row % t };
                let table = table
                    .slice(at, 1)
                    .ok_or_else(|| candle_core::Error::Msg(format!("q/k/v: no table row {at}")))?;
                // A token's q and k heads, side by side: 2 heads "heads" of one token.
                let shape = Shape::token_major(1, 1, 2 * heads, d);
                rotate_inplace(&mut u[..2 * h], shape, table, Direction::Forward)
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
            }
            // The row's words once (a head starts on a word: `d` is even), then each head's
            // to its place.
            pack_rows_fast(u, 3 * h, 0, SharedOut::new(&mut words));
            // SAFETY: row `row` is this block's alone (rows are dealt to one block each), and
            // token `row % t` of a sequence owns the elements `place` writes.
            unsafe { place(&words, (row / t, row % t), dims, (q, kt, v)) };
        }
        Ok::<_, candle_core::Error>(())
    })?;
    Ok(out)
}

/// Writes token `i` of sequence `s` (`words`: its `[q | k | v]` row as pair words) into the
/// heads' operands: its row of q, its lane of every pair of `K^T`'s panel, its half (of pair
/// `i / 2`) of every column's word of V (V as halves).
///
/// # Safety
/// The elements written (those of token `i` of sequence `s`, bounds asserted) are touched by
/// no one else during the call.
unsafe fn place(
    words: &[u32],
    (s, i): (usize, usize),
    dims: Heads,
    (q, kt, v): (SharedOut<u32>, SharedOut<u32>, SharedOut<u16>),
) {
    let Heads { t, heads, d, .. } = dims;
    let (lq, lk, lv) = head_lens(t, d);
    let (pairs, h) = (d / 2, heads * d);
    let (token_pairs, key) = (t.div_ceil(2), (i / NR) * pairs * NR + i % NR);
    let ((q, q_len), (kt, kt_len), (v, v_len)) = (q.raw(), kt.raw(), v.raw());
    for head in 0..heads {
        let at = s * heads + head;
        let part = |which: usize| &words[(which * h + head * d) / 2..][..pairs];
        let (q_at, k_at) = (at * lq + i * pairs, at * lk + key);
        // The last element of each written below.
        let v_last = 2 * (at * lv + (((d - 1) / NR) * token_pairs + i / 2) * NR + (d - 1) % NR);
        assert!(
            q_at + pairs <= q_len && k_at + (pairs - 1) * NR < kt_len && v_last + 1 < v_len,
            "heads' operands out of bounds"
        );
        // SAFETY: inside the buffers (asserted above), and this token's (the caller's
        // promise): its row of q, its lane of K^T, its half of V's words.
        unsafe {
            std::ptr::copy_nonoverlapping(part(0).as_ptr(), q.add(q_at), pairs);
            for (p, &w) in part(1).iter().enumerate() {
                *kt.add(k_at + p * NR) = w;
            }
            for (p, &w) in part(2).iter().enumerate() {
                for (c, half) in [(2 * p, w as u16), (2 * p + 1, (w >> 16) as u16)] {
                    let word = at * lv + ((c / NR) * token_pairs + i / 2) * NR + c % NR;
                    *v.add(2 * word + i % 2) = half;
                }
            }
        }
    }
}
