//! A post-norm encoder layer (RoFormer's, BERT's) as one op with its own backward, on f32 CPU
//! tensors:
//!
//! ```text
//! forward   q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv   three products, [rows, hidden]
//!           c = Attention(q, k, v)                              (rotation, mask, softmax, dropout)
//!           o = c Wo^T + bo,   a = LayerNorm_1(Dropout_1(o) + x)
//!           u = a W1^T + b1,   i = gelu(u),   m = i W2^T + b2
//!           y = LayerNorm_2(Dropout_2(m) + a)
//! backward  (da, dm) = Tail_2'(g);   db2 = sum dm;   dW2 = dm^T i;   du = (dm W2) gelu'(u)
//!           db1 = sum du;   dW1 = du^T a;   da += du W1
//!           (dx, do) = Tail_1'(da);   dbo = sum do;   dWo = do^T c;   dqkv = Attention'(do Wo)
//!           d[bq; bk; bv] = sum dqkv;   d[Wq; Wk; Wv] = dqkv^T x;   dx += dqkv [Wq; Wk; Wv]
//! ```
//!
//! (`Tail'`: the post-norm tail's backward, [`super::postnorm`]; sums over all rows.) The
//! attention in the middle is [`AttentionCore`], the fused attention's own forward and
//! backward. The parameters travel as ONE flat vector `[Wq | Wk | Wv | bq | bk | bv | Wo | bo
//! | w_1 | b_1 | W1 | b1 | W2 | b2 | w_2 | b_2]` (weights row-major; without biases, as
//! RoFormer-V2's `use_bias: false`, the dense layers' biases are absent), the concatenation of
//! the model's own variables: candle's `cat` hands each variable its slice of the gradient,
//! so names, optimiser and checkpoints see them as before. The forward keeps what the
//! backward reads in buffers of its own, the dense layers' inputs rounded once (bf16) by the
//! pass that makes them; the backward writes every parameter gradient once, in place into
//! the flat gradient, the residuals' gradients added by the products onto the norms'. The
//! dropout masks are drawn by the caller in the op-by-op path's order (the probabilities',
//! then each tail's), so the two paths drop the same elements. q, k and v are each written by
//! their own product where the attention reads them, and their gradients kept as `dqkv` from
//! where the attention leaves them (no split or join copies). `a W1^T` is written
//! store-only, `b1` added by the GELU's pass that reads it.

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::Tensor;
use candle_nn::Linear;

use crate::autograd::attention::{AttentionCore, FusedAttention};
use crate::autograd::dropout::KeepMask;
use crate::autograd::kept_rows;
use crate::autograd::postnorm::Tail;
use crate::autograd::prenorm::{dense, dense_store, part, projections, Branch, BranchOp, Cursor};
use crate::cpu::add_norm::Moments;
use crate::cpu::kept::{Kept, Side};
use crate::cpu::kept_weight::KeptWeight;
use crate::cpu::recycle::{self, Lent};
use crate::cpu::Precision;

/// A layer norm's weight, bias and epsilon.
pub(crate) type LayerNormParts<'a> = (&'a Tensor, &'a Tensor, f64);

/// The parameters of one post-norm encoder layer.
#[derive(Clone, Copy)]
pub(crate) struct EncoderLayer<'a> {
    /// `query`, `key`, `value` (`[hidden, hidden]` each; biases all present or all absent).
    pub(crate) qkv: [&'a Linear; 3],
    /// `attention.output.dense`, `[hidden, hidden]`.
    pub(crate) attention_output: &'a Linear,
    /// `attention.output.LayerNorm`.
    pub(crate) attention_norm: LayerNormParts<'a>,
    /// `intermediate.dense`, `[inner, hidden]`, then the erf GELU.
    pub(crate) intermediate: &'a Linear,
    /// `output.dense`, `[hidden, inner]`.
    pub(crate) output: &'a Linear,
    /// `output.LayerNorm`.
    pub(crate) output_norm: LayerNormParts<'a>,
}

