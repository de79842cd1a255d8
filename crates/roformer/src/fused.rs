//! The encoder stack on the CPU in f32 as a few fused passes instead of one candle op per step.
//!
//! The same maths as [`crate::encoder::Layer`] with softmax attention, per layer (`x`:
//! `[b*t, hidden]`, `d` the head dim):
//!
//! ```text
//! [q | k] = x [Wq | Wk]^T + [bq | bk]       one [b*t, 2*hidden] buffer, two products into it
//! q, k <- R q, R k                          in place, through the rotary kernels (token-major)
//! v = x Wv^T + bv  (v <- R v if rotary_value)
//! per (sequence, head, tile of query rows): s = q k^T / sqrt(d) + mask,  p = exp(s - max s),
//!                                           c = (p v) / sum p
//! a = Norm(x + bo + c Wo^T)                 residual and bias preloaded, the product adds on
//! y = Norm(a + b2 + act(a W1^T + b1) W2^T)
//! ```
//!
//! What this saves over the op-by-op path: the `[b, h, t, t]` score tensor (each task keeps
//! a tile of scores in cache), the head transposes (the products read q, k, v and write the
//! context through strides), separate passes for biases, scaling, mask, residuals and the
//! normalisation, the zero-fill of every product's output, libm's scalar `exp`/`erf`
//! (vectorised polynomials here, within a few 1e-7 of them), and most synchronisation. Every
//! product runs single-threaded inside a task (no barrier inside a product), and the tasks
//! are, by batch shape:
//! - whole sequences through the whole stack, when the batch splits evenly over the threads
//!   (no synchronisation inside the stack at all);
//! - otherwise, per layer, blocks of rows through every step but attention (every step but
//!   attention works on rows independently), then attention tasks per (sequence, head, tile);
//! - for few rows, products split by output columns instead, so that each weight is read once.
//!
//! It runs when the input and every weight are contiguous f32 on the CPU; otherwise
//! [`encoder_forward`] returns `None` and the encoder runs op by op, which stays the reference
//! (the tests below compare the two).

use std::mem::MaybeUninit;
use std::ops::Range;

use candle_core::{CpuStorage, DType, Device, Layout, Storage, StorageRef, Tensor};
use candle_nn::Linear;
use gemm::{gemm, Parallelism};
use rayon::prelude::*;
use rotary::{rotate_inplace, CosSinView, Direction, Shape};

use crate::activation::Activation;
use crate::norm::Norm;

/// Elements of the score tile one attention task holds (1 MiB of f32: in L2 cache).
const SCORE_TILE_ELEMENTS: usize = 1 << 18;

/// Rows a task of sequences should have at least, so that its products stay efficient.
const MIN_TASK_ROWS: usize = 512;

/// Bounds of the row blocks of a batch spread over the threads.
const MIN_BLOCK_ROWS: usize = 64;
const MAX_BLOCK_ROWS: usize = 512;

/// Below this many rows a batch spread over the threads splits its products by output
/// columns instead of rows: each weight is then read once, not once per row block.
const COLUMN_MODE_ROWS: usize = 1024;

/// Column tasks per thread of a product split by columns (spare tasks let idle threads
/// steal work), and the granularity of their widths.
const COLUMN_TASKS_PER_THREAD: usize = 4;
const COLUMN_ALIGN: usize = 64;

/// Elements per task of an element-wise pass spread over the threads.
const PASS_CHUNK: usize = 1 << 15;

/// The parts of one encoder layer the fused path reads.
pub(crate) struct LayerParts<'a> {
    pub query: &'a Linear,
    pub key: &'a Linear,
    pub value: &'a Linear,
    pub heads: usize,
    pub rotary_value: bool,
    pub attention_dense: &'a Linear,
    pub attention_norm: &'a Norm,
    pub intermediate: &'a Linear,
    pub activation: Activation,
    pub output: &'a Linear,
    pub output_norm: &'a Norm,
    /// The epsilon of the layer norms (`layer_norm_eps`).
    pub layer_norm_eps: f64,
}

/// Runs the layers on `x` (`[b, t, hidden]`) with the tokens' rotary coefficients (`t` rows,
/// or `b * t` rows, one per token) and an additive mask of shape `[1 or b, 1, 1 or t, t]`.
/// `None` when this path does not apply (not contiguous f32 on the CPU, mismatched sizes, a
/// mask of another shape).
///
/// # Errors
/// Candle and rotary errors (as candle errors).
pub(crate) fn encoder_forward(
    layers: &[LayerParts<'_>],
    x: &Tensor,
    rope: CosSinView<'_>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    if !matches!(x.device(), Device::Cpu) || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let (b, t, h) = x.dims3()?;
    let Some(first) = layers.first() else {
        return Ok(None);
    };
    let heads = first.heads;
    if heads == 0 || !h.is_multiple_of(heads) || layers.iter().any(|l| l.heads != heads) {
        return Ok(None);
    }
    let geometry = Geometry {
        t,
        h,
        heads,
        d: h / heads,
        inter: first.intermediate.weight().dim(0)?,
    };
    let x_held = Held::new(x);
    let mask_held = mask.map(Held::new);
    let held: Vec<HeldLayer<'_>> = layers.iter().map(HeldLayer::new).collect();
    let Some(plans) = held
        .iter()
        .map(|l| l.plan(&geometry))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let Some(xs) = x_held.f32s().filter(|x| x.len() == b * t * h) else {
        return Ok(None);
    };
    let mask = match (&mask_held, mask) {
        (Some(held), Some(m)) => match held.f32s().and_then(|d| MaskView::new(d, m.dims(), b, t)) {
            Some(view) => Some(view),
            None => return Ok(None),
        },
        _ => None,
    };
    let stack = Stack {
        plans: &plans,
        geometry,
        x: xs,
        rope,
        mask,
    };

    let threads = rayon::current_num_threads();
    let group = sequences_per_task(b, t, threads);
    let y = if group >= b {
        stack.run(0..b, threads)?
    } else {
        let mut y = vec![0f32; b * t * h];
        y.par_chunks_mut(group * t * h)
            .enumerate()
            .try_for_each(|(g, chunk)| {
                let first = g * group;
                let out = stack.run(first..first + chunk.len() / (t * h), 1)?;
                chunk.copy_from_slice(&out);
                Ok::<(), candle_core::Error>(())
            })?;
        y
    };
    Ok(Some(Tensor::from_vec(y, (b, t, h), &Device::Cpu)?))
}

/// How many sequences one task runs through the whole stack: `b` (a single task, spread over
/// the threads step by step) unless the tasks of whole sequences come out as a multiple of
/// the threads, or many per thread.
fn sequences_per_task(b: usize, t: usize, threads: usize) -> usize {
    if threads <= 1 || b <= 1 {
        return b.max(1);
    }
    let group = MIN_TASK_ROWS
        .div_ceil(t.max(1))
        .clamp(1, b.div_ceil(threads));
    let tasks = b.div_ceil(group);
    if tasks.is_multiple_of(threads) || tasks >= 4 * threads {
        group
    } else {
        b
    }
}

/// Sizes shared by every layer.
struct Geometry {
    t: usize,
    h: usize,
    heads: usize,
    d: usize,
    inter: usize,
}

/// A tensor's storage, read-locked for as long as its data is in use.
struct Held<'a> {
    storage: StorageRef<'a>,
    layout: &'a Layout,
}

