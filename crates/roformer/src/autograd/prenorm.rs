//! The passes shared by the pre-norm branch ops ([`super::mlp_branch`],
//! [`super::attention_branch`]), on plain f32 rows of `width` values:
//!
//! ```text
//! norm     xn = xh w_n + b_n,   xh = (h - mu) r,   r = 1 / sqrt(var + eps)   (mu, r kept)
//! join     y = h + f_s lambda (m + b)                             (f_s: sample s's factor)
//! join'    dm = g f_s lambda,   dlambda = sum g f_s (m + b),   db = sum dm
//! norm'    dh = g + r (dxn w_n - mean(dxn w_n) - xh mean(dxn w_n xh))
//!          dw_n = sum dxn xh,   db_n = sum dxn
//! ```
//!
//! (`f_s` is `1 / (1 - p)` for a kept sample, 0 for a dropped one, 1 without stochastic depth;
//! sums over all rows, as partial sums of [`SUM_ROWS`] rows added in order, so the same on any
//! thread count). `m` is a dense layer's product alone ([`dense_store`]), its bias `b` added
//! where the join reads it (zeros without one). Each pass is one sweep over its rows on the
//! threads; `xn` and `dm` are made
//! as [`Kept`] activations (with bf16 products: rounded once, into the layouts their products
//! read). [`Branch`] and [`BranchOp`] make a branch's forward and backward on slices one candle op
//! of its input and its flat parameters (and so the post-norm encoder layer's,
//! [`super::encoder_layer`]).

use std::borrow::Cow;
use std::ops::Range;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::autograd::attention::Parts;
use crate::autograd::dropout::KeepMask;
use crate::cpu::bf16::Packed;
use crate::cpu::kept::{Kept, Side};
use crate::cpu::kept_weight::KeptWeight;
use crate::cpu::mat::SharedOut;
use crate::cpu::math::layer_norm_row;
use crate::cpu::policy::{PASS_CHUNK, SUM_ROWS};
use crate::cpu::rows::build_rows;
use crate::cpu::tensor::{f32_slice, tensor, with_f32};
use crate::cpu::{recycle, Precision};

/// Consecutive ranges of a flat parameter vector, handed out in order.
#[derive(Default)]
pub(crate) struct Cursor(usize);

impl Cursor {
    /// The next `n` elements.
    pub(crate) fn take(&mut self, n: usize) -> Range<usize> {
        self.0 += n;
        self.0 - n..self.0
    }

    /// The next `n` elements when `present`.
    pub(crate) fn take_if(&mut self, present: bool, n: usize) -> Option<Range<usize>> {
        present.then(|| self.take(n))
    }

    /// The elements handed out.
    pub(crate) fn len(&self) -> usize {
        self.0
    }
}

/// The per-sample factors of stochastic depth (none: all 1).
pub(crate) struct Samples(Option<Vec<f32>>);

impl Samples {
    /// The factors of `keep`'s samples.
    pub(crate) fn new(keep: Option<KeepMask>) -> Samples {
        Samples(keep.map(|m| m.factors()))
    }

    /// The factor of row `i` of `rows` rows.
    fn factor(&self, i: usize, rows: usize) -> f32 {
        self.0.as_ref().map_or(1.0, |f| {
            let per_sample = rows / f.len().max(1);
            f[i / per_sample.max(1)]
        })
    }

    /// `y = h + f_s lambda (m + b)` (`join` above) for the product `m` and its bias `b`
    /// (zeros without one), each row written once (no zeroed buffer).
    ///
    /// # Errors
    /// None in practice (the blocks cover the rows); the row builder's errors.
    pub(crate) fn join(
        &self,
        h: &[f32],
        (m, bias): (&[f32], Option<&[f32]>),
        lambda: &[f32],
    ) -> candle_core::Result<Vec<f32>> {
        let width = lambda.len().max(1);
        let rows = h.len() / width;
        let b = or_zeros(bias, lambda.len());
        build_rows(rows, width, &row_blocks(rows, width), true, |block, out| {
            let y = out.init(Some(&h[block.start * width..block.end * width]), &[]);
            for (j, row) in y.chunks_exact_mut(width).enumerate() {
                let i = block.start + j;
                let f = self.factor(i, rows);
                let m = &m[i * width..][..width];
                for ((o, (m, b)), l) in row.iter_mut().zip(m.iter().zip(b.iter())).zip(lambda) {
                    *o += f * l * (m + b);
                }
            }
            Ok(())
        })
    }

