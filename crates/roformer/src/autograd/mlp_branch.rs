//! A pre-norm block's MLP half as one op with its own backward, on f32 CPU tensors, and its
//! `*_slow` twin of candle ops (any device and dtype):
//!
//! ```text
//! forward   xn = LayerNorm(h) = xh w_n + b_n,   xh = (h - mu) r,   r = 1 / sqrt(var + eps)
//!           u = xn W1^T + b1,   a = gelu(u),   m = a W2^T + b2
//!           y = h + f_s lambda m                               (f_s: sample s's keep factor)
//! backward  dm = g f_s lambda;   dlambda = sum g f_s m;   db2 = sum dm;   dW2 = dm^T a
//!           du = (dm W2) gelu'(u);   db1 = sum du;   dW1 = du^T xn;   dxn = du W1
//!           dh = g + r (dxn w_n - mean(dxn w_n) - xh mean(dxn w_n xh))
//!           dw_n = sum dxn xh;   db_n = sum dxn
//! ```
//!
//! (sums over all rows; `f_s` is `1 / (1 - p)` for a kept sample, 0 for a dropped one, 1
//! without stochastic depth). The parameters travel as ONE flat vector (`[w_n | b_n | W1 | b1 |
//! W2 | b2 | lambda]`, each weight row-major, a missing bias absent), the concatenation of the
//! model's own variables: the chain (`super::chain`) hands each variable its slice of the
//! gradient, so names, optimiser and checkpoints see the variables as before. The two products write
//! `xn W1^T` and `a W2^T` store-only (no bias fill, no read of the output), each bias added
//! by the pass that reads them: the GELU's for `b1`, the join's (and its backward's) for
//! `b2`. The forward keeps `xn`, the row statistics, `gelu'(u)`, `a` and `a W2^T` in buffers
//! of its own; the backward writes every parameter
//! gradient once, in place into the flat gradient (no zero-then-add per node), with the layer
//! scale, stochastic depth and residual fused into the first pass, the GELU's derivative and
//! `db1` into one pass (the forward keeps `gelu'(u)`, computed with `gelu(u)` from one erf),
//! and the layer norm's backward and the residual's gradient into the
//! last. The products run in the precision asked for (bf16: operands rounded, f32 sums).

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::Tensor;
use candle_nn::Linear;

use crate::autograd::chain::Link;
use crate::autograd::dropout::KeepMask;
use crate::autograd::kept_rows;
use crate::autograd::prenorm::{
    dense_store, norm_backward, norm_rows, part, Branch, Cursor, Samples,
};
use crate::cpu::kept::Kept;
use crate::cpu::kept_weight::KeptWeight;
use crate::cpu::recycle::{self, Lent};
use crate::cpu::Precision;

/// The parameters of the MLP half: the layer norm's weight, bias and epsilon, the two dense
/// layers (`up`: `W1` `[inner, hidden]`, `down`: `W2` `[hidden, inner]`, biases optional) and
/// the layer scale `lambda` `[hidden]`.
#[derive(Clone, Copy)]
pub(crate) struct MlpBranch<'a> {
    /// `(w_n, b_n, eps)`, both `[hidden]`.
    pub(crate) norm: (&'a Tensor, &'a Tensor, f64),
    /// `W1`, `b1`.
    pub(crate) up: &'a Linear,
    /// `W2`, `b2`.
    pub(crate) down: &'a Linear,
    /// `lambda`.
    pub(crate) lambda: &'a Tensor,
}

/// `h + f_s lambda down(gelu(up(LayerNorm(h))))` for `h` `[samples, ..., hidden]` (`f_s` the
/// factor of sample `s` in `keep`, 1 for all without it) as a [`Link`] for hidden states of
/// `h`'s shape, on f32 CPU tensors with products in `precision`.
///
/// # Errors
/// Parameters whose shapes do not fit `h` or each other, a mask whose length is not the
/// number of samples; candle errors.
pub(crate) fn mlp_link(
    h: &Tensor,
    p: MlpBranch<'_>,
    keep: Option<KeepMask>,
    precision: Precision,
) -> candle_core::Result<Link> {
    let pieces = Pieces::check(h, &p, keep.as_ref())?;
    let mut params = vec![p.norm.0.clone(), p.norm.1.clone(), p.up.weight().clone()];
    params.extend(p.up.bias().cloned());
    params.push(p.down.weight().clone());
    params.extend(p.down.bias().cloned());
    params.push(p.lambda.clone());
    let op = MlpBranchOp {
        pieces,
        eps: p.norm.2 as f32,
        samples: Samples::new(keep),
        precision,
        saved: OnceLock::new(),
    };
    Ok(Link {
        branch: Box::new(op),
        params,
    })
}

