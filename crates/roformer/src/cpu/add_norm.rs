//! The tail of an encoder sub-layer, `LayerNorm(Dropout(y) + r)`, as one pass over rows of
//! `h` values forward and one backward.
//!
//! ```text
//! forward   s = y * f + r                 f = 1 / (1 - p) where kept, 0 where dropped
//!                                         (f = 1 without dropout)
//!           mean = mean_h(s),  rstd = 1 / sqrt(mean_h((s - mean)^2) + eps)
//!           z = (s - mean) rstd,  out = z * gamma + beta
//! backward  gg = g * gamma                g = dL/dout
//!           ds = rstd (gg - mean_h(gg) - z mean_h(gg * z))
//!           dr = ds,  dy = ds * f
//!           dgamma = sum_rows g * z,  dbeta = sum_rows g
//! ```
//!
//! The forward keeps each row's `(mean, rstd)` and nothing else: the backward recomputes `s`
//! from `y`, `r` and the mask, which the autograd graph holds anyway, rather than keeping `s`
//! (as much memory as the output, alive until the backward) for the same traffic (reading
//! `y` and `r` again instead of writing `s` and reading it back).
//!
//! Rows are cut into tasks for the threads; the backward's tasks are [`SUM_ROWS`] rows each,
//! every task sums its rows' `g * z` and `g` into partial sums, and the partial sums are added
//! in row order: `dgamma` and `dbeta` are the same on any thread count.

use rayon::prelude::*;

use super::math::{layer_norm_row, multiversion, LANES};
use super::policy::{PASS_CHUNK, SUM_ROWS};

/// A dropout over a run of elements: `dropout(start, x, out)` sets
/// `out[j] = x[j] * f(start + j)`, `f(i)` the factor of element `i` of the whole tensor.
pub(crate) type Dropout<'a> = &'a (dyn Fn(usize, &[f32], &mut [f32]) + Sync);

/// `LayerNorm(Dropout(y) + r)` over rows of `width` values (see the module formulas).
pub(crate) struct AddNorm<'a> {
    /// `h`, the row width.
    pub(crate) width: usize,
    /// `gamma`, `[h]`.
    pub(crate) weight: &'a [f32],
    /// `beta`, `[h]`.
    pub(crate) bias: &'a [f32],
    /// The epsilon of the variance.
    pub(crate) eps: f32,
    /// The dropout of `y`; `None` for none.
    pub(crate) dropout: Option<Dropout<'a>>,
}

/// A row's mean and `rstd = 1 / sqrt(var + eps)`, kept by the forward for the backward.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moments {
    mean: f32,
    rstd: f32,
}

/// The gradients of [`AddNorm`]: `dy` (`None` without dropout, where it equals `dr`), `dr`,
/// `dgamma` and `dbeta`.
pub(crate) struct AddNormGrads {
    /// `dL/dy = ds * f`; `None` without dropout (then `dL/dy = dL/dr`).
    pub(crate) dy: Option<Vec<f32>>,
    /// `dL/dr = ds`.
    pub(crate) dr: Vec<f32>,
    /// `dL/dgamma = sum_rows g * z`.
    pub(crate) dweight: Vec<f32>,
    /// `dL/dbeta = sum_rows g`.
    pub(crate) dbias: Vec<f32>,
}

