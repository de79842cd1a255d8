//! A pre-norm block's dense stages at inference with bf16 products, by blocks of rows that
//! stay in cache (the vision transformer's blocks, [`crate::vision::block`]):
//!
//! ```text
//! attention_half   qkv = LayerNorm(x) [Wq; Wk; Wv]^T + [bq; bk; bv]      normed_product
//!                  c = Attention(qkv)                 per (sequence, head): `attention`
//!                  y = x + lambda (c Wo^T + bo)                        scaled_residual
//! mlp_half         y = h + lambda (gelu(LayerNorm(h) W1^T + b1) W2^T + b2)
//! LayerNorm(x) = (x - mean) / sqrt(var + eps) * w_n + b_n,   gelu(u) = u Phi(u) (erf)
//!                                                   (`gelu_erf_fast`, 2^-14 of it relatively)
//! ```
//!
//! Each block of rows (a few panels of the kernel's `MR` rows, one task on the threads) is
//! normed, rounded to bf16 pair words once, in the row layout the product reads, multiplied
//! on the calling thread by the weight `W^T` packed ahead, and finished while in cache: the
//! output rows start as the bias and the product adds into them; the GELU, the layer scale and
//! the residual are applied to the block's rows before the next block. So no full-size pass
//! is made for the norm, the bias fill, the GELU or the rounding, and no output is zeroed.
//! The attention writes its context as bf16 words straight into the layout the output
//! projection reads.
//! The products are those of [`crate::cpu::bf16`] (operands rounded to bf16, f32 sums); the
//! norm, softmax, GELU and joins stay f32. The op-by-op path of the vision layers (candle's
//! layer norm, `autograd::linear`, `autograd::attention`, `autograd::layer_scale`) is the
//! reference the tests hold these to.

mod attention;

use std::ops::Range;

use rotary::CosSinView;

use crate::cpu::bf16::{pack_rows_fast, packed_len, Packed, PackedA, MR};
use crate::cpu::math::{gelu_erf_fast, layer_norm_row, multiversion};
use crate::cpu::product::product_prepacked;
use crate::cpu::rows::{build_rows, filled};
use crate::cpu::{Dst, SharedOut};
pub(crate) use attention::Heads;

#[cfg(test)]
mod tests;

/// Row panels of the kernel (`MR` rows each) one task takes at most: four, as the kernel's
/// own tasks, so each panel of the weight read from memory serves four panels of rows.
const MAX_BLOCK_PANELS: usize = 4;

/// A dense layer of these stages: `W^T` (`in x out`) packed for the bf16 products, and the
/// bias (`[out]`) if any.
#[derive(Clone, Copy)]
pub(crate) struct PackedDense<'a> {
    /// `W^T`, packed.
    pub(crate) weight: Packed<'a>,
    /// `b`.
    pub(crate) bias: Option<&'a [f32]>,
}

/// A layer norm's weight and bias (`[width]` each) and epsilon.
#[derive(Clone, Copy)]
pub(crate) struct RowLayerNorm<'a> {
    /// `w_n`.
    pub(crate) weight: &'a [f32],
    /// `b_n`.
    pub(crate) bias: &'a [f32],
    /// `eps`.
    pub(crate) eps: f32,
}

/// `y = x + lambda (Attention(LayerNorm(x) Wqkv^T + bqkv) Wo^T + bo)` for `x` `[b * t,
/// hidden]` in `dims`' sequences and heads, `qkv` the three projections stacked (`W^T`:
/// `hidden x 3 hidden`, `[q | k | v]`), `out` the output projection, `rope` the rotation of q
/// and k (a row per token of a sequence, or of the batch), `lambda` `[hidden]`: `[b * t,
/// hidden]`.
///
/// # Errors
/// Sizes that do not fit each other (an odd head dim among them); rotary errors; the
/// products' errors (a CPU without a native bf16 kernel: callers run the reference there).
pub(crate) fn attention_half(
    x: &[f32],
    dims: Heads,
    norm: RowLayerNorm<'_>,
    (qkv, out): (PackedDense<'_>, PackedDense<'_>),
    rope: Option<CosSinView<'_>>,
    lambda: &[f32],
) -> candle_core::Result<Vec<f32>> {
    let projections = normed_product(x, norm, qkv)?;
    let context = attention::context_words(&projections, dims, rope)?;
    scaled_residual(&context, x, out, lambda)
}