    /// `(dm, dlambda, db)` of `join` from the output's gradient `g` (`join'` above), for the
    /// product `m` and its bias (zeros without one), `dm` kept for `precision`'s products as
    /// the gradient of a dense layer's output.
    pub(crate) fn join_backward(
        &self,
        g: &[f32],
        (m, bias): (&[f32], Option<&[f32]>),
        lambda: &[f32],
        precision: Precision,
    ) -> (Kept, Vec<f32>, Vec<f32>) {
        let width = lambda.len();
        let rows = g.len() / width.max(1);
        let b = or_zeros(bias, width);
        let (dm, sums) = Kept::build(
            (rows, width),
            Side::Gradient,
            precision,
            2,
            |i, row, sums| {
                let f = self.factor(i, rows);
                let (dl, db) = sums.split_at_mut(width);
                let (g, m) = (&g[i * width..][..width], &m[i * width..][..width]);
                for ((d, (g, (m, b))), (l, (dl, db))) in row
                    .iter_mut()
                    .zip(g.iter().zip(m.iter().zip(b.iter())))
                    .zip(lambda.iter().zip(dl.iter_mut().zip(db.iter_mut())))
                {
                    let gf = g * f;
                    *dl += gf * (m + b);
                    *d = gf * l;
                    *db += *d;
                }
            },
        );
        let (dl, db) = sums.split_at(width);
        (dm, dl.to_vec(), db.to_vec())
    }
}

/// The slice of `flat` at `range`, if any (a parameter that may be absent, as a bias).
pub(crate) fn part<'f>(flat: &'f [f32], range: &Option<Range<usize>>) -> Option<&'f [f32]> {
    range.clone().map(|r| &flat[r])
}

/// `bias`, or `width` zeros without one: what a dense layer's consumer adds to its product.
/// Without a bias, `s + 0` is `s` for every value but `-0`, which becomes `+0` (the join's
/// `h + f lambda (s + 0)` then differs from `h + f lambda s` only where `h` is `-0` too).
pub(crate) fn or_zeros(bias: Option<&[f32]>, width: usize) -> Cow<'_, [f32]> {
    bias.map_or_else(|| Cow::Owned(vec![0.0; width]), Cow::Borrowed)
}

/// The layer norm of every row of `h` (`norm` above), kept for `precision`'s products as a
/// dense layer's input, and each row's `(mu, r)`.
pub(crate) fn norm_rows(
    h: &[f32],
    (weight, bias): (&[f32], &[f32]),
    eps: f32,
    precision: Precision,
) -> (Kept, Vec<(f32, f32)>) {
    let width = weight.len().max(1);
    let rows = h.len() / width;
    let mut stats = vec![(0f32, 0f32); rows];
    let out = SharedOut::new(&mut stats);
    let (xn, _) = Kept::build((rows, width), Side::Input, precision, 0, |i, row, _| {
        row.copy_from_slice(&h[i * width..][..width]);
        // SAFETY: row i's task alone writes its statistics.
        let slot = unsafe { out.slice(i, 1) };
        slot[0] = layer_norm_row(row, weight, bias, eps);
    });
    (xn, stats)
}

