//! A dense layer's weight kept for one training step's products, packed once when the step's
//! forward first reads it and dropped (its buffers recycled) after the backward:
//!
//! ```text
//! forward   y  = x W^T      reads W^T: k = in,  panels of NR of W's rows     (`forward`)
//! backward  dx = dy W       reads W:   k = out, panels of NR of W's columns  (`backward`)
//! ```
//!
//! for `W` `[out, in]`, row-major. With bf16 products both layouts are rounded and packed
//! here, once (the words [`PackedB::new`](super::bf16::PackedB::new) writes for each product,
//! bit for bit), where each product used to pack its own on every call (which the tests keep
//! as the reference: `ReferencePath::WeightsPerProduct`). A stacked weight (q, k and v's `[3 hidden, in]`)
//! is `parts` weights of `out / parts` rows for the forward, each read by its own product, and
//! one `[out, in]` for the backward's single product. With f32 products nothing is kept: gemm
//! packs its operands itself, on every call.

use rayon::prelude::*;

use super::bf16::{pack_pairs_into, pack_panels, packed_len, Packed, NR};
use super::mat::{Mat, SharedOut};
use super::precision::Precision;
use super::recycle::{self, Lent};
use super::reference_path::{self, ReferencePath};

/// Rows of `W` per task of the backward layout's pass (even: whole pairs).
const PAIR_ROWS: usize = 2 * NR;

/// A weight `[out, in]` packed once for a step's products (see the module doc).
pub(crate) enum KeptWeight {
    /// Nothing kept: the products read the weight's rows (f32 products; bf16 ones pack them
    /// on every call).
    Rows,
    /// bf16 pair words in the two layouts the products read.
    Bf16 {
        /// `W^T`, each of the `parts` blocks of `out / parts` rows packed apart.
        forward: Lent<u32>,
        /// `W`, pairs of rows in panels of [`NR`] columns.
        backward: Lent<u32>,
        /// `(out, in)`.
        dims: (usize, usize),
        /// The blocks of rows the forward's products read apart.
        parts: usize,
    },
}

impl KeptWeight {
    /// `w` (`[out, inp]`, row-major) kept for `precision`'s products, its forward layout in
    /// `parts` blocks of rows.
    ///
    /// # Errors
    /// A weight whose length is not `out * inp`, or `parts` that does not divide `out`.
    pub(crate) fn new(
        w: &[f32],
        (out, inp): (usize, usize),
        parts: usize,
        precision: Precision,
    ) -> candle_core::Result<Self> {
        if w.len() != out * inp || parts == 0 || !out.is_multiple_of(parts) {
            return Err(candle_core::Error::Msg(format!(
                "kept weight: {} elements for {out}x{inp} in {parts} parts",
                w.len()
            )));
        }
        if precision.bf16_kernel().is_none()
            || reference_path::taken(ReferencePath::WeightsPerProduct)
        {
            return Ok(KeptWeight::Rows);
        }
        let rows = out / parts;
        let part_len = packed_len(rows, inp, NR);
        let mut forward = recycle::take(parts * part_len);
        let mut backward = recycle::take(packed_len(inp, out, NR));
        // Both passes write every word (the padding included).
        for (words, block) in forward
            .chunks_exact_mut(part_len.max(1))
            .zip(w.chunks_exact((rows * inp).max(1)))
        {
            pack_panels(Mat::rows(block, inp), (rows, inp), NR, (true, false), words);
        }
        let by_pairs = SharedOut::new(&mut backward);
        w.par_chunks((PAIR_ROWS * inp).max(1))
            .enumerate()
            .for_each(|(b, block)| {
                pack_pairs_into(block, (inp, out), b * PAIR_ROWS, NR, by_pairs);
            });
        Ok(KeptWeight::Bf16 {
            forward: Lent::new(forward),
            backward: Lent::new(backward),
            dims: (out, inp),
            parts,
        })
    }

    /// The packed `W^T` of block `part` (`k` = in, `n` = out / parts), for `x W^T`; `None`
    /// when nothing is kept or past the last block.
    pub(crate) fn forward(&self, part: usize) -> Option<Packed<'_>> {
        match self {
            KeptWeight::Rows => None,
            KeptWeight::Bf16 {
                forward,
                dims: (out, inp),
                parts,
                ..
            } => {
                let len = forward.len() / parts;
                let words = forward.get(part * len..(part + 1) * len)?;
                Packed::from_words(words, *inp, out / parts)
            }
        }
    }

    /// The packed `W` (`k` = out, `n` = in), for `dy W`; `None` when nothing is kept.
    pub(crate) fn backward(&self) -> Option<Packed<'_>> {
        match self {
            KeptWeight::Rows => None,
            KeptWeight::Bf16 {
                backward,
                dims: (out, inp),
                ..
            } => Packed::from_words(backward, *out, *inp),
        }
    }
}