impl<'a> Held<'a> {
    fn new(t: &'a Tensor) -> Self {
        let (storage, layout) = t.storage_and_layout();
        Held { storage, layout }
    }

    /// The elements, if the tensor is contiguous f32 on the CPU.
    fn f32s(&self) -> Option<&[f32]> {
        let Storage::Cpu(CpuStorage::F32(data)) = &*self.storage else {
            return None;
        };
        let (start, end) = self.layout.contiguous_offsets()?;
        data.get(start..end)
    }
}

/// The held weight and bias of a dense layer.
struct HeldLinear<'a> {
    weight: Held<'a>,
    bias: Option<Held<'a>>,
}

impl<'a> HeldLinear<'a> {
    fn new(l: &'a Linear) -> Self {
        HeldLinear {
            weight: Held::new(l.weight()),
            bias: l.bias().map(Held::new),
        }
    }

    /// `(W [out, in] row-major, b [out])`, if both are contiguous f32 of those sizes.
    fn get(&self, out: usize, inp: usize) -> Option<Dense<'_>> {
        let w = self.weight.f32s().filter(|w| w.len() == out * inp)?;
        let b = match &self.bias {
            Some(b) => Some(b.f32s().filter(|b| b.len() == out)?),
            None => None,
        };
        Some((w, b))
    }
}

/// Holds a layer norm's weight and bias (`None` for an RMS norm, which has none, or a layer
/// norm without bias, which this path does not take).
fn held_norm(norm: &Norm) -> Option<(Held<'_>, Held<'_>)> {
    match norm {
        Norm::Layer(ln) => Some((Held::new(ln.weight()), Held::new(ln.bias()?))),
        Norm::Rms { .. } => None,
    }
}

/// A normalisation as plain numbers.
enum RowNorm<'a> {
    Layer {
        weight: &'a [f32],
        bias: &'a [f32],
        eps: f32,
    },
    Rms {
        eps: f32,
    },
}

/// The norm as numbers; `layer_norm_eps` is the epsilon a layer norm was built with.
fn row_norm<'a>(
    norm: &Norm,
    held: &'a Option<(Held<'_>, Held<'_>)>,
    width: usize,
    layer_norm_eps: f64,
) -> Option<RowNorm<'a>> {
    match (norm, held) {
        (Norm::Layer(_), Some((w, b))) => Some(RowNorm::Layer {
            weight: w.f32s().filter(|w| w.len() == width)?,
            bias: b.f32s().filter(|b| b.len() == width)?,
            eps: layer_norm_eps as f32,
        }),
        (Norm::Rms { eps }, _) => Some(RowNorm::Rms { eps: *eps as f32 }),
        _ => None,
    }
}

/// A layer's tensors, read-locked.
struct HeldLayer<'a> {
    parts: &'a LayerParts<'a>,
    query: HeldLinear<'a>,
    key: HeldLinear<'a>,
    value: HeldLinear<'a>,
    dense: HeldLinear<'a>,
    attention_norm: Option<(Held<'a>, Held<'a>)>,
    intermediate: HeldLinear<'a>,
    output: HeldLinear<'a>,
    output_norm: Option<(Held<'a>, Held<'a>)>,
}

impl<'a> HeldLayer<'a> {
    fn new(parts: &'a LayerParts<'a>) -> Self {
        HeldLayer {
            parts,
            query: HeldLinear::new(parts.query),
            key: HeldLinear::new(parts.key),
            value: HeldLinear::new(parts.value),
            dense: HeldLinear::new(parts.attention_dense),
            attention_norm: held_norm(parts.attention_norm),
            intermediate: HeldLinear::new(parts.intermediate),
            output: HeldLinear::new(parts.output),
            output_norm: held_norm(parts.output_norm),
        }
    }

    /// The layer as slices, if every tensor is contiguous f32 of the expected size.
    fn plan(&self, g: &Geometry) -> Option<LayerPlan<'_>> {
        let (h, inter, eps) = (g.h, g.inter, self.parts.layer_norm_eps);
        Some(LayerPlan {
            query: self.query.get(h, h)?,
            key: self.key.get(h, h)?,
            value: self.value.get(h, h)?,
            dense: self.dense.get(h, h)?,
            attention_norm: row_norm(self.parts.attention_norm, &self.attention_norm, h, eps)?,
            intermediate: self.intermediate.get(inter, h)?,
            activation: self.parts.activation,
            output: self.output.get(h, inter)?,
            output_norm: row_norm(self.parts.output_norm, &self.output_norm, h, eps)?,
            rotary_value: self.parts.rotary_value,
        })
    }
}

/// A dense layer as slices: `W` `[out, in]` row-major and the bias.
type Dense<'a> = (&'a [f32], Option<&'a [f32]>);

/// One layer's weights as slices.
struct LayerPlan<'a> {
    query: Dense<'a>,
    key: Dense<'a>,
    value: Dense<'a>,
    dense: Dense<'a>,
    attention_norm: RowNorm<'a>,
    intermediate: Dense<'a>,
    activation: Activation,
    output: Dense<'a>,
    output_norm: RowNorm<'a>,
    rotary_value: bool,
}

