//! A pre-norm block's attention half as one op with its own backward, on f32 CPU tensors:
//!
//! ```text
//! forward   xn = LayerNorm(x)                                  (statistics kept)
//!           q, k, v = xn Wq^T + bq, xn Wk^T + bk, xn Wv^T + bv  three products, [rows, hidden]
//!           c = Attention(q, k, v)                              (rotation, softmax, dropout)
//!           o = c Wo^T + bo,   y = x + f_s lambda o
//! backward  do = g f_s lambda;   dlambda = sum g f_s o;   dbo = sum do
//!           dWo = do^T c;   dc = do Wo;   dqkv = Attention'(dc)
//!           d[bq; bk; bv] = sum dqkv;   d[Wq; Wk; Wv] = dqkv^T xn;   dxn = dqkv [Wq; Wk; Wv]
//!           dx = g + LayerNorm'(dxn)                            (see `prenorm`)
//! ```
//!
//! The attention in the middle is [`AttentionCore`], the fused attention's own forward and
//! backward; the parameters travel as one flat vector `[w_n | b_n | Wq | Wk | Wv | bq | bk |
//! bv | Wo | bo | lambda]` (the three weights one after the other are the stacked
//! `[3 hidden, hidden]` matrix, whose gradient `dqkv^T xn` is one product; a missing bias is
//! absent there), the concatenation of the model's variables, as in [`super::mlp_branch`].
//! q, k and v are each written by their own product where the attention reads them, and
//! their gradients kept as `dqkv` from where the attention leaves them (no split or join
//! copies); `c Wo^T` is written store-only, `bo` added by the join that reads it (and by its
//! backward); the large buffers come from [`crate::cpu::recycle`]. The reference is the
//! model's op-by-op path (projections, rotation, candle's attention), which the vision tests
//! compare the fused block against.

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::Tensor;
use candle_nn::Linear;

use crate::autograd::attention::{AttentionCore, FusedAttention};
use crate::autograd::chain::Link;
use crate::autograd::dropout::KeepMask;
use crate::autograd::kept_rows;
use crate::autograd::prenorm::{
    dense_store, norm_backward, norm_rows, part, projections, Branch, Cursor, Samples,
};
use crate::cpu::kept::{Kept, Side};
use crate::cpu::kept_weight::KeptWeight;
use crate::cpu::recycle::{self, Lent};
use crate::cpu::Precision;

/// The parameters of the attention half: the layer norm's weight, bias and epsilon, the four
/// projections (`[hidden, hidden]`, biases optional) and the layer scale `lambda` `[hidden]`.
#[derive(Clone, Copy)]
pub(crate) struct AttentionBranch<'a> {
    /// `(w_n, b_n, eps)`, both `[hidden]`.
    pub(crate) norm: (&'a Tensor, &'a Tensor, f64),
    /// `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub(crate) projections: [&'a Linear; 4],
    /// `lambda`.
    pub(crate) lambda: &'a Tensor,
}

/// `x + f_s lambda o_proj(Attention(qkv(LayerNorm(x))))` for `x` `[samples, tokens, hidden]`
/// (`f_s` the factor of sample `s` in `keep`, 1 for all without it), the attention as `spec`
/// says (heads, rotation, dropout, the products' precision), as a [`Link`] for hidden states
/// of `x`'s shape, on f32 CPU tensors.
///
/// # Errors
/// Parameters whose shapes do not fit `x`, a mask that does not fit; candle errors.
pub(crate) fn attention_link(
    x: &Tensor,
    p: AttentionBranch<'_>,
    spec: FusedAttention,
    keep: Option<KeepMask>,
) -> candle_core::Result<Link> {
    let pieces = Pieces::check(x, &p, keep.as_ref())?;
    let [q, k, v, o] = p.projections;
    let mut params = vec![p.norm.0.clone(), p.norm.1.clone()];
    for layer in [q, k, v] {
        params.push(layer.weight().clone());
    }
    params.extend([q, k, v].iter().filter_map(|l| l.bias().cloned()));
    params.push(o.weight().clone());
    params.extend(o.bias().cloned());
    params.push(p.lambda.clone());
    let op = AttentionBranchOp {
        pieces,
        eps: p.norm.2 as f32,
        samples: Samples::new(keep),
        precision: spec.precision,
        core: AttentionCore::new(spec)?,
        saved: OnceLock::new(),
    };
    Ok(Link {
        branch: Box::new(op),
        params,
    })
}

