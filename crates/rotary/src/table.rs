//! cos/sin tables: angles computed in f64, rounded once to f32, laid out for the kernels.

use rayon::prelude::*;

use crate::element::Element;
use crate::error::{checked_product, try_with_capacity, Result, RopeError};
use crate::freqs::check_rotary_dim;
use crate::layout::Layout;

/// Rows below this many values are filled on the calling thread.
const PARALLEL_FILL_MIN: usize = 1 << 15;

/// Rotation coefficients for a list of rows (tokens), in the form the kernels consume.
///
/// Each row holds `rotary_dim` cosines `C` and `rotary_dim` signed sines `S` such that the
/// rotated coordinate `j` is `x[j] * C[j] + x[partner(j)] * S[j]`:
/// - [`Layout::Interleaved`]: `C = [c0, c0, c1, c1, ...]`, `S = [-s0, s0, -s1, s1, ...]`,
///   partner(2i) = 2i+1;
/// - [`Layout::Half`]: `C = [c0..c_{h-1}, c0..c_{h-1}]`, `S = [-s0..-s_{h-1}, s0..s_{h-1}]`,
///   partner(i) = i + h, with `h = rotary_dim / 2`,
///
/// where `c_i = a cos(phi_i)`, `s_i = a sin(phi_i)`, `phi_i` is the row's angle for pair `i`
/// computed in f64 and `a` an amplitude (1, or an attention factor such as YaRN's). Each value
/// is rounded once from f64 to f32.
#[derive(Debug, Clone, PartialEq)]
pub struct CosSin {
    layout: Layout,
    rotary_dim: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl CosSin {
    /// Builds `rows` rows from a function giving the angle (radians, f64) of pair `i` of row
    /// `row`, scaled by `amplitude`. This is the one entry point for every angle schedule: 1D,
    /// N-D, scaled.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] or [`RopeError::TooLarge`] for a `rotary_dim` that is odd,
    /// zero or above [`crate::freqs::MAX_ROTARY_DIM`]; [`RopeError::NonFinite`] if an angle or
    /// the amplitude is not finite; [`RopeError::TooLarge`] or [`RopeError::Allocation`] for
    /// more rows than memory can hold.
    pub fn from_angles<F>(
        layout: Layout,
        rotary_dim: usize,
        rows: usize,
        amplitude: f64,
        angle: F,
    ) -> Result<Self>
    where
        F: Fn(usize, usize) -> f64 + Sync,
    {
        check_rotary_dim(rotary_dim)?;
        if !amplitude.is_finite() {
            return Err(RopeError::NonFinite {
                what: "amplitude",
                index: 0,
                value: amplitude,
            });
        }
        CosSin::from_polar(layout, rotary_dim, rows, |row, i| {
            (amplitude, angle(row, i))
        })
    }

    /// Builds `rows` rows from a function giving `(magnitude, angle)` of pair `i` of row `row`:
    /// `c_i = magnitude cos(angle)`, `s_i = magnitude sin(angle)`, both from f64 and rounded
    /// once. [`CosSin::from_angles`] is the case of one magnitude for every pair; a magnitude per
    /// pair and row scales q or k as xPos does.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] or [`RopeError::TooLarge`] for a `rotary_dim` that is odd,
    /// zero or above [`crate::freqs::MAX_ROTARY_DIM`]; [`RopeError::NonFinite`] if an angle or
    /// a magnitude is not finite; [`RopeError::TooLarge`] or [`RopeError::Allocation`] for more
    /// rows than memory can hold.
    pub fn from_polar<F>(layout: Layout, rotary_dim: usize, rows: usize, polar: F) -> Result<Self>
    where
        F: Fn(usize, usize) -> (f64, f64) + Sync,
    {
        check_rotary_dim(rotary_dim)?;
        let len = checked_product("cos/sin table elements", rows, rotary_dim, usize::MAX)?;
        let mut cos = try_with_capacity("cos table", len)?;
        let mut sin = try_with_capacity("sin table", len)?;
        cos.resize(len, 0f32);
        sin.resize(len, 0f32);
        let fill = |(row, (c, s)): (usize, (&mut [f32], &mut [f32]))| -> Result<()> {
            fill_row(layout, c, s, |i| polar(row, i))
        };
        if len >= PARALLEL_FILL_MIN {
            let rows_par = cos
                .par_chunks_mut(rotary_dim)
                .zip(sin.par_chunks_mut(rotary_dim));
            rows_par.enumerate().try_for_each(fill)?;
        } else {
            let rows_seq = cos.chunks_mut(rotary_dim).zip(sin.chunks_mut(rotary_dim));
            rows_seq.enumerate().try_for_each(fill)?;
        }
        Ok(CosSin {
            layout,
            rotary_dim,
            cos,
            sin,
        })
    }

    /// Rows for 1D positions: row `row` rotates pair `i` by `position(row) * inv_freq[i]`.
    ///
    /// # Errors
    /// As [`CosSin::from_angles`].
    pub fn from_positions<P>(
        layout: Layout,
        inv_freq: &[f64],
        amplitude: f64,
        rows: usize,
        position: P,
    ) -> Result<Self>
    where
        P: Fn(usize) -> f64 + Sync,
    {
        CosSin::from_angles(layout, 2 * inv_freq.len(), rows, amplitude, |row, i| {
            position(row) * inv_freq[i]
        })
    }

    /// Appends rows `self.rows()..self.rows() + extra` of the same 1D schedule (the table grows
    /// without recomputing its existing rows).
    ///
    /// # Errors
    /// As [`CosSin::from_angles`].
    pub fn extend_positions(
        &mut self,
        inv_freq: &[f64],
        amplitude: f64,
        extra: usize,
    ) -> Result<()> {
        let start = self.rows();
        let more = CosSin::from_positions(self.layout, inv_freq, amplitude, extra, |row| {
            (start + row) as f64
        })?;
        self.cos.extend_from_slice(&more.cos);
        self.sin.extend_from_slice(&more.sin);
        Ok(())
    }

    /// Copies the given rows of `self` (by index) into a new table.
    ///
    /// # Errors
    /// [`RopeError::TableMismatch`] if an index is out of range.
    pub fn gather(&self, rows: impl Iterator<Item = usize>) -> Result<Self> {
        let r = self.rotary_dim;
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for row in rows {
            if row >= self.rows() {
                return Err(RopeError::TableMismatch(format!(
                    "row {row} requested from a table of {}",
                    self.rows()
                )));
            }
            cos.extend_from_slice(&self.cos[row * r..(row + 1) * r]);
            sin.extend_from_slice(&self.sin[row * r..(row + 1) * r]);
        }
        Ok(CosSin {
            layout: self.layout,
            rotary_dim: r,
            cos,
            sin,
        })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.cos.len() / self.rotary_dim
    }

    /// Rotated dimensions per row.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// Pair layout the rows are expanded for.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// A borrowed view of all rows.
    pub fn view(&self) -> CosSinView<'_> {
        self.view_rows(0, self.rows())
    }