/// An additive mask `[mb, 1, mq, t]` (`mb` 1 or the batch, `mq` 1 or `t`) as rows of keys.
#[derive(Clone, Copy)]
struct MaskView<'a> {
    data: &'a [f32],
    per_sequence: bool,
    per_query: bool,
    t: usize,
}

impl<'a> MaskView<'a> {
    fn new(data: &'a [f32], dims: &[usize], b: usize, t: usize) -> Option<Self> {
        let [mb, 1, mq, mt] = *dims else {
            return None;
        };
        let ok = (mb == 1 || mb == b) && (mq == 1 || mq == t) && mt == t;
        (ok && data.len() == mb * mq * t).then_some(MaskView {
            data,
            per_sequence: mb != 1,
            per_query: mq != 1,
            t,
        })
    }

    /// The additive mask over keys for query `i` of sequence `s` (of the whole batch).
    fn row(&self, s: usize, i: usize) -> &'a [f32] {
        let mq = if self.per_query { self.t } else { 1 };
        let s = if self.per_sequence { s } else { 0 };
        let i = if self.per_query { i } else { 0 };
        let start = (s * mq + i) * self.t;
        &self.data[start..start + self.t]
    }
}

/// The whole stack and its inputs.
struct Stack<'a> {
    plans: &'a [LayerPlan<'a>],
    geometry: Geometry,
    /// The input `[b * t, hidden]`.
    x: &'a [f32],
    rope: CosSinView<'a>,
    mask: Option<MaskView<'a>>,
}

impl Stack<'_> {
    /// The last hidden states `[n * t, hidden]` of the sequences `seqs`, each step spread over
    /// `threads` threads.
    fn run(&self, seqs: Range<usize>, threads: usize) -> candle_core::Result<Vec<f32>> {
        let Geometry { t, h, .. } = self.geometry;
        let rows = seqs.len() * t;
        let rope = if self.rope.rows() == t {
            self.rope
        } else {
            self.rope.slice(seqs.start * t, rows).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "fused encoder: {} rotary rows for sequences {seqs:?} of {t} tokens",
                    self.rope.rows()
                ))
            })?
        };
        let step = Step {
            geometry: &self.geometry,
            sequences: seqs.clone(),
            rope,
            mask: self.mask,
            parallel: threads > 1,
            columns: (threads > 1 && rows < COLUMN_MODE_ROWS).then_some(threads),
            blocks: row_blocks(rows, threads),
        };
        let input = &self.x[seqs.start * t * h..seqs.end * t * h];
        let mut hidden: Option<Vec<f32>> = None;
        for plan in self.plans {
            hidden = Some(step.layer(plan, hidden.as_deref().unwrap_or(input))?);
        }
        Ok(hidden.unwrap_or_else(|| input.to_vec()))
    }
}

/// Splits `rows` into consecutive blocks, one for a single thread, about one per thread
/// otherwise (within [`MIN_BLOCK_ROWS`]..=[`MAX_BLOCK_ROWS`] rows).
fn row_blocks(rows: usize, threads: usize) -> Vec<Range<usize>> {
    let len = if threads <= 1 {
        rows
    } else {
        rows.div_ceil(threads).clamp(MIN_BLOCK_ROWS, MAX_BLOCK_ROWS)
    }
    .max(1);
    (0..rows)
        .step_by(len)
        .map(|start| start..(start + len).min(rows))
        .collect()
}

/// One layer applied to some sequences.
struct Step<'a> {
    geometry: &'a Geometry,
    sequences: Range<usize>,
    rope: CosSinView<'a>,
    mask: Option<MaskView<'a>>,
    /// Whether attention and the row blocks run on the threads.
    parallel: bool,
    /// `Some(threads)`: products split by columns over that many threads, element-wise
    /// passes over row chunks (few rows); `None`: everything but attention by row blocks.
    columns: Option<usize>,
    blocks: Vec<Range<usize>>,
}