/// Where each parameter lies in the flat vector, and the sizes.
#[derive(Debug, Clone)]
struct Pieces {
    tokens: usize,
    hidden: usize,
    norm_w: Range<usize>,
    norm_b: Range<usize>,
    /// `[Wq; Wk; Wv]`, `[3 hidden, hidden]`.
    w_qkv: Range<usize>,
    /// `bq`, `bk`, `bv`, each where present.
    b_qkv: [Option<Range<usize>>; 3],
    wo: Range<usize>,
    bo: Option<Range<usize>>,
    lambda: Range<usize>,
    len: usize,
}

impl Pieces {
    /// The layout of `p`'s flat vector, once every shape is checked against `x`.
    fn check(
        x: &Tensor,
        p: &AttentionBranch<'_>,
        keep: Option<&KeepMask>,
    ) -> candle_core::Result<Self> {
        let (samples, tokens, hidden) = x.dims3()?;
        let vector = |t: Option<&Tensor>| t.is_none_or(|t| t.dims() == [hidden]);
        let fits = hidden > 0
            && p.projections
                .iter()
                .all(|l| l.weight().dims() == [hidden, hidden] && vector(l.bias()))
            && vector(Some(p.norm.0))
            && vector(Some(p.norm.1))
            && vector(Some(p.lambda));
        if !fits {
            return Err(candle_core::Error::Msg(format!(
                "attention branch: parameters do not fit hidden states of shape {:?}",
                x.dims()
            )));
        }
        if let Some(mask) = keep.filter(|m| m.len() != samples) {
            return Err(candle_core::Error::Msg(format!(
                "attention branch: a mask of {} samples for {samples}",
                mask.len()
            )));
        }
        let [q, k, v, o] = p.projections;
        let mut at = Cursor::default();
        let norm_w = at.take(hidden);
        let norm_b = at.take(hidden);
        let w_qkv = at.take(3 * hidden * hidden);
        let b_qkv = [q, k, v].map(|l| at.take_if(l.bias().is_some(), hidden));
        Ok(Pieces {
            tokens,
            hidden,
            norm_w,
            norm_b,
            w_qkv,
            b_qkv,
            wo: at.take(hidden * hidden),
            bo: at.take_if(o.bias().is_some(), hidden),
            lambda: at.take(hidden),
            len: at.len(),
        })
    }
}

/// What the forward keeps for the backward: the normed rows and the attention's context
/// (kept for their products), the row statistics of `x` and the product `c Wo^T` (the branch
/// `o` without its bias; the attention keeps its own q, k, v).
struct Saved {
    xn: Kept,
    stats: Vec<(f32, f32)>,
    context: Kept,
    o: Lent<f32>,
    /// `[Wq; Wk; Wv]` and `Wo`, packed once for the step's products.
    weights: [KeptWeight; 2],
}

/// The op: the parameters' layout, the norm's epsilon, the samples' keep factors, the
/// products' precision, the attention and the forward's saved buffers.
struct AttentionBranchOp {
    pieces: Pieces,
    eps: f32,
    samples: Samples,
    precision: Precision,
    core: AttentionCore,
    saved: OnceLock<Saved>,
}

