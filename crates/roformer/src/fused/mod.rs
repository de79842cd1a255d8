//! The encoder stack on the CPU in f32 as a few fused passes instead of one candle op per step.
//!
//! The same maths as [`crate::encoder::Layer`] with softmax attention, per layer (`x`:
//! `[b*t, hidden]`, `d` the head dim):
//!
//! ```text
//! [q | k] = x [Wq | Wk]^T + [bq | bk]       one [b*t, 2*hidden] buffer, two products into it
//! q, k <- R q, R k                          rotary positions: in place, through the rotary
//!                                           kernels (token-major)
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
//! Other positions need nothing here: absolute and sinusoidal tables were added to the
//! embeddings, and ALiBi's and T5's bias arrive in the mask, which may be per head.
//!
//! It runs where the pass's [`crate::plan::Plan`] says (inference on the CPU in f32) and the
//! input, mask and every weight are contiguous f32 of the expected shapes; otherwise
//! [`encoder_forward`] returns `None` and the encoder runs op by op, which stays the reference
//! (the tests below compare the two). Its plumbing (products, row maths, buffers, tiling) is
//! the CPU layer's ([`crate::cpu`]).
//!
//! [`prenorm`] holds the dense stages of a pre-norm block (the vision transformer's) at
//! inference with bf16 products, by row blocks in the same manner.

mod attention;
mod held;
mod layer;
pub(crate) mod prenorm;
#[cfg(test)]
pub(crate) mod tests;

use std::ops::Range;

use candle_core::{Device, Tensor};
use rayon::prelude::*;
use rotary::CosSinView;

use crate::cpu::mask::MaskView;
use crate::cpu::policy::{column_mode, row_blocks, sequences_per_task};
use crate::cpu::tensor::Held;
use crate::cpu::Precision;
use held::{Geometry, HeldLayer, LayerPlan};
pub(crate) use held::{LayerParts, PackedLayer};
use layer::Step;

/// Runs the layers on `x` (`[b, t, hidden]`) with the tokens' rotary coefficients (`t` rows,
/// or `b * t` rows, one per token; `None` without rotary positions) and an additive mask of
/// shape `[1 or b, 1 or heads, 1 or t, t]`.
/// `None` when this path does not apply (a tensor that is not contiguous f32 on the CPU,
/// mismatched sizes, a mask of another shape).
///
/// # Errors
/// Candle and rotary errors (as candle errors).
pub(crate) fn encoder_forward(
    layers: &[LayerParts<'_>],
    x: &Tensor,
    rope: Option<CosSinView<'_>>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
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
        (Some(held), Some(m)) => match held
            .f32s()
            .and_then(|d| MaskView::new(d, m.dims(), (b, heads, t)))
        {
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

/// The whole stack and its inputs.
struct Stack<'a> {
    plans: &'a [LayerPlan<'a>],
    geometry: Geometry,
    /// The input `[b * t, hidden]`.
    x: &'a [f32],
    rope: Option<CosSinView<'a>>,
    mask: Option<MaskView<'a>>,
}

impl Stack<'_> {
    /// The last hidden states `[n * t, hidden]` of the sequences `seqs`, each step spread over
    /// `threads` threads.
    fn run(&self, seqs: Range<usize>, threads: usize) -> candle_core::Result<Vec<f32>> {
        let Geometry { t, h, .. } = self.geometry;
        let rows = seqs.len() * t;
        let rope = match self.rope {
            Some(rope) if rope.rows() != t => {
                Some(rope.slice(seqs.start * t, rows).ok_or_else(|| {
                    candle_core::Error::Msg(format!(
                        "fused encoder: {} rotary rows for sequences {seqs:?} of {t} tokens",
                        rope.rows()
                    ))
                })?)
            }
            rope => rope,
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
            columns: column_mode(rows, threads),
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