impl Step<'_> {
    /// The layer on `x` (`[n * t, hidden]`).
    fn layer(&self, p: &LayerPlan<'_>, x: &[f32]) -> candle_core::Result<Vec<f32>> {
        match self.columns {
            Some(threads) => self.layer_by_columns(p, x, threads),
            None => self.layer_by_rows(p, x),
        }
    }

    /// The layer with its products split by output columns over `threads` threads.
    fn layer_by_columns(
        &self,
        p: &LayerPlan<'_>,
        x: &[f32],
        threads: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let Geometry {
            h, heads, inter, ..
        } = *self.geometry;
        let rows = self.sequences.len() * self.geometry.t;
        let all = 0..rows;

        let mut qk = filled(rows, 2 * h, None, &[p.query.1, p.key.1])?;
        product_xwt_split(&mut qk, 2 * h, 0, x, h, p.query.0, threads)?;
        product_xwt_split(&mut qk, 2 * h, h, x, h, p.key.0, threads)?;
        self.rotate_rows(&mut qk, 2 * heads, &all)?;
        let mut v = filled(rows, h, None, &[p.value.1])?;
        product_xwt_split(&mut v, h, 0, x, h, p.value.0, threads)?;
        if p.rotary_value {
            self.rotate_rows(&mut v, heads, &all)?;
        }

        let context = self.attention(&qk, &v)?;
        drop((qk, v));

        let mut a = filled(rows, h, Some(x), &[p.dense.1])?;
        product_xwt_split(&mut a, h, 0, &context, h, p.dense.0, threads)?;
        drop(context);
        normalize_rows_par(&mut a, h, &p.attention_norm);
        let mut inner = filled(rows, inter, None, &[p.intermediate.1])?;
        product_xwt_split(&mut inner, inter, 0, &a, h, p.intermediate.0, threads)?;
        let inner = if p.activation == Activation::Gelu {
            inner.par_chunks_mut(PASS_CHUNK).for_each(gelu_erf);
            inner
        } else {
            activate(inner, rows, inter, p.activation)?
        };
        let mut y = filled(rows, h, Some(&a), &[p.output.1])?;
        product_xwt_split(&mut y, h, 0, &inner, inter, p.output.0, threads)?;
        normalize_rows_par(&mut y, h, &p.output_norm);
        Ok(y)
    }

    /// The layer by row blocks, each block through every step but attention in one task.
    fn layer_by_rows(&self, p: &LayerPlan<'_>, x: &[f32]) -> candle_core::Result<Vec<f32>> {
        let Geometry {
            h, heads, inter, ..
        } = *self.geometry;
        let rows = self.sequences.len() * self.geometry.t;
        let x_rows = |r: &Range<usize>| &x[r.start * h..r.end * h];

        // [q | k] rotated; v (rotated if rotary_value).
        let qk = build_rows(rows, 2 * h, &self.blocks, self.parallel, |r, out| {
            let qk = out.init(None, &[p.query.1, p.key.1]);
            product_xwt(qk, 2 * h, 0, x_rows(r), h, p.query.0)?;
            product_xwt(qk, 2 * h, h, x_rows(r), h, p.key.0)?;
            self.rotate_rows(qk, 2 * heads, r)
        })?;
        let v = build_rows(rows, h, &self.blocks, self.parallel, |r, out| {
            let v = out.init(None, &[p.value.1]);
            product_xwt(v, h, 0, x_rows(r), h, p.value.0)?;
            if p.rotary_value {
                self.rotate_rows(v, heads, r)?;
            }
            Ok(())
        })?;

        let context = self.attention(&qk, &v)?;
        drop((qk, v));

        build_rows(rows, h, &self.blocks, self.parallel, |r, out| {
            // a = Norm(x + bo + c Wo^T)
            let mut a = filled(r.len(), h, Some(x_rows(r)), &[p.dense.1])?;
            product_xwt(&mut a, h, 0, &context[r.start * h..r.end * h], h, p.dense.0)?;
            normalize_rows(&mut a, h, &p.attention_norm);
            // y = Norm(a + b2 + act(a W1^T + b1) W2^T)
            let mut inner = filled(r.len(), inter, None, &[p.intermediate.1])?;
            product_xwt(&mut inner, inter, 0, &a, h, p.intermediate.0)?;
            let inner = activate(inner, r.len(), inter, p.activation)?;
            let y = out.init(Some(&a), &[p.output.1]);
            product_xwt(y, h, 0, &inner, inter, p.output.0)?;
            normalize_rows(y, h, &p.output_norm);
            Ok(())
        })
    }

    /// Rotates `buf`, the rows `rows` (of this step's sequences) with `heads` heads of `d`
    /// each, in place: one rotary call per sequence the rows touch.
    fn rotate_rows(
        &self,
        buf: &mut [f32],
        heads: usize,
        rows: &Range<usize>,
    ) -> candle_core::Result<()> {
        let Geometry { t, d, .. } = *self.geometry;
        let width = heads * d;
        let mut row = rows.start;
        while row < rows.end {
            let (s, i) = (row / t, row % t);
            let len = (t - i).min(rows.end - row);
            let table_row = if self.rope.rows() == t { i } else { s * t + i };
            let table = self.rope.slice(table_row, len).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "fused encoder: no rotary rows {table_row}..{} in a table of {}",
                    table_row + len,
                    self.rope.rows()
                ))
            })?;
            let offset = (row - rows.start) * width;
            rotate_inplace(
                &mut buf[offset..offset + len * width],
                Shape::token_major(1, len, heads, d),
                table,
                Direction::Forward,
            )
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
            row += len;
        }
        Ok(())
    }

    /// The context `[n * t, hidden]` of rotated `qk` (`[n * t, 2 * hidden]`) and `v`
    /// (`[n * t, hidden]`), head `j` in columns `j * d..(j + 1) * d`.
    fn attention(&self, qk: &[f32], v: &[f32]) -> candle_core::Result<Vec<f32>> {
        let Geometry { t, h, heads, d, .. } = *self.geometry;
        let n = self.sequences.len();
        let tile = (SCORE_TILE_ELEMENTS / t.max(1)).clamp(1, t.max(1));
        let tiles = t.div_ceil(tile);
        let mut context = vec![0f32; n * t * h];
        let out = SharedOut {
            ptr: context.as_mut_ptr(),
            len: context.len(),
        };
        let scale = 1.0 / (d as f32).sqrt();
        let task = |index: usize, scores: &mut Vec<f32>| -> candle_core::Result<()> {
            let (s, rest) = (index / (heads * tiles), index % (heads * tiles));
            let (head, i0) = (rest / tiles, (rest % tiles) * tile);
            let r = tile.min(t - i0);
            scores.resize(r * t, 0.0);
            let seq = s * t;
            // scores = scale * q[i0..i0 + r] k^T
            product(
                ProductDims { m: r, n: t, k: d },
                Dst::Slice(scores, 0, t),
                false,
                Operand {
                    data: qk,
                    offset: (seq + i0) * 2 * h + head * d,
                    rs: 2 * h,
                    cs: 1,
                },
                Operand {
                    data: qk,
                    offset: seq * 2 * h + h + head * d,
                    rs: 1,
                    cs: 2 * h,
                },
                scale,
            )?;
            let mut inv_sums = Vec::with_capacity(r);
            for (i, row) in scores.chunks_exact_mut(t).enumerate() {
                let mask = self.mask.map(|m| m.row(self.sequences.start + s, i0 + i));
                let max = add_mask_max(row, mask);
                inv_sums.push(1.0 / exp_sum(row, max));
            }
            // context rows = (p v) / sum p
            let dst_offset = (seq + i0) * h + head * d;
            product(
                ProductDims { m: r, n: d, k: t },
                Dst::Shared(out, dst_offset, h),
                false,
                Operand {
                    data: scores,
                    offset: 0,
                    rs: t,
                    cs: 1,
                },
                Operand {
                    data: v,
                    offset: seq * h + head * d,
                    rs: h,
                    cs: 1,
                },
                1.0,
            )?;
            for (i, inv) in inv_sums.into_iter().enumerate() {
                // SAFETY: this task alone writes rows i0..i0 + r, columns head * d..+ d; the
                // product above checked that they lie inside the buffer.
                let row =
                    unsafe { std::slice::from_raw_parts_mut(out.ptr.add(dst_offset + i * h), d) };
                row.iter_mut().for_each(|c| *c *= inv);
            }
            Ok(())
        };
        let tasks = n * heads * tiles;
        if self.parallel {
            (0..tasks)
                .into_par_iter()
                .try_for_each_init(Vec::new, |scores, i| task(i, scores))?;
        } else {
            let mut scores = Vec::new();
            (0..tasks).try_for_each(|i| task(i, &mut scores))?;
        }
        Ok(context)
    }
}

