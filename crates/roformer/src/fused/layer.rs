//! One layer applied to some sequences: by row blocks or with products split by columns.

use std::ops::Range;

use candle_core::{Device, Tensor};
use rayon::prelude::*;
use rotary::{rotate_inplace, CosSinView, Direction, Shape};

use super::held::{Geometry, LayerPlan};
use crate::activation::Activation;
use crate::cpu::dense::{product_xwt, product_xwt_split};
use crate::cpu::mask::MaskView;
use crate::cpu::math::{gelu_erf, normalize_rows, normalize_rows_par};
use crate::cpu::policy::PASS_CHUNK;
use crate::cpu::rows::{build_rows, filled};

/// One layer applied to some sequences.
pub(super) struct Step<'a> {
    /// The precision of the attention products (bf16 when the weights were packed for it).
    pub(super) precision: crate::cpu::Precision,
    pub(super) geometry: &'a Geometry,
    pub(super) sequences: Range<usize>,
    /// The rotary table of the tokens, `None` without rotary positions.
    pub(super) rope: Option<CosSinView<'a>>,
    pub(super) mask: Option<MaskView<'a>>,
    /// Whether attention and the row blocks run on the threads.
    pub(super) parallel: bool,
    /// `Some(threads)`: products split by columns over that many threads, element-wise
    /// passes over row chunks (few rows); `None`: everything but attention by row blocks.
    pub(super) columns: Option<usize>,
    pub(super) blocks: Vec<Range<usize>>,
}

impl Step<'_> {
    /// The layer on `x` (`[n * t, hidden]`).
    pub(super) fn layer(&self, p: &LayerPlan<'_>, x: &[f32]) -> candle_core::Result<Vec<f32>> {
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

        let mut qk = filled(rows, 2 * h, None, &[p.query.bias, p.key.bias])?;
        product_xwt_split(&mut qk, 2 * h, 0, x, h, &p.query, threads)?;
        product_xwt_split(&mut qk, 2 * h, h, x, h, &p.key, threads)?;
        self.rotate_rows(&mut qk, 2 * heads, &all)?;
        let mut v = filled(rows, h, None, &[p.value.bias])?;
        product_xwt_split(&mut v, h, 0, x, h, &p.value, threads)?;
        if p.rotary_value {
            self.rotate_rows(&mut v, heads, &all)?;
        }

        let context = self.attention(&qk, &v)?;
        drop((qk, v));

        let mut a = filled(rows, h, Some(x), &[p.dense.bias])?;
        product_xwt_split(&mut a, h, 0, &context, h, &p.dense, threads)?;
        drop(context);
        normalize_rows_par(&mut a, h, &p.attention_norm);
        let mut inner = filled(rows, inter, None, &[p.intermediate.bias])?;
        product_xwt_split(&mut inner, inter, 0, &a, h, &p.intermediate, threads)?;
        let inner = if p.activation == Activation::Gelu {
            inner.par_chunks_mut(PASS_CHUNK).for_each(gelu_erf);
            inner
        } else {
            activate(inner, rows, inter, p.activation)?
        };
        let mut y = filled(rows, h, Some(&a), &[p.output.bias])?;
        product_xwt_split(&mut y, h, 0, &inner, inter, &p.output, threads)?;
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
            let qk = out.init(None, &[p.query.bias, p.key.bias]);
            product_xwt(qk, 2 * h, 0, x_rows(r), h, &p.query)?;
            product_xwt(qk, 2 * h, h, x_rows(r), h, &p.key)?;
            self.rotate_rows(qk, 2 * heads, r)
        })?;
        let v = build_rows(rows, h, &self.blocks, self.parallel, |r, out| {
            let v = out.init(None, &[p.value.bias]);
            product_xwt(v, h, 0, x_rows(r), h, &p.value)?;
            if p.rotary_value {
                self.rotate_rows(v, heads, r)?;
            }
            Ok(())
        })?;

        let context = self.attention(&qk, &v)?;
        drop((qk, v));

        build_rows(rows, h, &self.blocks, self.parallel, |r, out| {
            // a = Norm(x + bo + c Wo^T)
            let mut a = filled(r.len(), h, Some(x_rows(r)), &[p.dense.bias])?;
            product_xwt(&mut a, h, 0, &context[r.start * h..r.end * h], h, &p.dense)?;
            normalize_rows(&mut a, h, &p.attention_norm);
            // y = Norm(a + b2 + act(a W1^T + b1) W2^T)
            let mut inner = filled(r.len(), inter, None, &[p.intermediate.bias])?;
            product_xwt(&mut inner, inter, 0, &a, h, &p.intermediate)?;
            let inner = activate(inner, r.len(), inter, p.activation)?;
            let y = out.init(Some(&a), &[p.output.bias]);
            product_xwt(y, h, 0, &inner, inter, &p.output)?;
            normalize_rows(y, h, &p.output_norm);
            Ok(())
        })
    }

    /// Rotates `buf`, the rows `rows` (of this step's sequences) with `heads` heads of `d`
    /// each, in place: one rotary call per sequence the rows touch; nothing without rotary
    /// positions.
    fn rotate_rows(
        &self,
        buf: &mut [f32],
        heads: usize,
        rows: &Range<usize>,
    ) -> candle_core::Result<()> {
        let Some(rope) = self.rope else {
            return Ok(());
        };
        let Geometry { t, d, .. } = *self.geometry;
        let width = heads * d;
        let mut row = rows.start;
        while row < rows.end {
            let (s, i) = (row / t, row % t);
            let len = (t - i).min(rows.end - row);
            let table_row = if rope.rows() == t { i } else { s * t + i };
            let table = rope.slice(table_row, len).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "fused encoder: no rotary rows {table_row}..{} in a table of {}",
                    table_row + len,
                    rope.rows()
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
