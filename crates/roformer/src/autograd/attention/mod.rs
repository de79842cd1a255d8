//! Scaled dot-product attention as one op, from the token-major projections `[q | k | v]`
//! (one product of the three weights) to the token-major context, with rotary positions, a
//! position bias (ALiBi's, T5's), an additive mask (padding, causal) and dropout on the
//! probabilities.
//!
//! Per (sequence `s`, head `h`), over tiles of query rows (`d` the head dim, `c = 1/sqrt(d)`,
//! `f` the dropout factors, 0 or `1/(1-p)`, `B` the bias and `M` the mask, each broadcast to
//! `[b, heads, t, t]`):
//!
//! ```text
//! forward   q, k (, v) <- R q, R k (, R v)                 rotary, token-major
//!           S = c q k^T + B[s, h] + M[s, h]
//!           P = exp(S - max S) / sum                       (max and 1/sum kept per row)
//!           O = (P * f) v
//! backward  P recomputed from q, k and the kept row statistics
//!           dV = (P * f)^T dO,   dPf = dO v^T,   D_i = sum_j (P f)_ij dPf_ij
//!           dS = P * (f * dPf - D),   dq = c dS k,   dk = c dS^T q
//!           dB = dS summed over the dims B broadcasts     (only when B carries a gradient)
//!           dq, dk (, dv) <- R^T dq, R^T dk (, R^T dv)
//! ```
//!
//! The mask is a constant; the bias is an input of the op and gets its gradient at its own size
//! (`[heads, t, t]` for T5's table shared by the sequences). No `[b, h, t, t]` tensor is made
//! unless the bias carries a gradient: each task holds a tile of scores (a few hundred KiB, in
//! cache), the backward recomputes them (one more `q k^T` product per head) instead of storing
//! them. The element order of the dropout
//! mask is that of the `[b, h, t, t]` probabilities, so the same generator gives the same masks
//! as the op-by-op path.
//!
//! With bf16 products each task rounds and packs its head's rotated q, k and v once, in the
//! layouts the forward's and the backward's products read ([`operands`]), and the forward
//! keeps those words for the backward instead of the f32 q, k and v; the products give the
//! same bits as on the f32 values packed per product (the tests hold them to that).

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;
use rotary::{rotate_inplace, Coefficients, Direction};

use super::dropout::KeepMask;
use crate::cpu::mask::{mask_dims_fit, mask_row, MaskView};
use crate::cpu::math::{add_mask_max, exp_sum};
use crate::cpu::policy::{query_tile, TRAINING_SCORE_TILE};
use crate::cpu::recycle::{self, Lent};
use crate::cpu::reference_path::{self, ReferencePath};
use crate::cpu::tensor::{f32_slice, tensor, with_f32};
use crate::cpu::{Dst, Mat, Precision, SharedOut};
use operands::{from_row, head_product, HeadLayout, HeadWords, Left, Right};

mod operands;
#[cfg(test)]
mod tests;

/// q, k and v apart, or their gradients: each `[b, t, h]`, token-major.
pub(crate) type Parts = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The attention of one layer: what the op needs besides the projections and the bias.
pub(crate) struct FusedAttention {
    /// Heads, each of `head_dim` columns of the hidden width.
    pub(crate) heads: usize,
    /// The additive mask `[1 or b, 1 or heads, 1 or t, t]` (padding, causal): a constant.
    pub(crate) mask: Option<Tensor>,
    /// The rotary coefficients of the tokens, `None` without rotary positions.
    pub(crate) rope: Option<Coefficients>,
    /// Whether v is rotated too.
    pub(crate) rotary_value: bool,
    /// The dropout of the probabilities, over `[b, heads, t, t]` in row-major order.
    pub(crate) dropout: Option<KeepMask>,
    /// The precision of the products (scores, context and their gradients).
    pub(crate) precision: Precision,
}

/// Whether [`attention`] can take an additive mask or bias of these dims for `b` sequences of
/// `t` tokens in `heads` heads: `[1 or b, 1 or heads, 1 or t, t]`.
pub(crate) fn mask_fits(mask: &Tensor, b: usize, heads: usize, t: usize) -> bool {
    mask_dims_fit(mask.dims(), b, heads, t)
}