/// The layer of `p` on `x` (`[b, t, hidden]`), the attention as `spec` says (heads, rotation,
/// mask, dropout of the probabilities, the products' precision), `hidden_dropout` the masks of
/// the two tails (`Dropout_1`, `Dropout_2`, over `b t hidden` elements each), as one op on f32
/// CPU tensors (see the module formulas).
///
/// # Errors
/// Parameters whose shapes do not fit `x` or each other, masks that do not fit; candle errors
/// (tensors that are not f32 on the CPU).
pub(crate) fn encoder_layer(
    x: &Tensor,
    p: EncoderLayer<'_>,
    spec: FusedAttention,
    hidden_dropout: [Option<KeepMask>; 2],
) -> candle_core::Result<Tensor> {
    let pieces = Pieces::check(x, &p, &hidden_dropout)?;
    let dense = |layer: &Linear| -> candle_core::Result<Vec<Tensor>> {
        Ok(std::iter::once(layer.weight().flatten_all()?)
            .chain(layer.bias().cloned())
            .collect())
    };
    let norm = |n: LayerNormParts<'_>| [n.0.clone(), n.1.clone()];
    let mut parts = Vec::with_capacity(16);
    for layer in p.qkv {
        parts.push(layer.weight().flatten_all()?);
    }
    parts.extend(p.qkv.iter().filter_map(|l| l.bias().cloned()));
    parts.extend(dense(p.attention_output)?);
    parts.extend(norm(p.attention_norm));
    parts.extend(dense(p.intermediate)?);
    parts.extend(dense(p.output)?);
    parts.extend(norm(p.output_norm));
    let flat = Tensor::cat(&parts, 0)?;
    let [first, second] = hidden_dropout;
    let tail = |norm: LayerNormParts<'_>, mask| Tail {
        eps: norm.2 as f32,
        mask,
    };
    let op = EncoderLayerOp {
        pieces,
        precision: spec.precision,
        core: AttentionCore::new(spec)?,
        tails: [tail(p.attention_norm, first), tail(p.output_norm, second)],
        saved: OnceLock::new(),
    };
    x.contiguous()?.apply_op2(&flat, BranchOp(op))
}

/// Where each parameter lies in the flat vector, and the sizes.
#[derive(Debug, Clone)]
struct Pieces {
    tokens: usize,
    hidden: usize,
    inner: usize,
    /// `[Wq; Wk; Wv]`, `[3 hidden, hidden]`.
    w_qkv: Range<usize>,
    /// `[bq; bk; bv]`, where present.
    b_qkv: Option<Range<usize>>,
    wo: Range<usize>,
    bo: Option<Range<usize>>,
    /// `(w_1, b_1)`.
    norm_1: (Range<usize>, Range<usize>),
    w1: Range<usize>,
    b1: Option<Range<usize>>,
    w2: Range<usize>,
    b2: Option<Range<usize>>,
    /// `(w_2, b_2)`.
    norm_2: (Range<usize>, Range<usize>),
    len: usize,
}

impl Pieces {
    /// The layout of `p`'s flat vector, once every shape is checked against `x` and the
    /// tails' masks against its element count.
    fn check(
        x: &Tensor,
        p: &EncoderLayer<'_>,
        hidden_dropout: &[Option<KeepMask>; 2],
    ) -> candle_core::Result<Self> {
        let (_, tokens, hidden) = x.dims3()?;
        let inner = p.intermediate.weight().dims().first().copied().unwrap_or(0);
        let fits_dense = |l: &Linear, out: usize, inp: usize| {
            l.weight().dims() == [out, inp] && l.bias().is_none_or(|b| b.dims() == [out])
        };
        let fits_norm = |n: &LayerNormParts<'_>| n.0.dims() == [hidden] && n.1.dims() == [hidden];
        let qkv_bias = p.qkv.map(|l| l.bias().is_some());
        let fits = hidden > 0
            && inner > 0
            && p.qkv.iter().all(|l| fits_dense(l, hidden, hidden))
            && (qkv_bias == [true; 3] || qkv_bias == [false; 3])
            && fits_dense(p.attention_output, hidden, hidden)
            && fits_dense(p.intermediate, inner, hidden)
            && fits_dense(p.output, hidden, inner)
            && fits_norm(&p.attention_norm)
            && fits_norm(&p.output_norm);
        if !fits {
            return Err(candle_core::Error::Msg(format!(
                "encoder layer: parameters (intermediate {:?}, output {:?}) do not fit hidden \
                 states of shape {:?}, or query, key and value differ in having a bias",
                p.intermediate.weight().dims(),
                p.output.weight().dims(),
                x.dims()
            )));
        }
        if let Some(mask) = hidden_dropout
            .iter()
            .flatten()
            .find(|m| m.len() != x.elem_count())
        {
            return Err(candle_core::Error::Msg(format!(
                "encoder layer: a dropout mask of {} elements for hidden states of {}",
                mask.len(),
                x.elem_count()
            )));
        }
        let mut at = Cursor::default();
        let w_qkv = at.take(3 * hidden * hidden);
        let b_qkv = at.take_if(qkv_bias[0], 3 * hidden);
        let wo = at.take(hidden * hidden);
        let bo = at.take_if(p.attention_output.bias().is_some(), hidden);
        let norm_1 = (at.take(hidden), at.take(hidden));
        let w1 = at.take(inner * hidden);
        let b1 = at.take_if(p.intermediate.bias().is_some(), inner);
        let w2 = at.take(hidden * inner);
        let b2 = at.take_if(p.output.bias().is_some(), hidden);
        let norm_2 = (at.take(hidden), at.take(hidden));
        Ok(Pieces {
            tokens,
            hidden,
            inner,
            w_qkv,
            b_qkv,
            wo,
            bo,
            norm_1,
            w1,
            b1,
            w2,
            b2,
            norm_2,
            len: at.len(),
        })
    }
}

