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

mod attention;
mod buffers;
pub(crate) mod held;
mod layer;
pub(crate) mod math;
mod products;
#[cfg(test)]
mod tests;

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use candle_nn::Linear;
use rayon::prelude::*;
use rotary::CosSinView;

use crate::activation::Activation;
use crate::cpu::bf16::PackedB;
use crate::cpu::{Mat, Precision};
use crate::norm::Norm;
use held::{Held, HeldLayer, LayerPlan, MaskView};
use layer::Step;

/// Rows a task of sequences should have at least, so that its products stay efficient.
const MIN_TASK_ROWS: usize = 512;

/// Bounds of the row blocks of a batch spread over the threads.
const MIN_BLOCK_ROWS: usize = 64;
const MAX_BLOCK_ROWS: usize = 512;

/// Below this many rows a batch spread over the threads splits its products by output
/// columns instead of rows: each weight is then read once, not once per row block.
const COLUMN_MODE_ROWS: usize = 1024;

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
    /// The weights packed for bf16 products, when the model runs in bf16.
    pub packed: Option<&'a PackedLayer>,
}

/// A layer's dense weights packed once for the bf16 products (`W^T`, `in x out`).
#[derive(Debug)]
pub(crate) struct PackedLayer {
    pub(crate) query: PackedB,
    pub(crate) key: PackedB,
    pub(crate) value: PackedB,
    pub(crate) dense: PackedB,
    pub(crate) intermediate: PackedB,
    pub(crate) output: PackedB,
}

impl PackedLayer {
    /// Packs the dense weights of `parts` (each must be a contiguous f32 CPU tensor).
    ///
    /// # Errors
    /// A weight that is not f32 on the CPU.
    pub(crate) fn new(parts: &LayerParts<'_>) -> candle_core::Result<PackedLayer> {
        let pack = |layer: &Linear| -> candle_core::Result<PackedB> {
            let (out, inp) = layer.weight().dims2()?;
            let w = layer.weight().to_dtype(DType::F32)?.contiguous()?;
            let data = w.flatten_all()?.to_vec1::<f32>()?;
            Ok(PackedB::new(Mat::rows(&data, inp).t(), inp, out, true))
        };
        Ok(PackedLayer {
            query: pack(parts.query)?,
            key: pack(parts.key)?,
            value: pack(parts.value)?,
            dense: pack(parts.attention_dense)?,
            intermediate: pack(parts.intermediate)?,
            output: pack(parts.output)?,
        })
    }
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
            precision: if self.plans.iter().all(|p| p.query.bf16.is_some()) {
                Precision::Bf16
            } else {
                Precision::F32
            },
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