/// `u = LayerNorm(x) W^T + b` for `x` `[rows, in]`: `[rows, out]`.
fn normed_product(
    x: &[f32],
    norm: RowLayerNorm<'_>,
    dense: PackedDense<'_>,
) -> candle_core::Result<Vec<f32>> {
    let (k, n) = (dense.weight.k(), dense.weight.n());
    let rows = rows_of(x, k, "normed product")?;
    check_norm(norm, k)?;
    check_dense(dense, "normed product")?;
    build_rows(rows, n, &blocks(rows), true, |r, out| {
        let words = normed_words(&x[r.start * k..r.end * k], norm);
        let u = out.init(None, &[dense.bias]);
        times(&words, r.len(), dense, u)
    })
}

/// `y = r + lambda (c W^T + b)` for `c` `[rows, in]` as bf16 pair words (the row layout of
/// [`pack_rows`]) and the residual `r` `[rows, out]`, `lambda` `[out]`: `[rows, out]`.
fn scaled_residual(
    c: &[u32],
    residual: &[f32],
    dense: PackedDense<'_>,
    lambda: &[f32],
) -> candle_core::Result<Vec<f32>> {
    let (k, n) = (dense.weight.k(), dense.weight.n());
    check_dense(dense, "scaled residual")?;
    let rows = rows_of(residual, n, "scaled residual")?;
    if c.len() != packed_len(rows, k, MR) || lambda.len() != n {
        return Err(candle_core::Error::Msg(format!(
            "scaled residual: {} words of inputs and a scale of {} for {rows} rows of {n}",
            c.len(),
            lambda.len()
        )));
    }
    let pairs = k.div_ceil(2);
    build_rows(rows, n, &blocks(rows), true, |r, out| {
        let words = &c[r.start * pairs..(r.start + r.len().next_multiple_of(MR)) * pairs];
        let y = out.init(None, &[dense.bias]);
        times(words, r.len(), dense, y)?;
        join(y, &residual[r.start * n..r.end * n], lambda);
        Ok(())
    })
}

/// `y = h + lambda (gelu(LayerNorm(h) W1^T + b1) W2^T + b2)` for `h` `[rows, hidden]`, `up`
/// (`W1^T`: `hidden x inner`), `down` (`W2^T`: `inner x hidden`), `lambda` `[hidden]`:
/// `[rows, hidden]`.
///
/// # Errors
/// Sizes that do not fit each other; the products' errors.
pub(crate) fn mlp_half(
    h: &[f32],
    norm: RowLayerNorm<'_>,
    (up, down): (PackedDense<'_>, PackedDense<'_>),
    lambda: &[f32],
) -> candle_core::Result<Vec<f32>> {
    let (hidden, inner) = (up.weight.k(), up.weight.n());
    let rows = rows_of(h, hidden, "mlp half")?;
    check_norm(norm, hidden)?;
    check_dense(up, "mlp half")?;
    check_dense(down, "mlp half")?;
    if down.weight.k() != inner || down.weight.n() != hidden || lambda.len() != hidden {
        return Err(candle_core::Error::Msg(format!(
            "mlp half: {hidden} -> {inner} then {} -> {} with a scale of {}",
            down.weight.k(),
            down.weight.n(),
            lambda.len()
        )));
    }
    build_rows(rows, hidden, &blocks(rows), true, |r, out| {
        let m = r.len();
        let words = normed_words(&h[r.start * hidden..r.end * hidden], norm);
        let mut u = filled(m, inner, None, &[up.bias])?;
        times(&words, m, up, &mut u)?;
        // Each row through the GELU and rounded while it is in L1.
        let mut words = vec![0u32; packed_len(m, inner, MR)];
        let shared = SharedOut::new(&mut words);
        for (j, row) in u.chunks_exact_mut(inner).enumerate() {
            gelu_erf_fast(row);
            pack_rows_fast(row, inner, j, shared);
        }
        let y = out.init(None, &[down.bias]);
        times(&words, m, down, y)?;
        join(y, &h[r.start * hidden..r.end * hidden], lambda);
        Ok(())
    })
}

