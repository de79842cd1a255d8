//! Scaled dot-product attention as one op, from token-major q, k, v to the token-major
//! context, with rotary positions, an additive mask and dropout on the probabilities.
//!
//! Per (sequence `s`, head), over tiles of query rows (`d` the head dim, `c = 1/sqrt(d)`,
//! `f` the dropout factors, 0 or `1/(1-p)`):
//!
//! ```text
//! forward   q, k (, v) <- R q, R k (, R v)                 rotary, token-major
//!           S = c q k^T + mask,  P = exp(S - max S) / sum   (max and 1/sum kept per row)
//!           O = (P * f) v
//! backward  P recomputed from q, k and the kept row statistics
//!           dV = (P * f)^T dO,   dPf = dO v^T,   D_i = sum_j (P f)_ij dPf_ij
//!           dS = P * (f * dPf - D),   dq = c dS k,   dk = c dS^T q
//!           dq, dk (, dv) <- R^T dq, R^T dk (, R^T dv)
//! ```
//!
//! No `[b, h, t, t]` tensor is made: each task holds a tile of scores (a few hundred KiB, in
//! cache), the backward recomputes them (one more `q k^T` product per head) instead of storing
//! them. The element order of the dropout mask is that of the `[b, h, t, t]` probabilities, so
//! the same generator gives the same masks as the op-by-op path.

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;
use rotary::{rotate, rotate_inplace, Coefficients, Direction};

use super::dropout::KeepMask;
use crate::cpu::mask::{mask_dims_fit, MaskView};
use crate::cpu::math::{add_mask_max, exp_sum};
use crate::cpu::policy::{query_tile, TRAINING_SCORE_TILE};
use crate::cpu::tensor::{f32_slice, tensor, with_f32};
use crate::cpu::{product, Dst, Mat, Precision, SharedOut};

/// The attention of one layer: what the op needs besides q, k and v.
pub(crate) struct FusedAttention {
    /// Heads, each of `head_dim` columns of the hidden width.
    pub(crate) heads: usize,
    /// The rotary coefficients of the tokens, `None` without rotary positions.
    pub(crate) rope: Option<Coefficients>,
    /// Whether v is rotated too.
    pub(crate) rotary_value: bool,
    /// The additive mask `[1 or b, 1, 1 or t, t]`, contiguous f32.
    pub(crate) mask: Option<Tensor>,
    /// The dropout of the probabilities, over `[b, heads, t, t]` in row-major order.
    pub(crate) dropout: Option<KeepMask>,
    /// The precision of the products (scores, context and their gradients).
    pub(crate) precision: Precision,
}

/// Whether [`attention`] can take an additive mask of these dims for `b` sequences of `t`.
pub(crate) fn mask_fits(mask: &Tensor, b: usize, t: usize) -> bool {
    mask_dims_fit(mask.dims(), b, t)
}

/// The context `[b, t, hidden]` of token-major `q`, `k`, `v` (`[b, t, hidden]` each, CPU f32).
///
/// # Errors
/// Shapes that differ or do not split into the heads, a mask or dropout mask that does not fit;
/// candle errors.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spec: FusedAttention,
) -> candle_core::Result<Tensor> {
    let (b, t, h) = q.dims3()?;
    if k.dims() != q.dims() || v.dims() != q.dims() {
        return Err(candle_core::Error::Msg(
            "attention: q, k and v differ in shape".into(),
        ));
    }
    if spec.heads == 0 || h % spec.heads != 0 {
        return Err(candle_core::Error::Msg(format!(
            "attention: {h} columns do not split into {} heads",
            spec.heads
        )));
    }
    if let Some(m) = &spec.mask {
        if !mask_fits(m, b, t) {
            return Err(candle_core::Error::Msg(format!(
                "attention: a mask of dims {:?} for {b} sequences of {t}",
                m.dims()
            )));
        }
    }
    if let Some(d) = &spec.dropout {
        if d.len() != b * spec.heads * t * t {
            return Err(candle_core::Error::Msg(
                "attention: the dropout mask does not cover the probabilities".into(),
            ));
        }
    }
    let mask = match spec.mask {
        Some(m) => Some(m.contiguous()?),
        None => None,
    };
    q.contiguous()?.apply_op3(
        &k.contiguous()?,
        &v.contiguous()?,
        AttentionOp {
            spec: FusedAttention { mask, ..spec },
            saved: OnceLock::new(),
        },
    )
}