/// The context `[b, t, hidden]` of the token-major projections `qkv = [q | k | v]`
/// (`[b, t, 3 hidden]`, CPU f32) with a position `bias` (`[1 or b, 1 or heads, 1 or t, t]`)
/// added to the scores. The bias gets a gradient where it carries one (T5's learned table).
///
/// # Errors
/// A width that does not split into three times the heads, a bias, mask or dropout mask that
/// does not fit; candle errors.
pub(crate) fn attention(
    qkv: &Tensor,
    bias: Option<&Tensor>,
    spec: FusedAttention,
) -> candle_core::Result<Tensor> {
    let (b, t, width) = qkv.dims3()?;
    if spec.heads == 0 || width % (3 * spec.heads) != 0 {
        return Err(candle_core::Error::Msg(format!(
            "attention: {width} columns are not q, k and v of {} heads",
            spec.heads
        )));
    }
    for (what, m) in [("bias", bias), ("mask", spec.mask.as_ref())] {
        if let Some(m) = m.filter(|m| !mask_fits(m, b, spec.heads, t)) {
            return Err(candle_core::Error::Msg(format!(
                "attention: a {what} of dims {:?} for {b} sequences of {t} in {} heads",
                m.dims(),
                spec.heads
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
    apply(qkv, bias, AttentionOp::new(FusedAttention { mask, ..spec }))
}

/// `op` on `qkv` and the bias, checked by the caller.
fn apply(qkv: &Tensor, bias: Option<&Tensor>, op: AttentionOp) -> candle_core::Result<Tensor> {
    let qkv = qkv.contiguous()?;
    match bias {
        Some(m) => qkv.apply_op2(&m.contiguous()?, op),
        None => qkv.apply_op1(op),
    }
}

/// [`attention`] on plain buffers, for an op that owns the products around it (the vision
/// block's attention half): the same forward and backward, without a bias input.
pub(crate) struct AttentionCore(AttentionOp);

impl AttentionCore {
    /// The attention of `spec` (its mask, if any, made contiguous).
    ///
    /// # Errors
    /// Candle errors from copying the mask.
    pub(crate) fn new(spec: FusedAttention) -> candle_core::Result<AttentionCore> {
        let mask = spec.mask.as_ref().map(Tensor::contiguous).transpose()?;
        Ok(AttentionCore(AttentionOp::new(FusedAttention {
            mask,
            ..spec
        })))
    }

    /// The context `[b, t, hidden]` of `q`, `k` and `v` (each `[b, t, hidden]`, `dims` the
    /// stacked projections' `[b, t, 3 hidden]`); keeps what [`AttentionCore::backward`] needs.
    ///
    /// # Errors
    /// Sizes that do not fit `dims`, a mask or dropout mask that does not fit; the products'
    /// errors.
    pub(crate) fn forward(
        &self,
        (q, k, v): Parts,
        (b, t, width): (usize, usize, usize),
    ) -> candle_core::Result<Vec<f32>> {
        let heads = self.0.spec.heads;
        let part = b * t * width / 3;
        let fits = heads > 0
            && width.is_multiple_of(3 * heads)
            && [&q, &k, &v].iter().all(|x| x.len() == part)
            && self
                .0
                .spec
                .mask
                .as_ref()
                .is_none_or(|m| mask_fits(m, b, heads, t))
            && self
                .0
                .spec
                .dropout
                .as_ref()
                .is_none_or(|d| d.len() == b * heads * t * t);
        if !fits {
            return Err(candle_core::Error::Msg(format!(
                "attention: projections [{b}, {t}, {width}] do not fit {heads} heads, the mask \
                 or the dropout mask"
            )));
        }
        let dims = Dims::new(&Shape::from((b, t, width)), heads)?;
        let (out, _) = self.0.forward_parts((q, k, v), dims, None)?;
        match out {
            CpuStorage::F32(context) => Ok(context),
            _ => Err(candle_core::Error::Msg("attention: f32 context".into())),
        }
    }

    /// The gradients of q, k and v (`dims` the stacked projections' `[b, t, 3 hidden]`) from
    /// the context's gradient `g`.
    ///
    /// # Errors
    /// No forward before; a gradient of the wrong size; the products' errors.
    pub(crate) fn backward(
        &self,
        dims: (usize, usize, usize),
        g: &[f32],
    ) -> candle_core::Result<Parts> {
        Ok(self.0.backward_parts(&Shape::from(dims), None, g)?.0)
    }
}

/// What the forward keeps for the backward.
struct Saved {
    /// q, k and v, q and k (and v with `rotary_value`) rotated.
    inputs: KeptInputs,
    /// Per (sequence, head, query row): the row maximum of the scores and 1 / sum of exp.
    max: Vec<f32>,
    inv_sum: Vec<f32>,
}

/// q, k and v as the forward keeps them for the backward's products.
enum KeptInputs {
    /// Token-major `[b, t, hidden]` each (f32 products, or the per-product reference).
    Values(Parts),
    /// With bf16 products: per (sequence, head), a block of words laid out by `layout`.
    Words {
        /// The blocks, task `s * heads + head`'s at `task * layout.len()`.
        words: Lent<u32>,
        /// The layout of each block.
        layout: HeadLayout,
    },
}

struct AttentionOp {
    spec: FusedAttention,
    saved: OnceLock<Saved>,
    /// Whether bf16 products round and pack their f32 operands per product (the reference
    /// the packed-once path is tested against; never outside the tests).
    per_product: bool,
}

/// The dimensions of one call.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    /// The hidden width (of q, of k, of v).
    h: usize,
    heads: usize,
    d: usize,
    /// Query rows per tile.
    tile: usize,
}

impl Dims {
    /// The dims of projections of shape `[b, t, 3 h]`.
    fn new(shape: &Shape, heads: usize) -> candle_core::Result<Dims> {
        let (b, t, width) = shape.dims3()?;
        let h = width / 3;
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
    /// `[b, t, h]` buffer.
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

    /// The rotary shape of a `[b, t, h]` buffer.
    fn rotary_shape(&self) -> rotary::Shape {
        rotary::Shape::token_major(self.b, self.t, self.heads, self.d)
    }
}

/// A mask or bias of one call: its data and dims.
#[derive(Clone, Copy)]
struct MaskInput<'a> {
    data: &'a [f32],
    dims: &'a [usize],
}

impl<'a> MaskInput<'a> {
    fn view(self, dims: Dims) -> candle_core::Result<MaskView<'a>> {
        MaskView::new(self.data, self.dims, (dims.b, dims.heads, dims.t))
            .ok_or_else(|| candle_core::Error::Msg("attention: mask dims".into()))
    }
}

impl AttentionOp {
    /// The op of `spec` (whose mask the caller has made contiguous).
    fn new(spec: FusedAttention) -> AttentionOp {
        AttentionOp {
            spec,
            saved: OnceLock::new(),
            per_product: reference_path::taken(ReferencePath::OperandsPerProduct),
        }
    }

    /// Whether the tasks pack their head's operands once (bf16 products on this CPU).
    fn packs_once(&self) -> bool {
        !self.per_product && self.spec.precision.bf16_kernel().is_some()
    }

    /// Rotates `x` (`[b, t, h]`) in place, forward or back; nothing without rotary positions.
    fn rotate(&self, x: &mut [f32], dims: Dims, direction: Direction) -> candle_core::Result<()> {
        if let Some(rope) = &self.spec.rope {
            rotate_inplace(x, dims.rotary_shape(), rope.view(), direction)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        }
        Ok(())
    }

    /// Fills `scores` (`[r, t]`) with `c q k^T` for rows `i0..i0 + r` of the task's head; the
    /// caller adds the bias and mask and normalises.
    fn scores(
        &self,
        dims: Dims,
        inputs: HeadInputs<'_>,
        (i0, r): (usize, usize),
        scores: &mut [f32],
    ) -> candle_core::Result<()> {
        let Dims { t, d, .. } = dims;
        head_product(
            (r, t, d),
            Dst::Slice(scores),
            (0, t),
            false,
            (inputs.q_rows(i0, r)?, inputs.k_t()?),
            1.0 / (d as f32).sqrt(),
            self.spec.precision,
        )
    }

    /// Runs `f` on the views of the bias `bias` and of the spec's mask.
    fn with_masks<R>(
        &self,
        dims: Dims,
        bias: Option<MaskInput<'_>>,
        f: impl FnOnce(Option<MaskView<'_>>, Option<MaskView<'_>>) -> candle_core::Result<R>,
    ) -> candle_core::Result<R> {
        let bias = bias.map(|m| m.view(dims)).transpose()?;
        match &self.spec.mask {
            Some(m) => with_f32(m, "attention mask", |data| {
                let mask = MaskInput {
                    data,
                    dims: m.dims(),
                };
                f(bias, Some(mask.view(dims)?))
            }),
            None => f(bias, None),
        }
    }

    /// Multiplies row `i` of (s, head) by the dropout factors, if any.
    fn drop_row(&self, dims: Dims, s: usize, head: usize, i: usize, row: &mut [f32]) {
        if let Some(mask) = &self.spec.dropout {
            mask.scale_in_place(dims.prob_row(s, head, i), row);
        }
    }

    /// The forward pass on the projections `qkv` (`[b, t, 3h]`) with the bias `bias`: the
    /// context `[b, t, h]`; keeps what the backward needs.
    fn forward(
        &self,
        qkv: &[f32],
        shape: &Shape,
        bias: Option<MaskInput<'_>>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = Dims::new(shape, self.spec.heads)?;
        self.forward_parts(split_projections(qkv, dims.h), dims, bias)
    }

    /// [`AttentionOp::forward`] on q, k and v apart (each `[b, t, h]`, token-major).
    fn forward_parts(
        &self,
        (mut q, mut k, mut v): Parts,
        dims: Dims,
        bias: Option<MaskInput<'_>>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let Dims {
            b, t, h, heads, d, ..
        } = dims;
        self.rotate(&mut q, dims, Direction::Forward)?;
        self.rotate(&mut k, dims, Direction::Forward)?;
        if self.spec.rotary_value {
            self.rotate(&mut v, dims, Direction::Forward)?;
        }
        let layout = HeadLayout::new(t, d, dims.tile);
        let once = self.packs_once();
        // Every word written by its task's packing.
        let mut words = recycle::take(if once { b * heads * layout.len() } else { 0 });
        // Every element written by the products below (one per tile of rows and head).
        let mut context = recycle::take(b * t * h);
        let mut max = vec![0f32; b * heads * t];
        let mut inv_sum = vec![0f32; b * heads * t];
        let shared = ForwardShared {
            dims,
            parts: (&q, &k, &v),
            packed: once.then_some(layout),
            context: SharedOut::new(&mut context),
            max: SharedOut::new(&mut max),
            inv_sum: SharedOut::new(&mut inv_sum),
            words: SharedOut::new(&mut words),
        };
        let run = |bias: Option<MaskView<'_>>, mask: Option<MaskView<'_>>| {
            (0..b * heads).into_par_iter().try_for_each_init(
                ForwardBuffers::default,
                |buffers, task| -> candle_core::Result<()> {
                    self.forward_task(&shared, (bias.as_ref(), mask.as_ref()), task, buffers)
                },
            )
        };
        self.with_masks(dims, bias, run)?;
        // The f32 q, k and v, packed, are freed (to the allocator, as they were at the end of
        // the step before; held on the shelves they cost more fresh pages than they save).
        let inputs = if once {
            drop((q, k, v));
            KeptInputs::Words {
                words: Lent::new(words),
                layout,
            }
        } else {
            recycle::give(words);
            KeptInputs::Values((q, k, v))
        };
        let _ = self.saved.set(Saved {
            inputs,
            max,
            inv_sum,
        });
        let out_shape = Shape::from((b, t, h));
        Ok((CpuStorage::F32(context), out_shape))
    }

    /// Task `task` = (s, head) of the forward: its head's q, k and v (rounded and packed once
    /// into its block of words when `shared.packed`), then, tile by tile of query rows, `P =
    /// softmax(c q K^T + bias, masked)` (each row's maximum and `1 / sum` kept), dropped where
    /// the spec drops, and `P V` written into the head's columns of the context.
    fn forward_task(
        &self,
        shared: &ForwardShared<'_>,
        (bias, mask): (Option<&MaskView<'_>>, Option<&MaskView<'_>>),
        task: usize,
        buffers: &mut ForwardBuffers,
    ) -> candle_core::Result<()> {
        let dims = shared.dims;
        let Dims { t, h, heads, d, .. } = dims;
        let (s, head) = (task / heads, task % heads);
        // SAFETY: task (s, head) alone writes its t row statistics and its block of words.
        let stats_at = (s * heads + head) * t;
        let (task_max, task_inv) = unsafe {
            (
                shared.max.slice(stats_at, t),
                shared.inv_sum.slice(stats_at, t),
            )
        };
        let ForwardBuffers {
            scores,
            p: p_words,
            v: v_words,
        } = buffers;
        let (q, k, v) = shared.parts;
        let [q_rows, k_rows, v_rows] = [q, k, v].map(|x| dims.head_rows(x, s, head, 0));
        let (inputs, v_right) = match shared.packed {
            Some(layout) => {
                let block = unsafe { shared.words.slice(task * layout.len(), layout.len()) };
                layout.pack((q_rows, k_rows, v_rows), block)?;
                let v_right = Right::of(v_rows, (t, d), Some(v_words))?;
                (HeadInputs::Words(HeadWords::new(block, layout)?), v_right)
            }
            None => {
                let values = HeadInputs::Values {
                    q: q_rows,
                    k: k_rows,
                    v: v_rows,
                };
                (values, Right::Values(v_rows))
            }
        };
        let once = shared.packed.is_some();
        let mut i0 = 0;
        while i0 < t {
            let r = dims.tile.min(t - i0);
            scores.resize(r * t, 0.0);
            self.scores(dims, inputs, (i0, r), scores)?;
            for (i, row) in scores.chunks_exact_mut(t).enumerate() {
                add_bias(row, bias.map(|m| m.row(s, head, i0 + i)));
                let m = add_mask_max(row, mask.map(|m| m.row(s, head, i0 + i)));
                let inv = 1.0 / exp_sum(row, m);
                task_max[i0 + i] = m;
                task_inv[i0 + i] = inv;
                row.iter_mut().for_each(|p| *p *= inv);
                self.drop_row(dims, s, head, i0 + i, row);
            }
            let probs = Left::of(Mat::rows(scores, t), (r, t), once.then_some(&mut *p_words))?;
            // Task (s, head) alone writes these rows' columns of its head.
            head_product(
                (r, d, t),
                Dst::Shared(shared.context),
                ((s * t + i0) * h + head * d, h),
                false,
                (probs, v_right),
                1.0,
                self.spec.precision,
            )?;
            i0 += r;
        }
        Ok(())
    }

    /// The backward pass: the gradient of the projections `[b, t, 3h]` (of input shape
    /// `shape`) and, when the bias carries a gradient (its flag), of the bias, from the
    /// context's gradient `g`.
    fn backward(
        &self,
        shape: &Shape,
        bias: Option<(&Tensor, bool)>,
        g: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Option<Tensor>)> {
        let ((dq, dk, dv), dbias) = self.backward_parts(shape, bias, g)?;
        let dqkv = join_projections(&dq, &dk, &dv, shape.dims3()?.2 / 3);
        [dq, dk, dv].into_iter().for_each(recycle::give);
        Ok((dqkv, dbias))
    }

    /// [`AttentionOp::backward`] with the gradients of q, k and v apart (each `[b, t, h]`).
    fn backward_parts(
        &self,
        shape: &Shape,
        bias: Option<(&Tensor, bool)>,
        g: &[f32],
    ) -> candle_core::Result<(Parts, Option<Tensor>)> {
        let saved = self
            .saved
            .get()
            .ok_or_else(|| candle_core::Error::Msg("attention backward: nothing saved".into()))?;
        let dims = Dims::new(shape, self.spec.heads)?;
        let Dims { b, t, h, heads, .. } = dims;
        // Every element written by the tiles (dq by its rows, dk and dv by the first tile of
        // rows of each head, then added to).
        let (mut dq, mut dk, mut dv) = (
            recycle::take(b * t * h),
            recycle::take(b * t * h),
            recycle::take(b * t * h),
        );
        let bias_grad = bias.is_some_and(|(_, grad)| grad);
        let mut ds = vec![0f32; if bias_grad { b * heads * t * t } else { 0 }];
        let out = Gradients {
            dq: SharedOut::new(&mut dq),
            dk: SharedOut::new(&mut dk),
            dv: SharedOut::new(&mut dv),
            ds: bias_grad.then(|| SharedOut::new(&mut ds)),
        };
        let run = |g: &[f32], bias: Option<MaskView<'_>>, mask: Option<MaskView<'_>>| {
            let inputs = BackwardInputs {
                saved,
                g,
                bias,
                mask,
            };
            (0..b * heads).into_par_iter().try_for_each_init(
                TileBuffers::default,
                |buffers, task| {
                    let (s, head) = (task / heads, task % heads);
                    let head_inputs = saved.inputs.head(dims, s, head)?;
                    let mut i0 = 0;
                    while i0 < t {
                        let r = dims.tile.min(t - i0);
                        let tile = Tile { s, head, i0, r };
                        self.backward_tile(dims, tile, (&inputs, head_inputs), out, buffers)?;
                        i0 += r;
                    }
                    Ok(())
                },
            )
        };
        if g.len() != b * t * h {
            return Err(candle_core::Error::Msg(
                "attention backward: the gradient's size".into(),
            ));
        }
        match bias {
            Some((m, _)) => with_f32(m, "attention bias", |data| {
                let bias = MaskInput {
                    data,
                    dims: m.dims(),
                };
                self.with_masks(dims, Some(bias), |bias, mask| run(g, bias, mask))
            }),
            None => self.with_masks(dims, None, |bias, mask| run(g, bias, mask)),
        }?;
        self.rotate(&mut dq, dims, Direction::Inverse)?;
        self.rotate(&mut dk, dims, Direction::Inverse)?;
        if self.spec.rotary_value {
            self.rotate(&mut dv, dims, Direction::Inverse)?;
        }
        let dbias = match bias {
            Some((m, true)) => Some(reduce_to_mask(ds, m.dims(), dims, m.shape())?),
            _ => None,
        };
        Ok(((dq, dk, dv), dbias))
    }

    /// The backward of one tile: P recomputed, then `dV += (P f)^T dO`, `dPf = dO v^T`, dS,
    /// `dq = c dS k` and `dk += c dS^T q` (see the module doc).
    fn backward_tile(
        &self,
        dims: Dims,
        tile: Tile,
        (inputs, head): (&BackwardInputs<'_>, HeadInputs<'_>),
        out: Gradients,
        buffers: &mut TileBuffers,
    ) -> candle_core::Result<()> {
        let Dims { t, h, d, .. } = dims;
        let Tile { s, i0, r, .. } = tile;
        let TileBuffers { p, pf, dp, a, b } = buffers;
        dp.resize(r * t, 0.0);
        self.probabilities(dims, tile, (inputs, head), p)?;
        let probs = self.dropped(dims, tile, p, pf);
        let (scale, precision) = (1.0 / (d as f32).sqrt(), self.spec.precision);
        // Packed per product here with bf16 products when the head's inputs are words.
        let once = matches!(head, HeadInputs::Words(_));
        let g_rows = dims.head_rows(inputs.g, s, tile.head, i0);
        // SAFETY (every shared output): task (s, head) alone writes the columns of its head in
        // the rows of its sequence, and its own rows of the score gradient.
        // dV += (P f)^T dO (the first tile of rows writes, the others add)
        head_product(
            (t, d, r),
            Dst::Shared(out.dv),
            (s * t * h + tile.head * d, h),
            i0 > 0,
            (
                Left::of(Mat::rows(probs, t).t(), (t, r), once.then_some(&mut *a))?,
                Right::of(g_rows, (r, d), once.then_some(&mut *b))?,
            ),
            1.0,
            precision,
        )?;
        // dPf = dO v^T
        head_product(
            (r, t, d),
            Dst::Slice(dp),
            (0, t),
            false,
            (
                Left::of(g_rows, (r, d), once.then_some(&mut *a))?,
                head.v_t()?,
            ),
            1.0,
            precision,
        )?;
        self.score_gradient(dims, tile, (p, probs), dp);
        if let Some(ds) = out.ds {
            // dS is the gradient of the (broadcast) bias.
            let at = dims.prob_row(s, tile.head, i0);
            unsafe { ds.slice(at, r * t) }.copy_from_slice(dp);
        }
        // dq rows = c dS k
        head_product(
            (r, d, t),
            Dst::Shared(out.dq),
            ((s * t + i0) * h + tile.head * d, h),
            false,
            (
                Left::of(Mat::rows(dp, t), (r, t), once.then_some(&mut *a))?,
                head.k()?,
            ),
            scale,
            precision,
        )?;
        // dk += c dS^T q rows (as dV)
        head_product(
            (t, d, r),
            Dst::Shared(out.dk),
            (s * t * h + tile.head * d, h),
            i0 > 0,
            (
                Left::of(Mat::rows(dp, t).t(), (t, r), once.then_some(&mut *a))?,
                head.q_tile(i0, r)?,
            ),
            scale,
            precision,
        )
    }

    /// Fills `p` (`[r, t]`) with the tile's probabilities `P`, recomputed from q, k, the bias,
    /// the mask and the row statistics the forward kept.
    fn probabilities(
        &self,
        dims: Dims,
        tile: Tile,
        (inputs, head): (&BackwardInputs<'_>, HeadInputs<'_>),
        p: &mut Vec<f32>,
    ) -> candle_core::Result<()> {
        let Tile { s, i0, r, .. } = tile;
        let t = dims.t;
        let saved = inputs.saved;
        p.resize(r * t, 0.0);
        self.scores(dims, head, (i0, r), p)?;
        let stats_at = (s * dims.heads + tile.head) * t + i0;
        for (i, row) in p.chunks_exact_mut(t).enumerate() {
            let (bias, mask) = (inputs.bias.as_ref(), inputs.mask.as_ref());
            add_bias(row, bias.map(|m| m.row(s, tile.head, i0 + i)));
            add_mask_max(row, mask.map(|m| m.row(s, tile.head, i0 + i)));
            exp_sum(row, saved.max[stats_at + i]);
            let inv = saved.inv_sum[stats_at + i];
            row.iter_mut().for_each(|x| *x *= inv);
        }
        Ok(())
    }

    /// The tile's `P f`: `p` itself without dropout, else a copy in `pf` with the dropout
    /// factors applied.
    fn dropped<'b>(&self, dims: Dims, tile: Tile, p: &'b [f32], pf: &'b mut Vec<f32>) -> &'b [f32] {
        if self.spec.dropout.is_none() {
            return p;
        }
        pf.clear();
        pf.extend_from_slice(p);
        for (i, row) in pf.chunks_exact_mut(dims.t).enumerate() {
            self.drop_row(dims, tile.s, tile.head, tile.i0 + i, row);
        }
        pf
    }

    /// Turns `dp` (the tile's `dPf`) into `dS = P * (f * dPf - D)`, `D_i = sum_j (P f)_ij
    /// dPf_ij`, from `P` and `P f` (`probs`).
    fn score_gradient(&self, dims: Dims, tile: Tile, (p, probs): (&[f32], &[f32]), dp: &mut [f32]) {
        let t = dims.t;
        let rows = dp.chunks_exact_mut(t).zip(p.chunks_exact(t));
        for (i, ((dp_row, p_row), pf_row)) in rows.zip(probs.chunks_exact(t)).enumerate() {
            let dot: f32 = pf_row.iter().zip(dp_row.iter()).map(|(a, b)| a * b).sum();
            self.drop_row(dims, tile.s, tile.head, tile.i0 + i, dp_row);
            for (x, &pv) in dp_row.iter_mut().zip(p_row) {
                *x = pv * (*x - dot);
            }
        }
    }
}

/// A backward tile: query rows `i0..i0 + r` of head `head` of sequence `s`.
#[derive(Clone, Copy)]
struct Tile {
    s: usize,
    head: usize,
    i0: usize,
    r: usize,
}

/// What every backward tile reads: the forward's saved state, the context's gradient and the
/// views of the bias and mask.
struct BackwardInputs<'a> {
    saved: &'a Saved,
    g: &'a [f32],
    bias: Option<MaskView<'a>>,
    mask: Option<MaskView<'a>>,
}

/// The gradients the backward tiles write: of q, k, v (`[b, t, h]`) and, when the bias carries
/// a gradient, of the scores (`[b, heads, t, t]`).
#[derive(Clone, Copy)]
struct Gradients {
    dq: SharedOut,
    dk: SharedOut,
    dv: SharedOut,
    ds: Option<SharedOut>,
}

/// A backward task's scratch for its tiles: `P`, `P f` (with dropout) and `dPf` / dS, and
/// the words of a left and a right operand packed per product (bf16 products).
#[derive(Default)]
struct TileBuffers {
    p: Vec<f32>,
    pf: Vec<f32>,
    dp: Vec<f32>,
    a: Vec<u32>,
    b: Vec<u32>,
}

/// What every task of one forward reads and writes: the sizes, the rotated q, k and v
/// (`[b, t, h]` each), the layout of a task's block of words when the operands are packed once,
/// and the outputs (the context, each query row's maximum and `1 / sum`, the words).
struct ForwardShared<'a> {
    dims: Dims,
    parts: (&'a [f32], &'a [f32], &'a [f32]),
    packed: Option<HeadLayout>,
    context: SharedOut<f32>,
    max: SharedOut<f32>,
    inv_sum: SharedOut<f32>,
    words: SharedOut<u32>,
}

/// A forward task's scratch: a tile of scores and probabilities, and (bf16 products) its
/// words and those of the head's V.
#[derive(Default)]
struct ForwardBuffers {
    scores: Vec<f32>,
    p: Vec<u32>,
    v: Vec<u32>,
}

/// The q, k and v of one task's head, as its products read them.
#[derive(Clone, Copy)]
enum HeadInputs<'a> {
    /// The head's `t x d` values (in the token-major `[b, t, h]` buffers), each product
    /// rounding and packing what it reads (with bf16 products).
    Values { q: Mat<'a>, k: Mat<'a>, v: Mat<'a> },
    /// The head's words, packed once by the forward.
    Words(HeadWords<'a>),
}

impl<'a> HeadInputs<'a> {
    /// Rows `i0..i0 + r` of q as a left operand (`r x d`).
    fn q_rows(self, i0: usize, r: usize) -> candle_core::Result<Left<'a>> {
        match self {
            HeadInputs::Values { q, .. } => Ok(Left::Values(from_row(q, i0))),
            HeadInputs::Words(w) => w.q_rows(i0, r),
        }
    }

    /// `K^T` (`d x t`).
    fn k_t(self) -> candle_core::Result<Right<'a>> {
        match self {
            HeadInputs::Values { k, .. } => Ok(Right::Values(k.t())),
            HeadInputs::Words(w) => w.k_t(),
        }
    }

    /// `V^T` (`d x t`).
    fn v_t(self) -> candle_core::Result<Right<'a>> {
        match self {
            HeadInputs::Values { v, .. } => Ok(Right::Values(v.t())),
            HeadInputs::Words(w) => w.v_t(),
        }
    }

    /// K (`t x d`).
    fn k(self) -> candle_core::Result<Right<'a>> {
        match self {
            HeadInputs::Values { k, .. } => Ok(Right::Values(k)),
            HeadInputs::Words(w) => w.k(),
        }
    }

    /// Rows `i0..i0 + r` of q (a tile) as a right operand (`r x d`).
    fn q_tile(self, i0: usize, r: usize) -> candle_core::Result<Right<'a>> {
        match self {
            HeadInputs::Values { q, .. } => Ok(Right::Values(from_row(q, i0))),
            HeadInputs::Words(w) => w.q_tile(i0, r),
        }
    }
}