/// Turns `dxn` (the gradient of the normed rows) into `dh = g + norm'(dxn)` in place and
/// returns `(dw_n, db_n)` (`norm'` above), from `h`, its row statistics and the norm's weight.
pub(crate) fn norm_backward(
    dxn: &mut [f32],
    g: &[f32],
    h: &[f32],
    stats: &[(f32, f32)],
    weight: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let width = weight.len();
    let n = width as f32;
    let sums = rows_with_sums(dxn, width, 2, |i, row, sums| {
        let (mean, r) = stats[i];
        let (dw, db) = sums.split_at_mut(width);
        let hr = &h[i * width..][..width];
        let (mut s1, mut s2) = (0f32, 0f32);
        for ((d, x), (w, (dw, db))) in row
            .iter()
            .zip(hr)
            .zip(weight.iter().zip(dw.iter_mut().zip(db.iter_mut())))
        {
            let xh = (x - mean) * r;
            let gw = d * w;
            s1 += gw;
            s2 += gw * xh;
            *dw += d * xh;
            *db += d;
        }
        let (m1, m2) = (s1 / n, s2 / n);
        let gr = &g[i * width..][..width];
        for (((d, x), w), g) in row.iter_mut().zip(hr).zip(weight).zip(gr) {
            let xh = (x - mean) * r;
            *d = g + r * (*d * w - m1 - xh * m2);
        }
    });
    let (dw, db) = sums.split_at(width);
    (dw.to_vec(), db.to_vec())
}

/// `[rows, width]` rows each equal to `bias` (zeros without one), written once on the threads.
///
/// # Errors
/// None in practice (the blocks cover the rows); the row builder's errors.
pub(crate) fn bias_rows(
    rows: usize,
    width: usize,
    bias: Option<&[f32]>,
) -> candle_core::Result<Vec<f32>> {
    build_rows(rows, width, &row_blocks(rows, width), true, |_, out| {
        out.init(None, &[bias]);
        Ok(())
    })
}

/// `0..rows` in blocks of about [`PASS_CHUNK`] values (rows of `width`), for [`build_rows`].
fn row_blocks(rows: usize, width: usize) -> Vec<Range<usize>> {
    let per_block = (PASS_CHUNK / width.max(1)).max(1);
    (0..rows)
        .step_by(per_block)
        .map(|start| start..(start + per_block).min(rows))
        .collect()
}