/// What the forward keeps for the backward: the dense layers' inputs (`x`, `c`, `a`, `i`,
/// kept for their products), the tails' inputs from the dense layers (`o`, `m`) and row
/// moments, `a` as f32 rows (the second tail's residual), and the GELU's slope `gelu'(u)`
/// (the attention keeps its own q, k, v), and the weights packed once.
struct Saved {
    x: Kept,
    context: Kept,
    o: Vec<f32>,
    moments_1: Vec<Moments>,
    a: Vec<f32>,
    a_kept: Kept,
    slope: Lent<f32>,
    i: Kept,
    m: Vec<f32>,
    moments_2: Vec<Moments>,
    /// `[Wq; Wk; Wv]`, `Wo`, `W1`, `W2`, packed once for the step's products.
    weights: [KeptWeight; 4],
}

/// The op: the parameters' layout, the products' precision, the attention, the two tails and
/// the forward's saved buffers.
struct EncoderLayerOp {
    pieces: Pieces,
    precision: Precision,
    core: AttentionCore,
    tails: [Tail; 2],
    saved: OnceLock<Saved>,
}

/// The two halves of a norm's place in `flat`.
fn norm<'f>(flat: &'f [f32], (w, b): &(Range<usize>, Range<usize>)) -> (&'f [f32], &'f [f32]) {
    (&flat[w.clone()], &flat[b.clone()])
}

/// Writes `sums` (`[dw_n | db_n | db]` of a tail, `db` of the dense layer before it) into
/// `grad` at the norm's and the bias's places.
fn put_tail_sums(
    grad: &mut [f32],
    sums: &[f32],
    (w, b): &(Range<usize>, Range<usize>),
    bias: &Option<Range<usize>>,
) {
    let width = w.len();
    grad[w.clone()].copy_from_slice(&sums[..width]);
    grad[b.clone()].copy_from_slice(&sums[width..2 * width]);
    if let Some(bias) = bias {
        grad[bias.clone()].copy_from_slice(&sums[2 * width..]);
    }
}