impl KeptInputs {
    /// The inputs of sequence `s`, head `head`.
    ///
    /// # Errors
    /// Words that do not hold the block.
    fn head(&self, dims: Dims, s: usize, head: usize) -> candle_core::Result<HeadInputs<'_>> {
        match self {
            KeptInputs::Values((q, k, v)) => {
                let [q, k, v] = [q, k, v].map(|x| dims.head_rows(x, s, head, 0));
                Ok(HeadInputs::Values { q, k, v })
            }
            KeptInputs::Words { words, layout } => {
                let len = layout.len();
                let at = (s * dims.heads + head) * len;
                let block = words.get(at..at + len).ok_or_else(|| {
                    candle_core::Error::Msg("attention backward: the kept words".into())
                })?;
                Ok(HeadInputs::Words(HeadWords::new(block, *layout)?))
            }
        }
    }
}

/// q, k and v of the token-major projections `[.., 3h]`, each `[.., h]`.
fn split_projections(qkv: &[f32], h: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = qkv.len() / (3 * h).max(1);
    let (mut q, mut k, mut v) = (
        Vec::with_capacity(rows * h),
        Vec::with_capacity(rows * h),
        Vec::with_capacity(rows * h),
    );
    for row in qkv.chunks_exact(3 * h) {
        q.extend_from_slice(&row[..h]);
        k.extend_from_slice(&row[h..2 * h]);
        v.extend_from_slice(&row[2 * h..]);
    }
    (q, k, v)
}