/// What the forward keeps for the backward.
struct Saved {
    /// Rotated q, k and (when `rotary_value`) v, token-major.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Option<Vec<f32>>,
    /// Per (sequence, head, query row): the row maximum of the scores and 1 / sum of exp.
    max: Vec<f32>,
    inv_sum: Vec<f32>,
}

struct AttentionOp {
    spec: FusedAttention,
    saved: OnceLock<Saved>,
}

/// The dimensions of one call.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    h: usize,
    heads: usize,
    d: usize,
    /// Query rows per tile.
    tile: usize,
}

impl Dims {
    fn new(shape: &Shape, heads: usize) -> candle_core::Result<Dims> {
        let (b, t, h) = shape.dims3()?;
        Ok(Dims {
            b,
            t,
            h,
            heads,
            d: h / heads,
            tile: query_tile(t, TRAINING_SCORE_TILE),
        })
    }

    /// The `[r, d]` block of head `head`, sequence `s`, rows `i0..i0 + r` of a token-major
    /// buffer.
    fn head_rows<'a>(&self, data: &'a [f32], s: usize, head: usize, i0: usize) -> Mat<'a> {
        Mat {
            data,
            offset: (s * self.t + i0) * self.h + head * self.d,
            rs: self.h,
            cs: 1,
        }
    }

    /// Offset of element `(s, head, i, 0)` of the `[b, heads, t, t]` probabilities.
    fn prob_row(&self, s: usize, head: usize, i: usize) -> usize {
        ((s * self.heads + head) * self.t + i) * self.t
    }
}

impl AttentionOp {
    /// `x` rotated (forward or back) as `[b, t, heads, d]` token-major, in a new buffer.
    fn rotated(
        &self,
        x: &[f32],
        dims: Dims,
        direction: Direction,
    ) -> candle_core::Result<Vec<f32>> {
        let mut out = x.to_vec();
        if let Some(rope) = &self.spec.rope {
            let shape = rotary::Shape::token_major(dims.b, dims.t, dims.heads, dims.d);
            rotate(x, &mut out, shape, rope.view(), direction)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        }
        Ok(out)
    }

    /// Rotates `x` back in place (the transpose of the forward rotation).
    fn rotate_back(&self, x: &mut [f32], dims: Dims) -> candle_core::Result<()> {
        if let Some(rope) = &self.spec.rope {
            let shape = rotary::Shape::token_major(dims.b, dims.t, dims.heads, dims.d);
            rotate_inplace(x, shape, rope.view(), Direction::Inverse)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        }
        Ok(())
    }

    /// Fills `scores` (`[r, t]`) with `c q k^T + mask` for rows `i0..i0 + r` of (s, head) and
    /// returns nothing; the caller normalises.
    #[allow(clippy::too_many_arguments)]
    fn scores(
        &self,
        dims: Dims,
        q: &[f32],
        k: &[f32],
        s: usize,
        head: usize,
        i0: usize,
        r: usize,
        scores: &mut [f32],
    ) -> candle_core::Result<()> {
        let Dims { t, d, .. } = dims;
        product(
            (r, t, d),
            Dst::Slice(scores),
            (0, t),
            false,
            dims.head_rows(q, s, head, i0),
            dims.head_rows(k, s, head, 0).t(),
            1.0 / (d as f32).sqrt(),
            false,
            self.spec.precision,
        )
    }

    /// Multiplies row `i` of (s, head) by the dropout factors, if any.
    fn drop_row(&self, dims: Dims, s: usize, head: usize, i: usize, row: &mut [f32]) {
        if let Some(mask) = &self.spec.dropout {
            mask.scale_in_place(dims.prob_row(s, head, i), row);
        }
    }
}