/// The row blocks of `rows` rows: whole panels of `MR` rows, at most [`MAX_BLOCK_PANELS`] a
/// block, in a number of blocks that is a multiple of the threads, the panels dealt out evenly
/// (block `i` ends at panel `(i + 1) P / B`): blocks differ by one panel at most and the short
/// ones are spread, so each thread's half of the list holds the same work and neither waits for
/// the other at the end of a stage (1,608 rows, 134 panels, on 2 threads: 34 blocks, two of
/// three panels 17 blocks apart, the rest of four; 201 rows: six blocks of two or three panels).
fn blocks(rows: usize) -> Vec<Range<usize>> {
    let threads = rayon::current_num_threads().max(1);
    let panels = rows.div_ceil(MR);
    let tasks = panels
        .div_ceil(MAX_BLOCK_PANELS)
        .next_multiple_of(threads)
        .min(panels);
    let end = |i: usize| (i * panels / tasks * MR).min(rows);
    (0..tasks).map(|i| end(i)..end(i + 1)).collect()
}

/// The rows of `width` in `x`.
fn rows_of(x: &[f32], width: usize, what: &str) -> candle_core::Result<usize> {
    if width == 0 || !x.len().is_multiple_of(width) {
        return Err(candle_core::Error::Msg(format!(
            "{what}: {} values are no rows of {width}",
            x.len()
        )));
    }
    Ok(x.len() / width)
}

/// A norm of `width` values.
fn check_norm(norm: RowLayerNorm<'_>, width: usize) -> candle_core::Result<()> {
    if norm.weight.len() == width && norm.bias.len() == width {
        return Ok(());
    }
    Err(candle_core::Error::Msg(format!(
        "layer norm: a weight of {} and a bias of {} for rows of {width}",
        norm.weight.len(),
        norm.bias.len()
    )))
}

/// A layer with outputs, and a bias of its output width if any.
fn check_dense(dense: PackedDense<'_>, what: &str) -> candle_core::Result<()> {
    let n = dense.weight.n();
    if n > 0 && dense.bias.is_none_or(|b| b.len() == n) {
        return Ok(());
    }
    Err(candle_core::Error::Msg(format!(
        "{what}: a layer of {n} outputs with a bias of {:?}",
        dense.bias.map(<[f32]>::len)
    )))
}

/// `rows` (whole rows of `norm`'s width) normed, as bf16 pair words (see [`pack_rows`]):
/// each row normed in a row of scratch and rounded from there.
fn normed_words(rows: &[f32], norm: RowLayerNorm<'_>) -> Vec<u32> {
    let width = norm.weight.len();
    let mut words = vec![0u32; packed_len(rows.len() / width, width, MR)];
    let out = SharedOut::new(&mut words);
    let mut normed = vec![0f32; width];
    for (j, row) in rows.chunks_exact(width).enumerate() {
        normed.copy_from_slice(row);
        layer_norm_row(&mut normed, norm.weight, norm.bias, norm.eps);
        pack_rows_fast(&normed, width, j, out);
    }
    words
}

/// `rows` (whole rows of `width`) as bf16 pair words in the row layout of a left operand,
/// padded with zero rows to whole panels of `MR`.
fn pack_rows(rows: &[f32], width: usize) -> Vec<u32> {
    let m = rows.len() / width.max(1);
    let mut words = vec![0u32; packed_len(m, width, MR)];
    pack_rows_fast(rows, width, 0, SharedOut::new(&mut words));
    words
}

/// `out += a W^T` for the `m` rows `a` (pair words of [`pack_rows`]), on the calling thread.
fn times(
    words: &[u32],
    m: usize,
    dense: PackedDense<'_>,
    out: &mut [f32],
) -> candle_core::Result<()> {
    let (k, n) = (dense.weight.k(), dense.weight.n());
    let a = PackedA::from_words(words, m, k, true)
        .ok_or_else(|| candle_core::Error::Msg(format!("packed rows: {m}x{k} words")))?;
    product_prepacked(Dst::Slice(out), (0, n), true, (a, dense.weight), 1.0, false)
}

multiversion! {
    /// `y <- r + lambda y`, row by row (`lambda` one row wide).
    fn join(y: &mut [f32], residual: &[f32], lambda: &[f32]) {
        for (y, r) in y
            .chunks_exact_mut(lambda.len())
            .zip(residual.chunks_exact(lambda.len()))
        {
            for ((y, r), l) in y.iter_mut().zip(r).zip(lambda) {
                *y = r + l * *y;
            }
        }
    }
}