/// The rows of `q`, `k` and `v` (each `[.., h]`) side by side, `[.., 3h]`.
fn join_projections(q: &[f32], k: &[f32], v: &[f32], h: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(3 * q.len());
    for ((q, k), v) in q
        .chunks_exact(h)
        .zip(k.chunks_exact(h))
        .zip(v.chunks_exact(h))
    {
        out.extend_from_slice(q);
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}

/// `row += bias` where there is a bias.
fn add_bias(row: &mut [f32], bias: Option<&[f32]>) {
    if let Some(bias) = bias {
        row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    }
}

/// The gradient of a bias of dims `mask_dims` from the score gradients `ds`
/// (`[b, heads, t, t]`): each row summed over the dims the bias broadcasts, in a fixed order
/// (sequences, then heads, then rows), so that the sums do not depend on the threads.
fn reduce_to_mask(
    ds: Vec<f32>,
    mask_dims: &[usize],
    dims: Dims,
    shape: &Shape,
) -> candle_core::Result<Tensor> {
    let Dims { b, t, heads, .. } = dims;
    if mask_dims == [b, heads, t, t] {
        return tensor(ds, shape);
    }
    let &[mb, mh, mq, _] = mask_dims else {
        return Err(candle_core::Error::Msg("attention: mask dims".into()));
    };
    let mut out = vec![0f32; mb * mh * mq * t];
    for s in 0..b {
        for head in 0..heads {
            for i in 0..t {
                let at = mask_row([mb, mh, mq], s, head, i) * t;
                let from = dims.prob_row(s, head, i);
                for (o, &x) in out[at..at + t].iter_mut().zip(&ds[from..from + t]) {
                    *o += x;
                }
            }
        }
    }
    tensor(out, shape)
}

impl CustomOp1 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(f32_slice(s1, l1, "attention q, k, v")?, l1.shape(), None)
    }

    fn bwd(&self, qkv: &Tensor, _res: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let (dqkv, _) = with_f32(g, "attention backward", |g| {
            self.backward(qkv.shape(), None, g)
        })?;
        Ok(Some(tensor(dqkv, qkv.shape())?))
    }
}

impl CustomOp2 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let bias = MaskInput {
            data: f32_slice(s2, l2, "attention bias")?,
            dims: l2.dims(),
        };
        self.forward(
            f32_slice(s1, l1, "attention q, k, v")?,
            l1.shape(),
            Some(bias),
        )
    }

    fn bwd(
        &self,
        qkv: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dqkv, dbias) = with_f32(g, "attention backward", |g| {
            self.backward(qkv.shape(), Some((bias, bias.track_op())), g)
        })?;
        Ok((Some(tensor(dqkv, qkv.shape())?), dbias))
    }
}