/// `input w^T + bias` for `w` `[out, input's width]` (with bf16 products read as its words
/// packed once for the step, where given: [`KeptWeight::forward`]), the bias preloaded.
///
/// # Errors
/// Sizes that do not fit; the products' errors.
pub(crate) fn dense(
    input: &Kept,
    w: (&[f32], Option<Packed<'_>>),
    bias: Option<&[f32]>,
    out: usize,
    rows: usize,
) -> candle_core::Result<Vec<f32>> {
    let mut y = bias_rows(rows, out, bias)?;
    input.times_wt(w, out, &mut y, bias.is_some())?;
    Ok(y)
}

/// `input w^T` for `w` `[out, input's width]` (as [`dense`]), the product alone: written
/// whole without reading the output (no bias fill before it, no load of each tile of the
/// output in the products' last step), into a buffer from [`recycle`]; the pass that next
/// reads each row adds the bias ([`Samples::join`], [`super::kept_rows::gelu`]). `(input w^T) + b`
/// there is, element by element, the same f32 value as [`dense`]'s `b + (input w^T)`: both
/// kernels add the preloaded output once, after the sum over `k` (bf16: one sum per tile;
/// f32: where gemm does not split `k`), and f32 addition commutes.
///
/// # Errors
/// Sizes that do not fit; the products' errors.
pub(crate) fn dense_store(
    input: &Kept,
    w: (&[f32], Option<Packed<'_>>),
    out: usize,
    rows: usize,
) -> candle_core::Result<Vec<f32>> {
    let mut y = recycle::take(rows * out);
    input.times_wt(w, out, &mut y, false)?;
    Ok(y)
}

/// `q = input Wq^T + bq`, `k = input Wk^T + bk`, `v = input Wv^T + bv`, each `[rows, hidden]`
/// apart (the layouts the attention reads), for `w_qkv` the stacked `[Wq; Wk; Wv]` (`[3
/// hidden, input's width]`, with bf16 products read as `kept`'s three parts) and each bias
/// where there is one.
///
/// # Errors
/// Sizes that do not fit; the products' errors.
pub(crate) fn projections(
    input: &Kept,
    (w_qkv, kept): (&[f32], &KeptWeight),
    biases: [Option<&[f32]>; 3],
    hidden: usize,
    rows: usize,
) -> candle_core::Result<Parts> {
    let w = w_qkv.len() / 3;
    let [bq, bk, bv] = biases;
    let part = |i: usize| (&w_qkv[i * w..(i + 1) * w], kept.forward(i));
    Ok((
        dense(input, part(0), bq, hidden, rows)?,
        dense(input, part(1), bk, hidden, rows)?,
        dense(input, part(2), bv, hidden, rows)?,
    ))
}

/// Runs `f(i, row_i, sums)` over every row of `width` values of `buf` (rows changed in place)
/// in blocks of [`SUM_ROWS`] rows on the threads, each block adding into its own `count *
/// width` partial sums, which are then added in order (the same result on any thread count).
pub(crate) fn rows_with_sums(
    buf: &mut [f32],
    width: usize,
    count: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) -> Vec<f32> {
    let n = count * width;
    let width = width.max(1);
    let partials: Vec<Vec<f32>> = buf
        .par_chunks_mut(SUM_ROWS * width)
        .enumerate()
        .map(|(b, block)| {
            let mut sums = vec![0f32; n];
            for (j, row) in block.chunks_exact_mut(width).enumerate() {
                f(b * SUM_ROWS + j, row, &mut sums);
            }
            sums
        })
        .collect();
    let mut total = vec![0f32; n];
    for p in partials {
        total.iter_mut().zip(p).for_each(|(s, v)| *s += v);
    }
    total
}

/// A block's part `y = F(x; flat)` on rows of f32 (a pre-norm branch `x + f(x; flat)`, a
/// post-norm layer), its parameters one flat vector: the forward (which keeps what its
/// backward needs) and the backward, on plain slices.
pub(crate) trait Branch: Send + Sync {
    /// The op's name in candle's graph and in its messages.
    fn name(&self) -> &'static str;

    /// The length of `flat`, the parameters.
    fn flat_len(&self) -> usize;

    /// What the length of `x` is a multiple of: the values of one sample, or of one row.
    fn input_block(&self) -> usize;

    /// `y` for the input rows `x` and the parameters `flat`, their sizes checked by
    /// [`BranchOp`] ([`Branch::flat_len`], [`Branch::input_block`]).
    fn forward(&self, x: &[f32], flat: &[f32]) -> candle_core::Result<Vec<f32>>;

    /// `(dx, dflat)` from the output's gradient `g`, after [`Branch::forward`]; `g` has
    /// `x`'s length, checked by [`BranchOp`].
    fn backward(
        &self,
        x: &[f32],
        flat: &[f32],
        g: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Vec<f32>)>;
}

/// A [`Branch`] as one candle op of `(x, flat)`, contiguous f32 CPU tensors: `y` has `x`'s
/// shape, the gradients are `dx` and `dflat`.
pub(crate) struct BranchOp<B>(pub(crate) B);

impl<B: Branch> CustomOp2 for BranchOp<B> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let what = self.0.name();
        let x = f32_slice(s1, l1, what)?;
        let flat = f32_slice(s2, l2, what)?;
        if flat.len() != self.0.flat_len() || !x.len().is_multiple_of(self.0.input_block()) {
            return Err(candle_core::Error::Msg(format!("{what}: input sizes")));
        }
        Ok((
            CpuStorage::F32(self.0.forward(x, flat)?),
            l1.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        flat: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let what = self.0.name();
        let (dx, dflat) = with_f32(x, what, |x| {
            with_f32(flat, what, |flat| {
                with_f32(g, what, |g| {
                    if g.len() != x.len() || flat.len() != self.0.flat_len() {
                        return Err(candle_core::Error::Msg(format!(
                            "{what} backward: gradient sizes"
                        )));
                    }
                    self.0.backward(x, flat, g)
                })
            })
        })?;
        Ok((
            Some(tensor(dx, x.shape())?),
            Some(tensor(dflat, flat.shape())?),
        ))
    }
}