impl AddNorm<'_> {
    /// `out = z * gamma + beta` for every row of `y` and `r`, and each row's moments.
    ///
    /// # Errors
    /// Lengths that do not fit: `y` and `r` of different lengths or not whole rows, `gamma`
    /// or `beta` not of the row width.
    pub(crate) fn forward(
        &self,
        y: &[f32],
        r: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Vec<Moments>)> {
        let rows = self.check(y, r, y.len())?;
        let h = self.width;
        let mut out = vec![0f32; y.len()];
        let mut moments = vec![Moments::default(); rows];
        if h == 0 {
            return Ok((out, moments));
        }
        let per_task = (PASS_CHUNK / h).max(1);
        out.par_chunks_mut(per_task * h)
            .zip(moments.par_chunks_mut(per_task))
            .enumerate()
            .for_each(|(task, (out, moments))| {
                let mut start = task * per_task * h;
                for (out, m) in out.chunks_exact_mut(h).zip(moments) {
                    *m = self.forward_row(start, (y, r), out);
                    start += h;
                }
            });
        Ok((out, moments))
    }

    /// The gradients at `y`, `r` (the forward's inputs, with its `moments`) from
    /// `g = dL/dout`.
    ///
    /// # Errors
    /// Lengths that do not fit, as [`AddNorm::forward`], or `g` and `moments` not of `y`'s
    /// element and row counts.
    pub(crate) fn backward(
        &self,
        y: &[f32],
        r: &[f32],
        moments: &[Moments],
        g: &[f32],
    ) -> candle_core::Result<AddNormGrads> {
        let rows = self.check(y, r, g.len())?;
        let h = self.width;
        if moments.len() != rows {
            return Err(candle_core::Error::Msg(format!(
                "add-norm backward: {} row moments for {rows} rows",
                moments.len()
            )));
        }
        let mut dr = vec![0f32; y.len()];
        let mut dy = self.dropout.map(|_| vec![0f32; y.len()]);
        let (mut dweight, mut dbias) = (vec![0f32; h], vec![0f32; h]);
        if h == 0 {
            return Ok(AddNormGrads {
                dy,
                dr,
                dweight,
                dbias,
            });
        }
        let block = SUM_ROWS * h;
        let dy_blocks: Vec<Option<&mut [f32]>> = match &mut dy {
            Some(dy) => dy.chunks_mut(block).map(Some).collect(),
            None => (0..rows.div_ceil(SUM_ROWS)).map(|_| None).collect(),
        };
        let partials: Vec<(Vec<f32>, Vec<f32>)> = dr
            .par_chunks_mut(block)
            .zip(dy_blocks)
            .enumerate()
            .map(|(task, (dr, dy))| {
                self.backward_block(task * SUM_ROWS, (y, r, g), moments, dr, dy)
            })
            .collect();
        for (pw, pb) in partials {
            dweight.iter_mut().zip(pw).for_each(|(s, v)| *s += v);
            dbias.iter_mut().zip(pb).for_each(|(s, v)| *s += v);
        }
        Ok(AddNormGrads {
            dy,
            dr,
            dweight,
            dbias,
        })
    }

    /// Writes `dr` (and `dy`) of the rows from `first` on (as many as `dr` holds) and
    /// returns their partial sums of `g * z` and `g`.
    fn backward_block(
        &self,
        first: usize,
        (y, r, g): (&[f32], &[f32], &[f32]),
        moments: &[Moments],
        dr: &mut [f32],
        mut dy: Option<&mut [f32]>,
    ) -> (Vec<f32>, Vec<f32>) {
        let h = self.width;
        let (mut dweight, mut dbias) = (vec![0f32; h], vec![0f32; h]);
        for (i, ds) in dr.chunks_exact_mut(h).enumerate() {
            let start = (first + i) * h;
            let sums = (&mut dweight[..], &mut dbias[..]);
            self.backward_row(start, (y, r, g), moments[first + i], ds, sums);
            if let (Some(dropout), Some(dy)) = (self.dropout, dy.as_deref_mut()) {
                dropout(start, ds, &mut dy[i * h..(i + 1) * h]);
            }
        }
        (dweight, dbias)
    }

    /// The row of elements `start..start + h` of the output (`out`, `h` values) from `y` and
    /// `r`, and its moments: one row of [`AddNorm::forward`].
    pub(crate) fn forward_row(
        &self,
        start: usize,
        (y, r): (&[f32], &[f32]),
        out: &mut [f32],
    ) -> Moments {
        self.sum_row(start, y, r, out);
        let (mean, rstd) = layer_norm_row(out, self.weight, self.bias, self.eps);
        Moments { mean, rstd }
    }

    /// `ds` (`dL/dr`) of the row of elements `start..start + h` into `ds` (`h` values) from
    /// the forward's inputs `y`, `r`, the row's moments and `g = dL/dout`, adding the row's
    /// `g * z` and `g` to `dweight` and `dbias`; `dL/dy` is then [`AddNorm::dropout_row`] of
    /// `ds`. One row of [`AddNorm::backward`].
    pub(crate) fn backward_row(
        &self,
        start: usize,
        (y, r, g): (&[f32], &[f32], &[f32]),
        Moments { mean, rstd }: Moments,
        ds: &mut [f32],
        (dweight, dbias): (&mut [f32], &mut [f32]),
    ) {
        self.sum_row(start, y, r, ds);
        let g = &g[start..start + ds.len()];
        add_norm_backward_row(ds, g, self.weight, mean, rstd, dweight, dbias);
    }

    /// `out = x * f` over the elements `start..start + x.len()` (`out = x` without dropout):
    /// `dL/dy` of a row from its `ds`.
    pub(crate) fn dropout_row(&self, start: usize, x: &[f32], out: &mut [f32]) {
        match self.dropout {
            Some(dropout) => dropout(start, x, out),
            None => out.copy_from_slice(x),
        }
    }

    /// `out = y * f + r` over the row of elements `start..start + h` of `y` and `r`.
    fn sum_row(&self, start: usize, y: &[f32], r: &[f32], out: &mut [f32]) {
        let (y, r) = (&y[start..start + out.len()], &r[start..start + out.len()]);
        match self.dropout {
            Some(dropout) => {
                dropout(start, y, out);
                out.iter_mut().zip(r).for_each(|(o, r)| *o += r);
            }
            None => {
                for ((o, y), r) in out.iter_mut().zip(y).zip(r) {
                    *o = y + r;
                }
            }
        }
    }

    /// The number of rows of `y` and `r`, after checking that `y`, `r` and a third operand
    /// of `other` elements are whole rows of one length and the parameters of the row width.
    fn check(&self, y: &[f32], r: &[f32], other: usize) -> candle_core::Result<usize> {
        let h = self.width;
        let whole = h == 0 || y.len().is_multiple_of(h);
        if !whole || r.len() != y.len() || other != y.len() {
            return Err(candle_core::Error::Msg(format!(
                "add-norm: operands of {}, {} and {other} elements for rows of {h}",
                y.len(),
                r.len()
            )));
        }
        if self.weight.len() != h || self.bias.len() != h {
            return Err(candle_core::Error::Msg(format!(
                "add-norm: weight of {} and bias of {} for rows of {h}",
                self.weight.len(),
                self.bias.len()
            )));
        }
        Ok(y.len().checked_div(h).unwrap_or(0))
    }
}