/// An output buffer written by parallel tasks at disjoint elements: the attention context
/// (rows, head columns) or a product split by columns.
#[derive(Clone, Copy)]
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the tasks that share it write disjoint elements (see `Step::attention` and
// `product_xwt_split`), and the buffer outlives them.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// The rows of one block of an output being built: uninitialised until [`RowsOut::init`].
struct RowsOut<'a> {
    rows: &'a mut [MaybeUninit<f32>],
    width: usize,
    ready: bool,
}

impl RowsOut<'_> {
    /// Sets each row to `base[row] + biases` (the biases side by side across the row, zeros
    /// where absent) and returns the rows, now initialised.
    fn init(&mut self, base: Option<&[f32]>, biases: &[Option<&[f32]>]) -> &mut [f32] {
        let width = self.width;
        for (i, row) in self.rows.chunks_mut(width).enumerate() {
            fill_row(
                row,
                base.and_then(|x| x.get(i * width..(i + 1) * width)),
                biases,
            );
        }
        self.ready = true;
        // SAFETY: `fill_row` wrote every element of every row, and `MaybeUninit<f32>` has the
        // layout of `f32`.
        unsafe { &mut *(std::ptr::from_mut(self.rows) as *mut [f32]) }
    }
}

/// Builds `[rows, width]` values block by block (`blocks` cover `0..rows` in order), on the
/// threads when `parallel`: `f(block, out)` initialises the block's rows through `out`.
fn build_rows(
    rows: usize,
    width: usize,
    blocks: &[Range<usize>],
    parallel: bool,
    f: impl Fn(&Range<usize>, &mut RowsOut<'_>) -> candle_core::Result<()> + Sync,
) -> candle_core::Result<Vec<f32>> {
    let n = rows * width;
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let mut parts = Vec::with_capacity(blocks.len());
    let mut rest = &mut out.spare_capacity_mut()[..n];
    let mut next = 0;
    for block in blocks {
        let len = block.len() * width;
        if block.start != next || len > rest.len() {
            return Err(candle_core::Error::Msg(format!(
                "fused encoder: row block {block:?} does not continue at row {next}"
            )));
        }
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
        parts.push((block, head));
        rest = tail;
        next = block.end;
    }
    if !rest.is_empty() {
        return Err(candle_core::Error::Msg(format!(
            "fused encoder: row blocks stop at row {next} of {rows}"
        )));
    }
    let run = |(block, rows): (&Range<usize>, &mut [MaybeUninit<f32>])| {
        let mut rows_out = RowsOut {
            rows,
            width,
            ready: false,
        };
        f(block, &mut rows_out)?;
        if rows_out.ready {
            Ok(())
        } else {
            Err(candle_core::Error::Msg(
                "fused encoder: a row block was left unwritten".into(),
            ))
        }
    };
    if parallel {
        parts.into_par_iter().try_for_each(run)?;
    } else {
        parts.into_iter().try_for_each(run)?;
    }
    // SAFETY: the blocks cover all `n` elements, and each block's rows were initialised
    // (`ready`, set by `RowsOut::init`).
    unsafe { out.set_len(n) };
    Ok(out)
}

/// `[rows, width]` values, row `r` being `base[r] + biases`.
fn filled(
    rows: usize,
    width: usize,
    base: Option<&[f32]>,
    biases: &[Option<&[f32]>],
) -> candle_core::Result<Vec<f32>> {
    build_rows(
        rows,
        width,
        std::slice::from_ref(&(0..rows)),
        false,
        |_, out| {
            out.init(base, biases);
            Ok(())
        },
    )
}

/// Writes `base + biases` into `row`, the biases laid side by side across it (zeros for a
/// missing one, or one of the wrong length).
fn fill_row(row: &mut [MaybeUninit<f32>], base: Option<&[f32]>, biases: &[Option<&[f32]>]) {
    let part = (row.len() / biases.len().max(1)).max(1);
    let base = base.filter(|x| x.len() == row.len());
    for (i, segment) in row.chunks_mut(part).enumerate() {
        let len = segment.len();
        let bias = biases.get(i).copied().flatten().filter(|b| b.len() == len);
        let base = base.map(|x| &x[i * part..i * part + len]);
        match (base, bias) {
            (Some(x), Some(b)) => {
                for ((slot, x), b) in segment.iter_mut().zip(x).zip(b) {
                    slot.write(x + b);
                }
            }
            (Some(x), None) => {
                for (slot, x) in segment.iter_mut().zip(x) {
                    slot.write(*x);
                }
            }
            (None, Some(b)) => {
                for (slot, b) in segment.iter_mut().zip(b) {
                    slot.write(*b);
                }
            }
            (None, None) => {
                for slot in segment.iter_mut() {
                    slot.write(0.0);
                }
            }
        }
    }
}

/// [`product_xwt`] spread over the threads: tasks of whole output columns (about
/// [`COLUMN_TASKS_PER_THREAD`] per thread), each reading only its rows of `W`.
fn product_xwt_split(
    dst: &mut [f32],
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &[f32],
    threads: usize,
) -> candle_core::Result<()> {
    let m = dst.len() / dst_rs.max(1);
    let n = w.len() / k.max(1);
    let chunk = n
        .div_ceil(COLUMN_TASKS_PER_THREAD * threads)
        .next_multiple_of(COLUMN_ALIGN)
        .min(n)
        .max(1);
    let out = SharedOut {
        ptr: dst.as_mut_ptr(),
        len: dst.len(),
    };
    (0..n.div_ceil(chunk)).into_par_iter().try_for_each(|c| {
        let j0 = c * chunk;
        product(
            ProductDims {
                m,
                n: chunk.min(n - j0),
                k,
            },
            // Each task writes its own columns j0..j0 + chunk of `dst`, borrowed exclusively
            // by this call for the whole loop.
            Dst::Shared(out, col + j0, dst_rs),
            true,
            Operand {
                data: x,
                offset: 0,
                rs: k,
                cs: 1,
            },
            Operand {
                data: w,
                offset: j0 * k,
                rs: 1,
                cs: k,
            },
            1.0,
        )
    })
}

/// `dst[:, col..col + n] += x W^T` on one thread, with `x` `[rows, k]` (`k` columns) and `W`
/// `[n, k]` row-major; `dst` has `dst_rs` columns.
fn product_xwt(
    dst: &mut [f32],
    dst_rs: usize,
    col: usize,
    x: &[f32],
    k: usize,
    w: &[f32],
) -> candle_core::Result<()> {
    let m = dst.len() / dst_rs.max(1);
    let n = w.len() / k.max(1);
    product(
        ProductDims { m, n, k },
        Dst::Slice(dst, col, dst_rs),
        true,
        Operand {
            data: x,
            offset: 0,
            rs: k,
            cs: 1,
        },
        Operand {
            data: w,
            offset: 0,
            rs: 1,
            cs: k,
        },
        1.0,
    )
}

struct ProductDims {
    m: usize,
    n: usize,
    k: usize,
}

/// A strided matrix inside a slice: element `(i, j)` at `offset + i * rs + j * cs`.
struct Operand<'a> {
    data: &'a [f32],
    offset: usize,
    rs: usize,
    cs: usize,
}