impl Branch for EncoderLayerOp {
    fn name(&self) -> &'static str {
        "encoder-layer"
    }

    fn flat_len(&self) -> usize {
        self.pieces.len
    }

    fn input_block(&self) -> usize {
        self.pieces.tokens * self.pieces.hidden
    }

    fn forward(&self, x: &[f32], flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let pc = &self.pieces;
        let (t, hid, inner, prec) = (pc.tokens, pc.hidden, pc.inner, self.precision);
        let rows = x.len() / hid;
        // c = Attention(x [Wq; Wk; Wv]^T + [bq; bk; bv]).
        // Each weight packed once for this step's products (bf16), kept for the backward.
        let keep =
            |r: &Range<usize>, dims, parts| KeptWeight::new(&flat[r.clone()], dims, parts, prec);
        let w_qkv = keep(&pc.w_qkv, (3 * hid, hid), 3)?;
        let wo = keep(&pc.wo, (hid, hid), 1)?;
        let w1 = keep(&pc.w1, (inner, hid), 1)?;
        let w2 = keep(&pc.w2, (hid, inner), 1)?;
        let xk = kept_rows::copy(x, hid, Side::Input, prec, false).0;
        let b_qkv = part(flat, &pc.b_qkv);
        let biases = [0, 1, 2].map(|i| b_qkv.map(|b| &b[i * hid..][..hid]));
        let qkv = projections(&xk, (&flat[pc.w_qkv.clone()], &w_qkv), biases, hid, rows)?;
        let context = self.core.forward(qkv, (rows / t, t, 3 * hid))?;
        let context = kept_rows::input(context, hid, prec);
        // a = LayerNorm_1(Dropout_1(c Wo^T + bo) + x), kept for the intermediate layer.
        let o = dense(
            &context,
            (&flat[pc.wo.clone()], wo.forward(0)),
            part(flat, &pc.bo),
            hid,
            rows,
        )?;
        let [tail_1, tail_2] = &self.tails;
        let (a, a_kept, moments_1) = tail_1.forward_kept((&o, x), norm(flat, &pc.norm_1), prec)?;
        // i = gelu(u + b1) for u = a W1^T (the bias added by the GELU's pass); u becomes
        // gelu'(u + b1).
        let mut u = dense_store(&a_kept, (&flat[pc.w1.clone()], w1.forward(0)), inner, rows)?;
        let i = kept_rows::gelu(&mut u, part(flat, &pc.b1), inner, prec);
        // y = LayerNorm_2(Dropout_2(i W2^T + b2) + a).
        let w2_rows = (&flat[pc.w2.clone()], w2.forward(0));
        let m = dense(&i, w2_rows, part(flat, &pc.b2), hid, rows)?;
        let (y, moments_2) = tail_2.forward((&m, &a), norm(flat, &pc.norm_2))?;
        // A fresh op per call: the cell is empty.
        let _ = self.saved.set(Saved {
            x: xk,
            context,
            o,
            moments_1,
            a,
            a_kept,
            slope: Lent::new(u),
            i,
            m,
            moments_2,
            weights: [w_qkv, wo, w1, w2],
        });
        Ok(y)
    }

    /// `(dx, dflat)` from the output's gradient `g`.
    fn backward(
        &self,
        x: &[f32],
        flat: &[f32],
        g: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let pc = &self.pieces;
        let (t, hid, inner, prec) = (pc.tokens, pc.hidden, pc.inner, self.precision);
        let s = self
            .saved
            .get()
            .ok_or_else(|| candle_core::Error::Msg("encoder layer backward: no forward".into()))?;
        let rows = x.len() / hid;
        let mut grad = vec![0f32; pc.len];
        let [tail_1, tail_2] = &self.tails;
        let [w_qkv, wo, w1, w2] = &s.weights;
        // The second tail: da (its residual's part), dm; dW2 = dm^T i, di = dm W2.
        let n2 = norm(flat, &pc.norm_2);
        let back_2 = tail_2.backward((&s.m, &s.a), n2, &s.moments_2, g, prec)?;
        put_tail_sums(&mut grad, &back_2.sums, &pc.norm_2, &pc.b2);
        back_2.dm.t_times(&s.i, &mut grad, pc.w2.start)?;
        // Every element written by the product (no accumulation).
        let mut di = recycle::take(rows * inner);
        back_2
            .dm
            .times_w((&flat[pc.w2.clone()], w2.backward()), inner, &mut di)?;
        drop(back_2.dm);
        // du = di gelu'(u), db1 = sum du; dW1 = du^T a, da += du W1.
        let (du, db1) = kept_rows::through_slope(&di, &s.slope, inner, prec);
        recycle::give(di);
        if let Some(b1) = pc.b1.clone() {
            grad[b1].copy_from_slice(&db1);
        }
        du.t_times(&s.a_kept, &mut grad, pc.w1.start)?;
        let mut da = back_2.dx;
        du.times_w_onto((&flat[pc.w1.clone()], w1.backward()), hid, &mut da, true)?;
        drop(du);
        // The first tail: dx (its residual's part), do; dWo = do^T c, dc = do Wo.
        let n1 = norm(flat, &pc.norm_1);
        let back_1 = tail_1.backward((&s.o, x), n1, &s.moments_1, &da, prec)?;
        drop(da);
        put_tail_sums(&mut grad, &back_1.sums, &pc.norm_1, &pc.bo);
        back_1.dm.t_times(&s.context, &mut grad, pc.wo.start)?;
        let mut dc = recycle::take(rows * hid);
        back_1
            .dm
            .times_w((&flat[pc.wo.clone()], wo.backward()), hid, &mut dc)?;
        drop(back_1.dm);
        // dqkv = Attention'(dc), d[bq; bk; bv] = sum dqkv; d[Wq; Wk; Wv] = dqkv^T x,
        // dx += dqkv [Wq; Wk; Wv].
        let d = self.core.backward((rows / t, t, 3 * hid), &dc)?;
        recycle::give(dc);
        let (dqkv, db) = kept_rows::stacked(d, hid, Side::Gradient, prec, pc.b_qkv.is_some());
        if let Some(b) = pc.b_qkv.clone() {
            grad[b].copy_from_slice(&db);
        }
        dqkv.t_times(&s.x, &mut grad, pc.w_qkv.start)?;
        let mut dx = back_1.dx;
        dqkv.times_w_onto(
            (&flat[pc.w_qkv.clone()], w_qkv.backward()),
            hid,
            &mut dx,
            true,
        )?;
        Ok((dx, grad))
    }
}