/// [`mlp_link`] run on `h` as one op of its own.
///
/// # Errors
/// As [`mlp_link`]; candle errors (tensors that are not f32 on the CPU).
#[cfg(test)]
pub(crate) fn mlp_branch(
    h: &Tensor,
    p: MlpBranch<'_>,
    keep: Option<KeepMask>,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    crate::autograd::chain::chain(h, vec![mlp_link(h, p, keep, precision)?], None)
}

/// [`mlp_branch`] composed of candle ops (the layer norm, candle-nn's layers, the erf GELU,
/// the scaled residual's reference), on any device and dtype: the reference the tests hold it
/// to (the model's own candle path is the block's dense layers, `vision::block`).
///
/// # Errors
/// As [`mlp_branch`].
#[cfg(test)]
pub(crate) fn mlp_branch_slow(
    h: &Tensor,
    p: MlpBranch<'_>,
    keep: Option<KeepMask>,
) -> candle_core::Result<Tensor> {
    use crate::activation::Activation;
    use crate::autograd::layer_norm::layer_norm_slow;
    use crate::autograd::layer_scale::scaled_residual_slow;
    use crate::autograd::linear::linear_slow;

    Pieces::check(h, &p, keep.as_ref())?;
    let xn = layer_norm_slow(h, p.norm.0, p.norm.1, p.norm.2)?;
    let a = linear_slow(&xn, p.up, Some(Activation::Gelu))?;
    let m = linear_slow(&a, p.down, None)?;
    scaled_residual_slow(&m, p.lambda, h, keep)
}

/// Where each parameter lies in the flat vector, and the two widths.
#[derive(Debug, Clone)]
struct Pieces {
    hidden: usize,
    inner: usize,
    norm_w: Range<usize>,
    norm_b: Range<usize>,
    w1: Range<usize>,
    b1: Option<Range<usize>>,
    w2: Range<usize>,
    b2: Option<Range<usize>>,
    lambda: Range<usize>,
    len: usize,
}

impl Pieces {
    /// The layout of `p`'s flat vector, once every shape is checked against `h`.
    fn check(h: &Tensor, p: &MlpBranch<'_>, keep: Option<&KeepMask>) -> candle_core::Result<Self> {
        let hidden = h.dims().last().copied().unwrap_or(0);
        let (inner, w1_in) = p.up.weight().dims2()?;
        let (w2_out, w2_in) = p.down.weight().dims2()?;
        let vector = |t: Option<&Tensor>, n: usize| t.is_none_or(|t| t.dims() == [n]);
        let fits = h.rank() >= 2
            && hidden > 0
            && w1_in == hidden
            && (w2_out, w2_in) == (hidden, inner)
            && vector(Some(p.norm.0), hidden)
            && vector(Some(p.norm.1), hidden)
            && vector(p.up.bias(), inner)
            && vector(p.down.bias(), hidden)
            && vector(Some(p.lambda), hidden);
        if !fits {
            return Err(candle_core::Error::Msg(format!(
                "mlp branch: parameters ({:?}, {:?}) do not fit hidden states of shape {:?}",
                p.up.weight().dims(),
                p.down.weight().dims(),
                h.dims()
            )));
        }
        if let Some(mask) = keep.filter(|m| m.len() != h.dims()[0]) {
            return Err(candle_core::Error::Msg(format!(
                "mlp branch: a mask of {} samples for {}",
                mask.len(),
                h.dims()[0]
            )));
        }
        let mut at = Cursor::default();
        Ok(Pieces {
            hidden,
            inner,
            norm_w: at.take(hidden),
            norm_b: at.take(hidden),
            w1: at.take(inner * hidden),
            b1: at.take_if(p.up.bias().is_some(), inner),
            w2: at.take(hidden * inner),
            b2: at.take_if(p.down.bias().is_some(), hidden),
            lambda: at.take(hidden),
            len: at.len(),
        })
    }
}

/// What the forward keeps for the backward, per row of `h`: the normed rows `xn` and the
/// activation `a` (kept for their products), the mean and `1 / std` of `h`, the GELU's slope
/// `gelu'(u)`, the product `a W2^T` (`m` without its bias) and the weights packed once.
struct Saved {
    xn: Kept,
    stats: Vec<(f32, f32)>,
    slope: Lent<f32>,
    a: Kept,
    m: Lent<f32>,
    /// `W1` and `W2`, packed once for the step's products.
    weights: [KeptWeight; 2],
}