impl Operand<'_> {
    /// Whether a `rows x cols` matrix fits.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0
            || cols == 0
            || self.offset + (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// Where a product goes: `(buffer, offset of element (0, 0), row stride)`, unit column stride.
enum Dst<'a> {
    Slice(&'a mut [f32], usize, usize),
    /// Into the shared attention output.
    Shared(SharedOut, usize, usize),
}

/// `dst = (accumulate ? dst : 0) + beta * a b` for an `m x k` `a` and a `k x n` `b`, through
/// gemm on the calling thread, after checking every operand lies inside its buffer.
fn product(
    dims: ProductDims,
    dst: Dst<'_>,
    accumulate: bool,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
) -> candle_core::Result<()> {
    let ProductDims { m, n, k } = dims;
    let (ptr, offset, rs, len) = match dst {
        Dst::Slice(s, offset, rs) => (s.as_mut_ptr(), offset, rs, s.len()),
        Dst::Shared(out, offset, rs) => (out.ptr, offset, rs, out.len),
    };
    let dst_fits = m == 0 || n == 0 || offset + (m - 1) * rs + n - 1 < len;
    if !(dst_fits && a.fits(m, k) && b.fits(k, n)) {
        return Err(candle_core::Error::Msg(format!(
            "fused encoder: a {m}x{k} by {k}x{n} product does not fit its buffers"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // SAFETY: the checks above keep every element gemm reads or writes inside the buffers;
    // `dst` is exclusive (a `&mut` slice, or a shared output whose writers use disjoint
    // elements) and does not overlap `a` or `b`, which are shared slices.
    unsafe {
        gemm(
            m,
            n,
            k,
            ptr.add(offset),
            1,
            rs as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.offset),
            b.cs as isize,
            b.rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            beta,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    Ok(())
}

/// Applies the activation to `[rows, width]` values: in place for the erf GELU, through
/// [`Activation::forward`] for the others.
fn activate(
    mut x: Vec<f32>,
    rows: usize,
    width: usize,
    activation: Activation,
) -> candle_core::Result<Vec<f32>> {
    if activation == Activation::Gelu {
        gelu_erf(&mut x);
        return Ok(x);
    }
    let t = Tensor::from_vec(x, (rows, width), &Device::Cpu)?;
    activation.forward(&t)?.flatten_all()?.to_vec1()
}

/// [`normalize_rows`] over chunks of rows on the threads.
fn normalize_rows_par(x: &mut [f32], width: usize, norm: &RowNorm<'_>) {
    let rows = (PASS_CHUNK / width.max(1)).max(1);
    x.par_chunks_mut(rows * width.max(1))
        .for_each(|chunk| normalize_rows(chunk, width, norm));
}

/// Normalises each row of `width` values in place.
fn normalize_rows(x: &mut [f32], width: usize, norm: &RowNorm<'_>) {
    for row in x.chunks_exact_mut(width.max(1)) {
        match norm {
            RowNorm::Layer { weight, bias, eps } => layer_norm_row(row, weight, bias, *eps),
            RowNorm::Rms { eps } => rms_norm_row(row, *eps),
        }
    }
}

macro_rules! multiversion {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// Lanes of the partial sums and maxima (a multiple of every vector width).
const LANES: usize = 16;

/// Below this, `exp` is 0 in f32 (and the polynomial's scaling would underflow).
const EXP_MIN: f32 = -87.336_55;

/// `exp(x)` for `x <= 88`, within about 2 ulp: `x = n ln 2 + r` with `|r| <= ln 2 / 2`,
/// Cephes' degree-6 polynomial for `exp(r)`, times `2^n` built in the exponent bits; exactly 0
/// below [`EXP_MIN`].
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc = x.clamp(EXP_MIN, 88.0);
    let shifted = xc * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = p * r * r + r + 1.0;
    let n_int = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let scale = f32::from_bits(((n_int + 127) << 23) as u32);
    if x < EXP_MIN {
        0.0
    } else {
        e * scale
    }
}

multiversion! {
    /// Adds the mask to the row of scores (if any) and returns the row's maximum.
    fn add_mask_max(row: &mut [f32], mask: Option<&[f32]>) -> f32 {
        if let Some(mask) = mask {
            for (s, m) in row.iter_mut().zip(mask) {
                *s += *m;
            }
        }
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (l, &s) in lanes.iter_mut().zip(chunk) {
                *l = if s > *l { s } else { *l };
            }
        }
        let rest = chunks.remainder().iter().copied();
        lanes.into_iter().chain(rest).fold(f32::NEG_INFINITY, |a, s| if s > a { s } else { a })
    }
}

multiversion! {
    /// Replaces each score `s` of the row by `exp(s - max)` and returns their sum.
    fn exp_sum(row: &mut [f32], max: f32) -> f32 {
        let mut lanes = [0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            for (l, s) in lanes.iter_mut().zip(chunk.iter_mut()) {
                *s = exp_approx(*s - max);
                *l += *s;
            }
        }
        let mut sum: f32 = lanes.iter().sum();
        for s in chunks.into_remainder() {
            *s = exp_approx(*s - max);
            sum += *s;
        }
        sum
    }
}

multiversion! {
    /// `x <- 0.5 x (1 + erf(x / sqrt 2))` (transformers' `gelu`), with Abramowitz and Stegun's
    /// 7.1.26 for erf (absolute error below 1.5e-7).
    fn gelu_erf(x: &mut [f32]) {
        for v in x.iter_mut() {
            let z = *v * std::f32::consts::FRAC_1_SQRT_2;
            let a = z.abs();
            let t = 1.0 / (1.0 + 0.327_591_1 * a);
            let poly = ((((1.061_405_4 * t - 1.453_152) * t + 1.421_413_8) * t - 0.284_496_72)
                * t
                + 0.254_829_6)
                * t;
            let erf_abs = 1.0 - poly * exp_approx(-a * a);
            let erf = if z < 0.0 { -erf_abs } else { erf_abs };
            *v = 0.5 * *v * (1.0 + erf);
        }
    }
}

multiversion! {
    /// `row <- (row - mean) / sqrt(var + eps) * weight + bias` (biased variance, two passes).
    fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let n = row.len() as f32;
        let mean = lane_sum(row, |x| x) / n;
        let var = lane_sum(row, |x| (x - mean) * (x - mean)) / n;
        let inv = 1.0 / (var + eps).sqrt();
        for ((x, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *x = (*x - mean) * inv * *w + *b;
        }
    }
}

multiversion! {
    /// `row <- row / sqrt(mean(row^2) + eps)`.
    fn rms_norm_row(row: &mut [f32], eps: f32) {
        let mean_square = lane_sum(row, |x| x * x) / row.len() as f32;
        let inv = 1.0 / (mean_square + eps).sqrt();
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `sum f(x)` over `row` in [`LANES`] partial sums.
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l += f(x);
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().map(|&x| f(x)).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use candle_nn::{VarBuilder, VarMap};
    use rotary::Positions;

    use super::*;
    use crate::config::{RawConfig, RoFormerConfig};
    use crate::encoder::Encoder;

    /// An encoder of `raw` with random weights: the var map's initialisers for the dense
    /// layers, and N(1, 0.2^2) / N(0, 0.2^2) layer norm weights and biases (not the identity,
    /// so that a mix-up of norm parameters shows).
    fn random_encoder(raw: RawConfig) -> (Encoder, RoFormerConfig) {
        let cfg = RoFormerConfig::try_from(raw).unwrap();
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let encoder = Encoder::load(vb.pp("encoder"), &cfg).unwrap();
        for (name, var) in varmap.data().lock().unwrap().iter() {
            if name.contains("LayerNorm") {
                let shape = var.shape().clone();
                let mean = if name.ends_with("weight") { 1.0 } else { 0.0 };
                var.set(&Tensor::randn(mean, 0.2f32, shape, &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        (encoder, cfg)
    }

    /// An additive mask `[b, 1, 1, t]` hiding the last `pad[s]` keys of sequence `s`.
    fn padding_mask(t: usize, pad: &[usize]) -> Tensor {
        let values: Vec<f32> = pad
            .iter()
            .flat_map(|&p| (0..t).map(move |j| if j + p >= t { f32::MIN } else { 0.0 }))
            .collect();
        Tensor::from_vec(values, (pad.len(), 1, 1, t), &Device::Cpu).unwrap()
    }

    /// An additive causal mask `[1, 1, t, t]`.
    fn causal_mask(t: usize) -> Tensor {
        let values: Vec<f32> = (0..t)
            .flat_map(|i| (0..t).map(move |j| if j > i { f32::MIN } else { 0.0 }))
            .collect();
        Tensor::from_vec(values, (1, 1, t, t), &Device::Cpu).unwrap()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    /// Runs `encoder` fused (asserting the fused path ran) and op by op on random `[b, t,
    /// hidden]` inputs, on `threads` threads, and returns the largest difference.
    fn fused_vs_ops(
        encoder: &Encoder,
        cfg: &RoFormerConfig,
        b: usize,
        t: usize,
        positions: Positions<'_>,
        mask: Option<&Tensor>,
        threads: usize,
    ) -> f32 {
        let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let coefficients = encoder.rope().coefficients(positions, b, t).unwrap();
            let parts: Vec<LayerParts<'_>> = encoder
                .layers()
                .iter()
                .map(|l| l.fusable().unwrap())
                .collect();
            let fused = encoder_forward(&parts, &x, coefficients.view(), mask)
                .unwrap()
                .expect("the fused path applies");
            let ops = encoder.forward_ops(&x, &coefficients, mask).unwrap();
            assert_eq!(fused.dims(), ops.dims());
            max_abs_diff(&fused, &ops)
        })
    }

    fn tiny(hidden_act: &str) -> RawConfig {
        RawConfig {
            vocab_size: 10,
            hidden_size: 48,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 96,
            hidden_act: hidden_act.into(),
            layer_norm_eps: 1e-12,
            ..RawConfig::default()
        }
    }

    // Tolerance: both paths compute in f32 with different summation orders (blocked products
    // against candle's, row sums in 16 lanes) and the polynomial exp/erf here (within a few
    // 1e-7 of libm): differences of a few 1e-6 on layer-normed outputs of size ~1. A wrong
    // head, position, mask row or bias moves outputs by ~0.1 or more.
    const TOLERANCE: f32 = 1e-4;

    #[test]
    fn fused_matches_op_by_op_with_padding_on_any_thread_count() {
        let (encoder, cfg) = random_encoder(tiny("gelu"));
        // b = 3 runs as one task over the threads (products split by columns); b = 4 as
        // sequence tasks on 2 threads; t = 300 takes two score tiles; 1100 rows make a single
        // task of uneven row blocks.
        for (b, t, pad) in [
            (3, 37, vec![0, 5, 36]),
            (4, 130, vec![0, 1, 2, 129]),
            (1, 300, vec![7]),
            (1, 1100, vec![3]),
        ] {
            let mask = padding_mask(t, &pad);
            for threads in [1, 2, 3] {
                let diff =
                    fused_vs_ops(&encoder, &cfg, b, t, Positions::START, Some(&mask), threads);
                assert!(diff <= TOLERANCE, "b {b} t {t} threads {threads}: {diff}");
            }
        }
    }

    #[test]
    fn fused_matches_op_by_op_causal_relu_without_mask() {
        let (encoder, cfg) = random_encoder(RawConfig {
            is_decoder: true,
            ..tiny("relu")
        });
        let mask = causal_mask(20);
        assert!(fused_vs_ops(&encoder, &cfg, 2, 20, Positions::START, Some(&mask), 2) <= TOLERANCE);
        assert!(fused_vs_ops(&encoder, &cfg, 5, 9, Positions::START, None, 2) <= TOLERANCE);
    }

    #[test]
    fn fused_matches_op_by_op_rotary_value_and_explicit_positions() {
        let (encoder, cfg) = random_encoder(RawConfig {
            rotary_value: true,
            ..tiny("silu")
        });
        let (b, t) = (4, 11);
        // Per-sequence positions (left padding, a far offset), then shared ones.
        let own: Vec<u32> = (0..b as u32)
            .flat_map(|s| (0..t as u32).map(move |i| s * 1000 + i * (s + 1)))
            .collect();
        let shared: Vec<u32> = (0..t as u32).map(|i| 3 * i + 5).collect();
        for positions in [Positions::Explicit(&own), Positions::Explicit(&shared)] {
            for threads in [1, 2] {
                let diff = fused_vs_ops(&encoder, &cfg, b, t, positions, None, threads);
                assert!(diff <= TOLERANCE, "{diff}");
            }
        }
    }

    #[test]
    fn fused_matches_op_by_op_for_rms_norm_without_biases() {
        let (encoder, cfg) = random_encoder(RawConfig {
            norm_type: "rms_norm".into(),
            use_bias: false,
            ..tiny("gelu")
        });
        let mask = padding_mask(16, &[3, 0]);
        assert!(fused_vs_ops(&encoder, &cfg, 2, 16, Positions::START, Some(&mask), 2) <= TOLERANCE);
    }

    #[test]
    fn other_masks_devices_and_dtypes_take_the_op_path() {
        let (encoder, cfg) = random_encoder(tiny("gelu"));
        let parts: Vec<LayerParts<'_>> = encoder
            .layers()
            .iter()
            .map(|l| l.fusable().unwrap())
            .collect();
        let x = Tensor::randn(0f32, 1.0, (2, 5, cfg.hidden_size), &Device::Cpu).unwrap();
        let c = encoder.rope().coefficients(Positions::START, 2, 5).unwrap();
        // A per-head mask [b, heads, t, t] is not a shape the fused path reads.
        let per_head = Tensor::zeros((2, 4, 5, 5), DType::F32, &Device::Cpu).unwrap();
        assert!(encoder_forward(&parts, &x, c.view(), Some(&per_head))
            .unwrap()
            .is_none());
        let f64_x = x.to_dtype(DType::F64).unwrap();
        assert!(encoder_forward(&parts, &f64_x, c.view(), None)
            .unwrap()
            .is_none());
    }

    #[test]
    fn exp_approx_is_within_a_few_ulp() {
        for i in 0..=200_000 {
            let x = (-100.0 + i as f32 * 1e-3 * 0.94).min(88.0); // -100 ..= 88
            let got = f64::from(exp_approx(x));
            if x < EXP_MIN {
                assert_eq!(got, 0.0, "{x}");
                continue;
            }
            let want = f64::from(x).exp();
            // 2^-126 is the smallest normal f32: below it only absolute accuracy is possible.
            let err = (got - want).abs() / want.max(f64::from(f32::MIN_POSITIVE));
            assert!(err < 3e-7, "exp({x}) = {got}, want {want}: rel {err}");
        }
    }

    #[test]
    fn gelu_erf_matches_libm_erf() {
        let xs: Vec<f32> = (0..=40_000).map(|i| -10.0 + i as f32 * 5e-4).collect();
        let mut got = xs.clone();
        gelu_erf(&mut got);
        let want: Vec<f32> = Tensor::new(xs.as_slice(), &Device::Cpu)
            .unwrap()
            .gelu_erf()
            .unwrap()
            .to_vec1()
            .unwrap();
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            // Abramowitz-Stegun 7.1.26 is within 1.5e-7 of erf; gelu scales it by x / 2.
            let tolerance = 2e-7 * (1.0 + x.abs()) + 2.0 * f32::EPSILON * w.abs();
            assert!((g - w).abs() <= tolerance, "gelu({x}) = {g}, want {w}");
        }
    }

    #[test]
    fn norms_match_a_double_precision_reference() {
        let row: Vec<f32> = (0..389)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let weight: Vec<f32> = (0..389).map(|i| 1.0 + (i % 7) as f32 / 10.0).collect();
        let bias: Vec<f32> = (0..389).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect();
        let n = row.len() as f64;
        let mean = row.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = row
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        let mut got = row.clone();
        layer_norm_row(&mut got, &weight, &bias, 1e-5);
        for i in 0..row.len() {
            let want = (f64::from(row[i]) - mean) / (var + 1e-5).sqrt() * f64::from(weight[i])
                + f64::from(bias[i]);
            assert!((f64::from(got[i]) - want).abs() < 1e-5, "{i}");
        }
        let ms = row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / n;
        let mut got = row.clone();
        rms_norm_row(&mut got, 1e-6);
        for i in 0..row.len() {
            let want = f64::from(row[i]) / (ms + 1e-6).sqrt();
            assert!((f64::from(got[i]) - want).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn blocks_cover_the_rows_and_tasks_split_the_batch() {
        for rows in [1, 63, 64, 65, 1000, 5000] {
            for threads in [1, 2, 3, 8] {
                let blocks = row_blocks(rows, threads);
                assert_eq!(blocks.first().unwrap().start, 0);
                assert_eq!(blocks.last().unwrap().end, rows);
                assert!(blocks.windows(2).all(|w| w[0].end == w[1].start));
                assert!(blocks.iter().all(|b| !b.is_empty()));
            }
        }
        assert_eq!(sequences_per_task(8, 512, 2), 1);
        assert_eq!(sequences_per_task(8, 128, 2), 4);
        assert_eq!(sequences_per_task(3, 512, 2), 3); // 3 tasks on 2 threads: one task
        assert_eq!(sequences_per_task(1, 512, 2), 1);
        assert_eq!(sequences_per_task(8, 512, 1), 8);
    }
}
