//! The operands of the training attention's products for one (sequence, head): f32 values
//! that each product rounds and packs itself (f32 products, and the reference), or bf16
//! words rounded and packed once, in the layout each product reads.
//!
//! Per tile of `r` query rows (`t` keys, head dim `d`):
//!
//! ```text
//! product            left (m x k)         right (k x n)   packed once per head, in the forward
//! S   = c q K^T       q rows    [r, d]     K^T  [d, t]     q rows and K^T (kept)
//! O   = (P f) V       P f rows  [r, t]     V    [t, d]     V (for the forward only)
//! dV += (P f)^T dO    (P f)^T   [t, r]     dO   [r, d]     -
//! dPf = dO V^T        dO rows   [r, d]     V^T  [d, t]     V^T (kept)
//! dq  = c dS K        dS rows   [r, t]     K    [t, d]     K (kept)
//! dk += c dS^T q      dS^T      [t, r]     q    [r, d]     q by tiles of rows (kept)
//! ```
//!
//! The other operands (P f, dO and dS in their two layouts each) are made per tile and packed
//! where they are read, by the same calls.
//!
//! The words are made by [`pack_panels`] from the same f32 values and in the same layouts as
//! [`product`] makes them on every call (left operands by rows where their rows are
//! contiguous, else in interleaved panels of `MR`; right operands in panels of `NR`), so a
//! product on them gives the same bits; q and K, which the forward and the backward's
//! recomputed scores both read, are rounded and packed once a head instead of three times.

use crate::cpu::bf16::{pack_panels, packed_len, Packed, PackedA, MR, NR};
use crate::cpu::product::product_prepacked;
use crate::cpu::{product, Dst, Mat, Precision};

/// A left operand `m x k`: f32 values, or bf16 words packed ahead.
#[derive(Clone, Copy)]
pub(super) enum Left<'a> {
    /// Values, rounded and packed by the product (with bf16 products).
    Values(Mat<'a>),
    /// Words packed ahead.
    Words(PackedA<'a>),
}

/// A right operand `k x n`: f32 values, or bf16 words packed ahead.
#[derive(Clone, Copy)]
pub(super) enum Right<'a> {
    /// Values, rounded and packed by the product (with bf16 products).
    Values(Mat<'a>),
    /// Words packed ahead.
    Words(Packed<'a>),
}

impl<'a> Left<'a> {
    /// `x` (`m x k`) as a left operand: its values, or, given `words`, rounded and packed into
    /// them as [`product`] packs it (rows of pair words when `x`'s rows are contiguous, else
    /// panels of `MR` rows).
    ///
    /// # Errors
    /// `x` not inside its buffer for `m x k`.
    pub(super) fn of(
        x: Mat<'a>,
        (m, k): (usize, usize),
        words: Option<&'a mut Vec<u32>>,
    ) -> candle_core::Result<Left<'a>> {
        let Some(words) = words else {
            return Ok(Left::Values(x));
        };
        fits(x, (m, k))?;
        words.resize(packed_len(m, k, MR), 0);
        let rows = pack_panels(x, (m, k), MR, (false, true), words);
        PackedA::from_words(words, m, k, rows)
            .map(Left::Words)
            .ok_or_else(sizes)
    }
}

impl<'a> Right<'a> {
    /// `x` (`k x n`) as a right operand: its values, or, given `words`, rounded and packed
    /// into them as [`product`] packs it (panels of `NR` columns, pairs along `k`).
    ///
    /// # Errors
    /// `x` not inside its buffer for `k x n`.
    pub(super) fn of(
        x: Mat<'a>,
        (k, n): (usize, usize),
        words: Option<&'a mut Vec<u32>>,
    ) -> candle_core::Result<Right<'a>> {
        let Some(words) = words else {
            return Ok(Right::Values(x));
        };
        fits(x, (k, n))?;
        words.resize(packed_len(n, k, NR), 0);
        pack_panels(x.t(), (n, k), NR, (false, false), words);
        Packed::from_words(words, k, n)
            .map(Right::Words)
            .ok_or_else(sizes)
    }
}