multiversion! {
    /// Replaces the row `s` (on entry `s`, on return `ds`) by
    /// `ds = rstd (gg - mean(gg) - z mean(gg * z))`, `gg = g * gamma`, `z = (s - mean) rstd`,
    /// and adds `g * z` and `g` to `dweight` and `dbias`.
    fn add_norm_backward_row(
        s: &mut [f32],
        g: &[f32],
        weight: &[f32],
        mean: f32,
        rstd: f32,
        dweight: &mut [f32],
        dbias: &mut [f32]
    ) {
        let n = s.len() as f32;
        let mut sum_gg = [0f32; LANES];
        let mut sum_ggz = [0f32; LANES];
        let mut blocks = s.chunks_exact(LANES).zip(g.chunks_exact(LANES)).zip(weight.chunks_exact(LANES));
        for ((s, g), w) in &mut blocks {
            for l in 0..LANES {
                let gg = g[l] * w[l];
                sum_gg[l] += gg;
                sum_ggz[l] += gg * ((s[l] - mean) * rstd);
            }
        }
        let tail = s.len() - s.len() % LANES;
        let (mut gg_total, mut ggz_total) = (0f32, 0f32);
        for i in tail..s.len() {
            let gg = g[i] * weight[i];
            gg_total += gg;
            ggz_total += gg * ((s[i] - mean) * rstd);
        }
        let mean_gg = (sum_gg.iter().sum::<f32>() + gg_total) / n;
        let mean_ggz = (sum_ggz.iter().sum::<f32>() + ggz_total) / n;
        for ((((s, g), w), dw), db) in s.iter_mut().zip(g).zip(weight).zip(dweight).zip(dbias) {
            let z = (*s - mean) * rstd;
            *dw += g * z;
            *db += g;
            *s = rstd * (g * w - mean_gg - z * mean_ggz);
        }
    }
}