impl CustomOp3 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = Dims::new(l1.shape(), self.spec.heads)?;
        let Dims {
            b, t, h, heads, d, ..
        } = dims;
        let q = self.rotated(f32_slice(s1, l1, "attention q")?, dims, Direction::Forward)?;
        let k = self.rotated(f32_slice(s2, l2, "attention k")?, dims, Direction::Forward)?;
        let v_in = f32_slice(s3, l3, "attention v")?;
        let v_rot = if self.spec.rotary_value {
            Some(self.rotated(v_in, dims, Direction::Forward)?)
        } else {
            None
        };
        let v: &[f32] = v_rot.as_deref().unwrap_or(v_in);
        let mut context = vec![0f32; b * t * h];
        let mut max = vec![0f32; b * heads * t];
        let mut inv_sum = vec![0f32; b * heads * t];
        let (out, max_out, inv_out) = (
            SharedOut::new(&mut context),
            SharedOut::new(&mut max),
            SharedOut::new(&mut inv_sum),
        );
        let mask_tensor = self.spec.mask.as_ref();
        let run = |mask: Option<&[f32]>| -> candle_core::Result<()> {
            let mask = match (mask, mask_tensor) {
                (Some(data), Some(m)) => Some(
                    MaskView::new(data, m.dims(), b, t)
                        .ok_or_else(|| candle_core::Error::Msg("attention: mask dims".into()))?,
                ),
                _ => None,
            };
            (0..b * heads).into_par_iter().try_for_each_init(
                Vec::new,
                |scores: &mut Vec<f32>, task| {
                    let (s, head) = (task / heads, task % heads);
                    // SAFETY: task (s, head) alone writes its t row statistics.
                    let stats_at = (s * heads + head) * t;
                    let (task_max, task_inv) =
                        unsafe { (max_out.slice(stats_at, t), inv_out.slice(stats_at, t)) };
                    let mut i0 = 0;
                    while i0 < t {
                        let r = dims.tile.min(t - i0);
                        scores.resize(r * t, 0.0);
                        self.scores(dims, &q, &k, s, head, i0, r, scores)?;
                        for (i, row) in scores.chunks_exact_mut(t).enumerate() {
                            let m = add_mask_max(row, mask.as_ref().map(|m| m.row(s, i0 + i)));
                            let inv = 1.0 / exp_sum(row, m);
                            task_max[i0 + i] = m;
                            task_inv[i0 + i] = inv;
                            row.iter_mut().for_each(|p| *p *= inv);
                            self.drop_row(dims, s, head, i0 + i, row);
                        }
                        // Task (s, head) alone writes these rows' columns of its head.
                        product(
                            (r, d, t),
                            Dst::Shared(out),
                            ((s * t + i0) * h + head * d, h),
                            false,
                            Mat::rows(scores, t),
                            dims.head_rows(v, s, head, 0),
                            1.0,
                            false,
                            self.spec.precision,
                        )?;
                        i0 += r;
                    }
                    Ok(())
                },
            )
        };
        match mask_tensor {
            Some(m) => with_f32(m, "attention mask", |data| run(Some(data)))?,
            None => run(None)?,
        }
        let _ = self.saved.set(Saved {
            q,
            k,
            v: v_rot,
            max,
            inv_sum,
        });
        Ok((CpuStorage::F32(context), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q_in: &Tensor,
        _k_in: &Tensor,
        v_in: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let saved = self
            .saved
            .get()
            .ok_or_else(|| candle_core::Error::Msg("attention backward: nothing saved".into()))?;
        let dims = Dims::new(q_in.shape(), self.spec.heads)?;
        let Dims {
            b, t, h, heads, d, ..
        } = dims;
        let scale = 1.0 / (d as f32).sqrt();
        let (mut dq, mut dk, mut dv) = (
            vec![0f32; b * t * h],
            vec![0f32; b * t * h],
            vec![0f32; b * t * h],
        );
        let (dq_out, dk_out, dv_out) = (
            SharedOut::new(&mut dq),
            SharedOut::new(&mut dk),
            SharedOut::new(&mut dv),
        );
        let (q, k) = (&saved.q[..], &saved.k[..]);
        let mask_tensor = self.spec.mask.as_ref();
        let run = |v: &[f32], g: &[f32], mask: Option<&[f32]>| -> candle_core::Result<()> {
            let mask = match (mask, mask_tensor) {
                (Some(data), Some(m)) => Some(
                    MaskView::new(data, m.dims(), b, t)
                        .ok_or_else(|| candle_core::Error::Msg("attention: mask dims".into()))?,
                ),
                _ => None,
            };
            (0..b * heads).into_par_iter().try_for_each_init(
                || (Vec::new(), Vec::new(), Vec::new()),
                |(p, pf, dp): &mut (Vec<f32>, Vec<f32>, Vec<f32>), task| {
                    let (s, head) = (task / heads, task % heads);
                    let stats_at = (s * heads + head) * t;
                    let dropout = self.spec.dropout.is_some();
                    let mut i0 = 0;
                    while i0 < t {
                        let r = dims.tile.min(t - i0);
                        p.resize(r * t, 0.0);
                        dp.resize(r * t, 0.0);
                        self.scores(dims, q, k, s, head, i0, r, p)?;
                        for (i, row) in p.chunks_exact_mut(t).enumerate() {
                            let m = mask.as_ref().map(|m| m.row(s, i0 + i));
                            add_mask_max(row, m);
                            exp_sum(row, saved.max[stats_at + i0 + i]);
                            let inv = saved.inv_sum[stats_at + i0 + i];
                            row.iter_mut().for_each(|x| *x *= inv);
                        }
                        let probs: &[f32] = if dropout {
                            pf.clear();
                            pf.extend_from_slice(p);
                            for (i, row) in pf.chunks_exact_mut(t).enumerate() {
                                self.drop_row(dims, s, head, i0 + i, row);
                            }
                            pf
                        } else {
                            p
                        };
                        // SAFETY (all three shared outputs): task (s, head) alone writes the
                        // columns of its head in the rows of its sequence.
                        // dV += (P f)^T dO
                        product(
                            (t, d, r),
                            Dst::Shared(dv_out),
                            (s * t * h + head * d, h),
                            true,
                            Mat::rows(probs, t).t(),
                            dims.head_rows(g, s, head, i0),
                            1.0,
                            false,
                            self.spec.precision,
                        )?;
                        // dPf = dO v^T
                        product(
                            (r, t, d),
                            Dst::Slice(dp),
                            (0, t),
                            false,
                            dims.head_rows(g, s, head, i0),
                            dims.head_rows(v, s, head, 0).t(),
                            1.0,
                            false,
                            self.spec.precision,
                        )?;
                        for (i, (dp_row, p_row)) in
                            dp.chunks_exact_mut(t).zip(p.chunks_exact(t)).enumerate()
                        {
                            let pf_row = &probs[i * t..(i + 1) * t];
                            let dot: f32 =
                                pf_row.iter().zip(dp_row.iter()).map(|(a, b)| a * b).sum();
                            if dropout {
                                self.drop_row(dims, s, head, i0 + i, dp_row);
                            }
                            for (x, &pv) in dp_row.iter_mut().zip(p_row) {
                                *x = pv * (*x - dot);
                            }
                        }
                        // dq rows = c dS k
                        product(
                            (r, d, t),
                            Dst::Shared(dq_out),
                            ((s * t + i0) * h + head * d, h),
                            false,
                            Mat::rows(dp, t),
                            dims.head_rows(k, s, head, 0),
                            scale,
                            false,
                            self.spec.precision,
                        )?;
                        // dk += c dS^T q rows
                        product(
                            (t, d, r),
                            Dst::Shared(dk_out),
                            (s * t * h + head * d, h),
                            true,
                            Mat::rows(dp, t).t(),
                            dims.head_rows(q, s, head, i0),
                            scale,
                            false,
                            self.spec.precision,
                        )?;
                        i0 += r;
                    }
                    Ok(())
                },
            )
        };
        with_f32(g, "attention backward", |g| {
            let go = |v: &[f32]| match mask_tensor {
                Some(m) => with_f32(m, "attention mask", |data| run(v, g, Some(data))),
                None => run(v, g, None),
            };
            match &saved.v {
                Some(v) => go(v),
                None => with_f32(v_in, "attention v", go),
            }
        })?;
        self.rotate_back(&mut dq, dims)?;
        self.rotate_back(&mut dk, dims)?;
        if self.spec.rotary_value {
            self.rotate_back(&mut dv, dims)?;
        }
        let shape = q_in.shape();
        Ok((
            Some(tensor(dq, shape)?),
            Some(tensor(dk, shape)?),
            Some(tensor(dv, shape)?),
        ))
    }
}
