//! The tail of a post-norm sub-layer inside a fused op, `out = LayerNorm(Dropout(m) + x)`, on
//! plain f32 rows (the CPU layer's [`AddNorm`] rows), with its input `m` the output of a dense
//! layer:
//!
//! ```text
//! forward   s = m f + x,   out = (s - mu) r w_n + b_n,   r = 1 / sqrt(var + eps)  (mu, r kept)
//! backward  dx = ds = r (g w_n - mean(g w_n) - xh mean(g w_n xh)),   xh = (s - mu) r
//!           dm = ds f,   db = sum dm                     (db: the dense layer's bias)
//!           dw_n = sum g xh,   db_n = sum g
//! ```
//!
//! (`f` the dropout factors, `1 / (1 - p)` where kept, 0 where dropped, 1 without dropout;
//! sums over all rows, in blocks added in order, so the same on any thread count.) The
//! forward can keep `out` for the next dense layer's products too ([`Tail::forward_kept`]);
//! the backward writes `dm` once, kept for the dense layer's products, with the bias sum in
//! the same pass, and `dx` into a buffer the caller's input gradient is then added onto.

use crate::autograd::add_norm::with_kernel;
use crate::autograd::dropout::KeepMask;
use crate::cpu::add_norm::Moments;
use crate::cpu::kept::{Kept, Side};
use crate::cpu::mat::SharedOut;
use crate::cpu::Precision;

/// One sub-layer's tail: its layer norm's epsilon and dropout mask (over all elements).
pub(crate) struct Tail {
    /// The epsilon of the variance.
    pub(crate) eps: f32,
    /// The dropout of `m`, `None` for none.
    pub(crate) mask: Option<KeepMask>,
}

/// What [`Tail::backward`] returns.
pub(crate) struct TailGrads {
    /// `dL/dx = ds`, f32 rows.
    pub(crate) dx: Vec<f32>,
    /// `dL/dm = ds f`, kept as the gradient of a dense layer's output.
    pub(crate) dm: Kept,
    /// `[dw_n | db_n | db]`, each of the row width.
    pub(crate) sums: Vec<f32>,
}

impl Tail {
    /// `out` for the rows of `m` and `x` (`norm` = `(w_n, b_n)`), and each row's moments.
    ///
    /// # Errors
    /// Lengths that do not fit (see [`AddNorm::forward`]).
    pub(crate) fn forward(
        &self,
        (m, x): (&[f32], &[f32]),
        norm: (&[f32], &[f32]),
    ) -> candle_core::Result<(Vec<f32>, Vec<Moments>)> {
        with_kernel(norm, self.eps, self.mask.as_ref(), |k| k.forward(m, x))
    }

    /// [`Tail::forward`] with `out` also kept for `precision`'s products as the input of the
    /// next dense layer, written in the same pass.
    ///
    /// # Errors
    /// `m` and `x` of different lengths or not whole rows of the norm's width.
    pub(crate) fn forward_kept(
        &self,
        (m, x): (&[f32], &[f32]),
        norm: (&[f32], &[f32]),
        precision: Precision,
    ) -> candle_core::Result<(Vec<f32>, Kept, Vec<Moments>)> {
        let width = check(m, x, norm.0.len())?;
        let rows = m.len() / width;
        let mut out = vec![0f32; m.len()];
        let mut moments = vec![Moments::default(); rows];
        let (out_rows, moment_rows) = (SharedOut::new(&mut out), SharedOut::new(&mut moments));
        let (kept, _) = with_kernel(norm, self.eps, self.mask.as_ref(), |k| {
            Kept::build((rows, width), Side::Input, precision, 0, |i, row, _| {
                let moments = k.forward_row(i * width, (m, x), row);
                // SAFETY: row i's task alone writes row i of `out` and its moments.
                unsafe {
                    out_rows.slice(i * width, width).copy_from_slice(row);
                    moment_rows.slice(i, 1)[0] = moments;
                }
            })
        });
        Ok((out, kept, moments))
    }

    /// The gradients at `m` and `x` (the forward's inputs, with its `moments`) from `g =
    /// dL/dout`; `dm` kept for `precision`'s products (see the module formulas).
    ///
    /// # Errors
    /// Lengths that do not fit: `m`, `x` and `g` of different lengths or not whole rows of the
    /// norm's width, moments not one a row.
    pub(crate) fn backward(
        &self,
        (m, x): (&[f32], &[f32]),
        norm: (&[f32], &[f32]),
        moments: &[Moments],
        g: &[f32],
        precision: Precision,
    ) -> candle_core::Result<TailGrads> {
        let width = check(m, x, norm.0.len())?;
        let rows = m.len() / width;
        if g.len() != m.len() || moments.len() != rows {
            return Err(candle_core::Error::Msg(format!(
                "post-norm tail backward: a gradient of {} and {} moments for {rows} rows of \
                 {width}",
                g.len(),
                moments.len()
            )));
        }
        let mut dx = vec![0f32; m.len()];
        let dx_rows = SharedOut::new(&mut dx);
        let (dm, sums) = with_kernel(norm, self.eps, self.mask.as_ref(), |k| {
            Kept::build(
                (rows, width),
                Side::Gradient,
                precision,
                3,
                |i, row, sums| {
                    let (norm_sums, db) = sums.split_at_mut(2 * width);
                    let (dw_n, db_n) = norm_sums.split_at_mut(width);
                    // SAFETY: row i's task alone writes row i of `dx`.
                    let ds = unsafe { dx_rows.slice(i * width, width) };
                    k.backward_row(i * width, (m, x, g), moments[i], ds, (dw_n, db_n));
                    k.dropout_row(i * width, ds, row);
                    db.iter_mut().zip(row.iter()).for_each(|(s, d)| *s += d);
                },
            )
        });
        Ok(TailGrads { dx, dm, sums })
    }
}

/// The row width `width` of `m` and `x`, after checking that they are whole rows of it, of one
/// length.
fn check(m: &[f32], x: &[f32], width: usize) -> candle_core::Result<usize> {
    if width == 0 || m.len() != x.len() || !m.len().is_multiple_of(width) {
        return Err(candle_core::Error::Msg(format!(
            "post-norm tail: operands of {} and {} elements for rows of {width}",
            m.len(),
            x.len()
        )));
    }
    Ok(width)
}