/// `dst = (accumulate ? dst : 0) + alpha a b` for `a` `m x k` and `b` `k x n`, with `dst`'s
/// element `(i, j)` at `offset + i * rs + j`, on the calling thread: [`product`] on values
/// (rounded to bf16 and packed there with bf16 `precision`), [`product_prepacked`] on words.
///
/// # Errors
/// Operands of other sizes, or one of values and one of words; the products' errors.
#[allow(clippy::too_many_arguments)]
pub(super) fn head_product(
    (m, n, k): (usize, usize, usize),
    dst: Dst<'_>,
    at: (usize, usize),
    accumulate: bool,
    operands: (Left<'_>, Right<'_>),
    alpha: f32,
    precision: Precision,
) -> candle_core::Result<()> {
    match operands {
        (Left::Values(a), Right::Values(b)) => product(
            (m, n, k),
            dst,
            at,
            accumulate,
            a,
            b,
            alpha,
            false,
            precision,
        ),
        (Left::Words(a), Right::Words(b)) if (a.m(), b.n(), a.k()) == (m, n, k) => {
            product_prepacked(dst, at, accumulate, (a, b), alpha, false)
        }
        _ => Err(candle_core::Error::Msg(format!(
            "attention: the operands of a {m}x{k} by {k}x{n} product"
        ))),
    }
}

/// Where each operand a head keeps for the backward lies in its block of words (see the
/// module doc), for `t` tokens, head dim `d` and tiles of `tile` query rows.
#[derive(Clone, Copy)]
pub(super) struct HeadLayout {
    t: usize,
    d: usize,
    tile: usize,
}

impl HeadLayout {
    /// The layout of `t` tokens of head dim `d` in tiles of `tile` query rows.
    pub(super) fn new(t: usize, d: usize, tile: usize) -> HeadLayout {
        HeadLayout {
            t,
            d,
            tile: tile.max(1),
        }
    }

    /// Words of q by rows: `t` rows of pair words and one panel of `MR` zero rows past the
    /// last whole panel, so that any tile's rows `i0..i0 + r` are whole panels.
    fn q_rows_len(&self) -> usize {
        (self.t.next_multiple_of(MR) + MR) * self.d.div_ceil(2)
    }

    /// Words of `K^T` or `V^T` (`d x t`: panels of `NR` tokens, pairs along `d`).
    fn keys_len(&self) -> usize {
        packed_len(self.t, self.d, NR)
    }

    /// Words of the tile of q starting at row `i0` as a right operand (`r x d`), and of the
    /// tiles before it.
    fn q_tile_at(&self, i0: usize) -> (usize, usize) {
        let r = self.tile.min(self.t - i0);
        (
            (i0 / self.tile) * packed_len(self.d, self.tile, NR),
            packed_len(self.d, r, NR),
        )
    }

    /// Words of q by tiles of rows as right operands, every tile's in turn.
    fn q_tiles_len(&self) -> usize {
        let last = (self.t.max(1) - 1) / self.tile * self.tile;
        let (before, len) = self.q_tile_at(last);
        before + len
    }

    /// Offsets of q by rows, `K^T`, `V^T`, q by tiles and K (`t x d`) in the block, and its
    /// end.
    fn offsets(&self) -> [usize; 6] {
        let q_t = self.q_rows_len();
        let v_t = q_t + self.keys_len();
        let q_tiles = v_t + self.keys_len();
        let k = q_tiles + self.q_tiles_len();
        [0, q_t, v_t, q_tiles, k, k + packed_len(self.d, self.t, NR)]
    }

    /// Words of one head's block.
    pub(super) fn len(&self) -> usize {
        self.offsets()[5]
    }