impl Branch for AttentionBranchOp {
    fn name(&self) -> &'static str {
        "attention-branch"
    }

    fn flat_len(&self) -> usize {
        self.pieces.len
    }

    fn input_block(&self) -> usize {
        self.pieces.tokens * self.pieces.hidden
    }

    fn forward(&self, x: &[f32], flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let pc = &self.pieces;
        let (t, hid) = (pc.tokens, pc.hidden);
        let rows = x.len() / hid;
        let norm = (&flat[pc.norm_w.clone()], &flat[pc.norm_b.clone()]);
        let (xn, stats) = norm_rows(x, norm, self.eps, self.precision);
        // q, k, v = xn Wq^T + bq, xn Wk^T + bk, xn Wv^T + bv;  c = Attention(q, k, v).
        let biases = pc.b_qkv.clone().map(|r| part(flat, &r));
        // Each weight packed once for this step's products (bf16), kept for the backward.
        let (w_qkv_rows, wo_rows) = (&flat[pc.w_qkv.clone()], &flat[pc.wo.clone()]);
        let w_qkv = KeptWeight::new(w_qkv_rows, (3 * hid, hid), 3, self.precision)?;
        let wo = KeptWeight::new(wo_rows, (hid, hid), 1, self.precision)?;
        let qkv = projections(&xn, (w_qkv_rows, &w_qkv), biases, hid, rows)?;
        let c = self.core.forward(qkv, (rows / t, t, 3 * hid))?;
        let context = kept_rows::input(c, hid, self.precision);
        // o = c Wo^T, bo added by the join: y = x + f_s lambda (o + bo).
        let o = Lent::new(dense_store(&context, (wo_rows, wo.forward(0)), hid, rows)?);
        let bo = part(flat, &pc.bo);
        let y = self.samples.join(x, (&o, bo), &flat[pc.lambda.clone()])?;
        // A fresh op per call: the cell is empty.
        let _ = self.saved.set(Saved {
            xn,
            stats,
            context,
            o,
            weights: [w_qkv, wo],
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
        let (t, hid) = (pc.tokens, pc.hidden);
        let saved = self.saved.get().ok_or_else(|| {
            candle_core::Error::Msg("attention branch backward: no forward".into())
        })?;
        let rows = x.len() / hid;
        let mut grad = vec![0f32; pc.len];
        let (d_o, dlambda, dbo) = self.samples.join_backward(
            g,
            (&saved.o, part(flat, &pc.bo)),
            &flat[pc.lambda.clone()],
            self.precision,
        );
        grad[pc.lambda.clone()].copy_from_slice(&dlambda);
        if let Some(bo) = pc.bo.clone() {
            grad[bo].copy_from_slice(&dbo);
        }
        // dWo = do^T c, dc = do Wo, dqkv = Attention'(dc).
        d_o.t_times(&saved.context, &mut grad, pc.wo.start)?;
        let mut dc = recycle::take(rows * hid);
        let [w_qkv, wo] = &saved.weights;
        d_o.times_w((&flat[pc.wo.clone()], wo.backward()), hid, &mut dc)?;
        drop(d_o);
        let d = self.core.backward((rows / t, t, 3 * hid), &dc)?;
        recycle::give(dc);
        // d[bq; bk; bv] = sum dqkv (where there are biases).
        let sums = pc.b_qkv.iter().any(Option::is_some);
        let (dqkv, db) = kept_rows::stacked(d, hid, Side::Gradient, self.precision, sums);
        for (part, range) in db.chunks_exact(hid).zip(&pc.b_qkv) {
            if let Some(r) = range {
                grad[r.clone()].copy_from_slice(part);
            }
        }
        // d[Wq; Wk; Wv] = dqkv^T xn, dxn = dqkv [Wq; Wk; Wv], dx = g + LayerNorm'(dxn).
        dqkv.t_times(&saved.xn, &mut grad, pc.w_qkv.start)?;
        let mut dx = dqkv.times_w_new((&flat[pc.w_qkv.clone()], w_qkv.backward()), hid)?;
        drop(dqkv);
        let (dw, db) = norm_backward(&mut dx, g, x, &saved.stats, &flat[pc.norm_w.clone()]);
        grad[pc.norm_w.clone()].copy_from_slice(&dw);
        grad[pc.norm_b.clone()].copy_from_slice(&db);
        Ok((dx, grad))
    }
}