    /// A borrowed view of rows `start..start + len`.
    ///
    /// # Panics
    /// If the range exceeds the table; callers inside the crate check first.
    pub(crate) fn view_rows(&self, start: usize, len: usize) -> CosSinView<'_> {
        let r = self.rotary_dim;
        CosSinView {
            layout: self.layout,
            rotary_dim: r,
            cos: &self.cos[start * r..(start + len) * r],
            sin: &self.sin[start * r..(start + len) * r],
        }
    }

    /// Row `row` as `(C, S)` slices of `rotary_dim` values each (see the type's docs).
    pub fn row(&self, row: usize) -> Option<(&[f32], &[f32])> {
        let r = self.rotary_dim;
        let range = row.checked_mul(r)?..row.checked_add(1)?.checked_mul(r)?;
        Some((self.cos.get(range.clone())?, self.sin.get(range)?))
    }
}

/// Fills one row from the (magnitude, angle) of its pairs.
fn fill_row(
    layout: Layout,
    cos: &mut [f32],
    sin: &mut [f32],
    polar: impl Fn(usize) -> (f64, f64),
) -> Result<()> {
    let r = cos.len();
    for i in 0..r / 2 {
        let (amplitude, phi) = polar(i);
        for (what, value) in [("angle", phi), ("magnitude", amplitude)] {
            if !value.is_finite() {
                return Err(RopeError::NonFinite {
                    what,
                    index: i,
                    value,
                });
            }
        }
        let (s, c) = phi.sin_cos();
        let (c, s) = ((amplitude * c) as f32, (amplitude * s) as f32);
        let (a, b) = layout.pair(i, r);
        cos[a] = c;
        cos[b] = c;
        sin[a] = -s;
        sin[b] = s;
    }
    Ok(())
}

/// A borrowed run of [`CosSin`] rows: what the kernels read.
#[derive(Debug, Clone, Copy)]
pub struct CosSinView<'a> {
    layout: Layout,
    rotary_dim: usize,
    cos: &'a [f32],
    sin: &'a [f32],
}