    /// Rounds and packs a head's rotated q, k and v (each `t x d`) into its block `out`
    /// ([`HeadLayout::len`] words, every one written) as their products read them.
    ///
    /// # Errors
    /// A block of another size; an operand not inside its buffer.
    pub(super) fn pack(
        &self,
        (q, k, v): (Mat<'_>, Mat<'_>, Mat<'_>),
        out: &mut [u32],
    ) -> candle_core::Result<()> {
        let HeadLayout { t, d, tile } = *self;
        let [_, k_t, v_t, q_tiles, keys, end] = self.offsets();
        if out.len() != end {
            return Err(sizes());
        }
        for x in [q, k, v] {
            fits(x, (t, d))?;
        }
        let rows = &mut out[..k_t];
        let (q_words, padding) = rows.split_at_mut(packed_len(t, d, MR));
        if !pack_panels(q, (t, d), MR, (false, true), q_words) {
            return Err(candle_core::Error::Msg(
                "attention: q's rows are not contiguous".into(),
            ));
        }
        padding.fill(0);
        pack_panels(k, (t, d), NR, (false, false), &mut out[k_t..v_t]);
        pack_panels(v, (t, d), NR, (false, false), &mut out[v_t..q_tiles]);
        for i0 in (0..t).step_by(tile) {
            let (at, len) = self.q_tile_at(i0);
            let r = tile.min(t - i0);
            let tile_words = &mut out[q_tiles + at..q_tiles + at + len];
            pack_panels(from_row(q, i0).t(), (d, r), NR, (false, false), tile_words);
        }
        pack_panels(k.t(), (d, t), NR, (false, false), &mut out[keys..end]);
        Ok(())
    }
}

/// One head's kept words: a block laid out by its [`HeadLayout`].
#[derive(Clone, Copy)]
pub(super) struct HeadWords<'a> {
    words: &'a [u32],
    layout: HeadLayout,
}

impl<'a> HeadWords<'a> {
    /// The block `words` laid out by `layout`.
    ///
    /// # Errors
    /// A block of another size.
    pub(super) fn new(words: &'a [u32], layout: HeadLayout) -> candle_core::Result<Self> {
        if words.len() == layout.len() {
            Ok(HeadWords { words, layout })
        } else {
            Err(sizes())
        }
    }

    /// Rows `i0..i0 + r` of q as a left operand (`r x d`, by rows).
    pub(super) fn q_rows(&self, i0: usize, r: usize) -> candle_core::Result<Left<'a>> {
        let d = self.layout.d;
        let start = i0 * d.div_ceil(2);
        let words = self
            .words
            .get(start..start + packed_len(r, d, MR))
            .filter(|_| i0 + r <= self.layout.t)
            .ok_or_else(sizes)?;
        PackedA::from_words(words, r, d, true)
            .map(Left::Words)
            .ok_or_else(sizes)
    }

    /// `K^T` as a right operand (`d x t`).
    pub(super) fn k_t(&self) -> candle_core::Result<Right<'a>> {
        self.right(1, (self.layout.d, self.layout.t))
    }

    /// `V^T` as a right operand (`d x t`).
    pub(super) fn v_t(&self) -> candle_core::Result<Right<'a>> {
        self.right(2, (self.layout.d, self.layout.t))
    }

    /// K as a right operand (`t x d`).
    pub(super) fn k(&self) -> candle_core::Result<Right<'a>> {
        self.right(4, (self.layout.t, self.layout.d))
    }

    /// Rows `i0..i0 + r` of q (a whole tile) as a right operand (`r x d`).
    pub(super) fn q_tile(&self, i0: usize, r: usize) -> candle_core::Result<Right<'a>> {
        let HeadLayout { t, d, tile } = self.layout;
        if !i0.is_multiple_of(tile) || i0 >= t || r != tile.min(t - i0) {
            return Err(sizes());
        }
        let (at, len) = self.layout.q_tile_at(i0);
        let start = self.layout.offsets()[3] + at;
        Packed::from_words(&self.words[start..start + len], r, d)
            .map(Right::Words)
            .ok_or_else(sizes)
    }

    /// Part `which` of the block ([`HeadLayout::offsets`]) as a right operand `k x n`.
    fn right(&self, which: usize, (k, n): (usize, usize)) -> candle_core::Result<Right<'a>> {
        let offsets = self.layout.offsets();
        Packed::from_words(&self.words[offsets[which]..offsets[which + 1]], k, n)
            .map(Right::Words)
            .ok_or_else(sizes)
    }
}

/// Rows `i0..` of `x`.
pub(super) fn from_row(x: Mat<'_>, i0: usize) -> Mat<'_> {
    Mat {
        offset: x.offset + i0 * x.rs,
        ..x
    }
}

/// `x` inside its buffer for `rows x cols`.
fn fits(x: Mat<'_>, (rows, cols): (usize, usize)) -> candle_core::Result<()> {
    if x.fits(rows, cols) {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "attention: a {rows}x{cols} operand outside its buffer"
        )))
    }
}

/// The error of packed operands whose sizes do not agree.
fn sizes() -> candle_core::Error {
    candle_core::Error::Msg("attention: packed operand sizes".into())
}