/// The op: the parameters' layout, the layer norm's epsilon, each sample's keep factor, the
/// products' precision and the forward's saved buffers.
struct MlpBranchOp {
    pieces: Pieces,
    eps: f32,
    samples: Samples,
    precision: Precision,
    saved: OnceLock<Saved>,
}

impl Branch for MlpBranchOp {
    fn name(&self) -> &'static str {
        "mlp-branch"
    }

    fn flat_len(&self) -> usize {
        self.pieces.len
    }

    fn input_block(&self) -> usize {
        self.pieces.hidden
    }

    fn forward(&self, h: &[f32], flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let pc = &self.pieces;
        let (hid, inner) = (pc.hidden, pc.inner);
        let rows = h.len() / hid;
        let norm = (&flat[pc.norm_w.clone()], &flat[pc.norm_b.clone()]);
        let (xn, stats) = norm_rows(h, norm, self.eps, self.precision);
        // Each weight packed once for this step's products (bf16), kept for the backward.
        let (w1_rows, w2_rows) = (&flat[pc.w1.clone()], &flat[pc.w2.clone()]);
        let w1 = KeptWeight::new(w1_rows, (inner, hid), 1, self.precision)?;
        let w2 = KeptWeight::new(w2_rows, (hid, inner), 1, self.precision)?;
        // u = xn W1^T, b1 added by the GELU's pass: a = gelu(u + b1); u becomes gelu'(u + b1),
        // all the backward needs of it.
        let mut u = dense_store(&xn, (w1_rows, w1.forward(0)), inner, rows)?;
        let a = kept_rows::gelu(&mut u, part(flat, &pc.b1), inner, self.precision);
        let slope = Lent::new(u);
        // m = a W2^T, b2 added by the join: y = h + f_s lambda (m + b2).
        let m = Lent::new(dense_store(&a, (w2_rows, w2.forward(0)), hid, rows)?);
        let b2 = part(flat, &pc.b2);
        let y = self.samples.join(h, (&m, b2), &flat[pc.lambda.clone()])?;
        // A fresh op per call: the cell is empty.
        let _ = self.saved.set(Saved {
            xn,
            stats,
            slope,
            a,
            m,
            weights: [w1, w2],
        });
        Ok(y)
    }

    /// `(dh, dflat)` from the output's gradient `g`.
    fn backward(
        &self,
        h: &[f32],
        flat: &[f32],
        g: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let pc = &self.pieces;
        let (hid, inner) = (pc.hidden, pc.inner);
        let saved = self
            .saved
            .get()
            .ok_or_else(|| candle_core::Error::Msg("mlp branch backward: no forward".into()))?;
        let rows = h.len() / hid;
        let mut grad = vec![0f32; pc.len];
        let (dm, dlambda, db2) = self.samples.join_backward(
            g,
            (&saved.m, part(flat, &pc.b2)),
            &flat[pc.lambda.clone()],
            self.precision,
        );
        grad[pc.lambda.clone()].copy_from_slice(&dlambda);
        if let Some(b2) = pc.b2.clone() {
            grad[b2].copy_from_slice(&db2);
        }
        // dW2 = dm^T a, da = dm W2.
        dm.t_times(&saved.a, &mut grad, pc.w2.start)?;
        let mut da = recycle::take(rows * inner);
        let [w1, w2] = &saved.weights;
        dm.times_w((&flat[pc.w2.clone()], w2.backward()), inner, &mut da)?;
        drop(dm);
        // du = da gelu'(u); db1 = sum du.
        let (du, db1) = kept_rows::through_slope(&da, &saved.slope, inner, self.precision);
        recycle::give(da);
        if let Some(b1) = pc.b1.clone() {
            grad[b1].copy_from_slice(&db1);
        }
        // dW1 = du^T xn, dxn = du W1.
        du.t_times(&saved.xn, &mut grad, pc.w1.start)?;
        let mut dh = du.times_w_new((&flat[pc.w1.clone()], w1.backward()), hid)?;
        drop(du);
        // dh = g + the layer norm's backward of dxn.
        let (dw, db) = norm_backward(&mut dh, g, h, &saved.stats, &flat[pc.norm_w.clone()]);
        grad[pc.norm_w.clone()].copy_from_slice(&dw);
        grad[pc.norm_b.clone()].copy_from_slice(&db);
        Ok((dh, grad))
    }
}