impl<'a> CosSinView<'a> {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.cos.len() / self.rotary_dim
    }

    /// Rotated dimensions per row.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// Pair layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// All cosines, row-major (`rows * rotary_dim`).
    pub fn cos(&self) -> &'a [f32] {
        self.cos
    }

    /// All signed sines, row-major (`rows * rotary_dim`).
    pub fn sin(&self) -> &'a [f32] {
        self.sin
    }

    /// Rows `start..start + len`, or `None` when out of range.
    pub fn slice(&self, start: usize, len: usize) -> Option<CosSinView<'a>> {
        let r = self.rotary_dim;
        let range = start.checked_mul(r)?..start.checked_add(len)?.checked_mul(r)?;
        Some(CosSinView {
            layout: self.layout,
            rotary_dim: r,
            cos: self.cos.get(range.clone())?,
            sin: self.sin.get(range)?,
        })
    }
}

/// Tables built from cos/sin values computed elsewhere.
impl CosSin {
    /// A table from per-pair cos/sin tables as candle-nn and Hugging Face models hold them:
    /// `cos` and `sin` row-major `[rows, rotary_dim / 2]`, entry `(row, i)` holding `c_i` and
    /// `s_i` of pair `i`. Each value is widened exactly to f32 and placed as the type's docs
    /// describe (`C[a] = C[b] = c_i`, `S[a] = -s_i`, `S[b] = s_i` for pair `(a, b)` of
    /// `layout`), so the kernels compute
    ///
    /// ```text
    /// y_a = x_a c_i - x_b s_i,    y_b = x_b c_i + x_a s_i
    /// ```
    ///
    /// with exactly the given values (negating is exact).
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] for an odd or zero `rotary_dim`;
    /// [`RopeError::TableMismatch`] when `cos` and `sin` differ in length or do not hold whole
    /// rows of `rotary_dim / 2`; [`RopeError::Allocation`] for more rows than memory can hold.
    pub fn from_pair_tables<T: Element>(
        layout: Layout,
        rotary_dim: usize,
        cos: &[T],
        sin: &[T],
    ) -> Result<Self> {
        check_rotary_dim(rotary_dim)?;
        let pairs = rotary_dim / 2;
        if cos.len() != sin.len() || !cos.len().is_multiple_of(pairs) {
            return Err(RopeError::TableMismatch(format!(
                "cos ({}) and sin ({}) must hold the same whole rows of {pairs} pairs",
                cos.len(),
                sin.len()
            )));
        }
        // rows * rotary_dim = 2 * cos.len(), which cannot overflow: `cos` is in memory.
        let len = 2 * cos.len();
        let mut c_out = try_with_capacity("cos table", len)?;
        let mut s_out = try_with_capacity("sin table", len)?;
        c_out.resize(len, 0f32);
        s_out.resize(len, 0f32);
        if len >= PARALLEL_EXPAND_MIN {
            let out = c_out
                .par_chunks_mut(rotary_dim)
                .zip(s_out.par_chunks_mut(rotary_dim));
            out.zip(cos.par_chunks(pairs).zip(sin.par_chunks(pairs)))
                .for_each(|((c, s), given)| expand_pair_row(layout, given, c, s));
        } else {
            let out = c_out
                .chunks_mut(rotary_dim)
                .zip(s_out.chunks_mut(rotary_dim));
            out.zip(cos.chunks(pairs).zip(sin.chunks(pairs)))
                .for_each(|((c, s), given)| expand_pair_row(layout, given, c, s));
        }
        Ok(CosSin {
            layout,
            rotary_dim,
            cos: c_out,
            sin: s_out,
        })
    }
}

/// Tables below this many values are expanded by [`CosSin::from_pair_tables`] on the calling
/// thread: a copy is cheaper than computing angles, so it takes the threshold of the rotation
/// itself rather than [`PARALLEL_FILL_MIN`].
const PARALLEL_EXPAND_MIN: usize = crate::parallel::PARALLEL_MIN_ELEMENTS;

/// Expands one row of per-pair values (`pairs` each) into `rotary_dim = 2 * pairs` kernel
/// coefficients.
fn expand_pair_row<T: Element>(
    layout: Layout,
    (c_in, s_in): (&[T], &[T]),
    cos: &mut [f32],
    sin: &mut [f32],
) {
    let given = c_in.iter().zip(s_in).map(|(c, s)| (c.to_f32(), s.to_f32()));
    match layout {
        Layout::Interleaved => {
            let out = cos.chunks_exact_mut(2).zip(sin.chunks_exact_mut(2));
            for ((cc, ss), (c, s)) in out.zip(given) {
                cc[0] = c;
                cc[1] = c;
                ss[0] = -s;
                ss[1] = s;
            }
        }
        Layout::Half => {
            let h = c_in.len();
            let ((c_a, c_b), (s_a, s_b)) = (cos.split_at_mut(h), sin.split_at_mut(h));
            let out = c_a.iter_mut().zip(c_b).zip(s_a.iter_mut().zip(s_b));
            for (((ca, cb), (sa, sb)), (c, s)) in out.zip(given) {
                *ca = c;
                *cb = c;
                *sa = -s;
                *sb = s;
            }
        }
    }
}
