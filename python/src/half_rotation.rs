//! transformers' `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`: half-layout RoPE
//! with the caller's cos and sin tables.
//!
//! With `r` the tables' last size (`r <= d`, the first `r` features rotate) and `h = r / 2`:
//!
//! ```text
//! out[i] = x[i] cos[i] - x[i + h] sin[i]      i < h
//! out[i] = x[i] cos[i] + x[i - h] sin[i]      h <= i < r
//! out[i] = x[i]                               r <= i < d
//! ```
//!
//! i.e. `x * cos + rotate_half(x) * sin`, computed in f32 and rounded once to `x`'s type. The
//! tables are `[b or 1, seq, r]` and broadcast over the heads: `q` is `[b, heads, seq, d]` for
//! `unsqueeze_dim = 1`, `[b, seq, heads, d]` for `unsqueeze_dim = 2`.

use numpy::{PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use rayon::prelude::*;
use rotary::Element;

use crate::arrays::{new_array, slice, slice_mut, Floats, FloatsMut, Storage};
use crate::errors::value_error;

/// Where the rows of one q or k array find their table row.
#[derive(Clone, Copy)]
struct Layout4 {
    batch: usize,
    heads: usize,
    seq: usize,
    d: usize,
    /// `true` for `[b, heads, seq, d]`, `false` for `[b, seq, heads, d]`.
    head_major: bool,
}

impl Layout4 {
    /// The layout of `dims` for `unsqueeze_dim`.
    fn new(dims: &[usize], unsqueeze_dim: usize, what: &str) -> PyResult<Layout4> {
        let &[batch, a, b, d] = dims else {
            return Err(value_error(format!(
                "{what} must have 4 axes, got shape {dims:?}"
            )));
        };
        match unsqueeze_dim {
            1 => Ok(Layout4 {
                batch,
                heads: a,
                seq: b,
                d,
                head_major: true,
            }),
            2 => Ok(Layout4 {
                batch,
                heads: b,
                seq: a,
                d,
                head_major: false,
            }),
            other => Err(value_error(format!(
                "unsqueeze_dim must be 1 or 2, got {other}"
            ))),
        }
    }

    /// The (batch, token) of row `row` (a row is `d` features of one head and token).
    fn token(&self, row: usize) -> (usize, usize) {
        if self.head_major {
            let b = row / (self.heads * self.seq);
            (b, row % self.seq)
        } else {
            let b = row / (self.seq * self.heads);
            (b, (row / self.heads) % self.seq)
        }
    }
}

/// The cos and sin tables, `[tb, seq, r]` in f32.
struct Tables<'a> {
    cos: &'a [f32],
    sin: &'a [f32],
    batch: usize,
    seq: usize,
    r: usize,
}

impl Tables<'_> {
    /// Checks the tables against an array's layout.
    fn check(&self, x: &Layout4, what: &str) -> PyResult<()> {
        if self.seq != x.seq || (self.batch != 1 && self.batch != x.batch) {
            return Err(value_error(format!(
                "cos/sin of [{}, {}, {}] do not broadcast over {what} of batch {} and seq {}",
                self.batch, self.seq, self.r, x.batch, x.seq
            )));
        }
        if self.r > x.d || !self.r.is_multiple_of(2) || self.r == 0 {
            return Err(value_error(format!(
                "cos/sin have {} features; {what} has {}: the rotated features must be even, \
                 non-zero and at most the head size",
                self.r, x.d
            )));
        }
        Ok(())
    }

    /// Rotates every row of `src` into `dst` on the threads.
    fn apply<T: Element>(&self, src: &[T], dst: &mut [T], x: Layout4) {
        dst.par_chunks_mut(x.d.max(1))
            .zip(src.par_chunks(x.d.max(1)))
            .enumerate()
            .for_each(|(row, (out, xs))| {
                let values: Vec<f32> = xs.iter().map(|v| v.to_f32()).collect();
                self.rotate_row(&values, out, row, x);
            });
    }

    /// Rotates every row of `data` in place on the threads.
    fn apply_inplace<T: Element>(&self, data: &mut [T], x: Layout4) {
        data.par_chunks_mut(x.d.max(1))
            .enumerate()
            .for_each(|(row, out)| {
                let values: Vec<f32> = out.iter().map(|v| v.to_f32()).collect();
                self.rotate_row(&values, out, row, x);
            });
    }

    /// `out = values * cos + rotate_half(values) * sin` for row `row` of an array laid out as
    /// `x`, rounded once to `T`.
    fn rotate_row<T: Element>(&self, values: &[f32], out: &mut [T], row: usize, x: Layout4) {
        let (r, h) = (self.r, self.r / 2);
        let (b, s) = x.token(row);
        let at = ((if self.batch == 1 { 0 } else { b }) * self.seq + s) * r;
        let (c, sn) = (&self.cos[at..at + r], &self.sin[at..at + r]);
        for (i, o) in out.iter_mut().enumerate() {
            let v = values[i];
            let y = if i < h {
                v * c[i] - values[i + h] * sn[i]
            } else if i < r {
                v * c[i] + values[i - h] * sn[i]
            } else {
                v
            };
            *o = T::from_f32(y);
        }
    }
}

/// One of q or k rotated into a new array.
fn rotated<'py, S: Storage>(
    py: Python<'py>,
    x: &PyReadonlyArrayDyn<'py, S>,
    tables: &Tables<'_>,
    unsqueeze_dim: usize,
    what: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let layout = Layout4::new(x.shape(), unsqueeze_dim, what)?;
    tables.check(&layout, what)?;
    let src = slice(x, what)?;
    let out = new_array::<S>(py, x.shape());
    {
        let mut rw = out.readwrite();
        let dst = slice_mut(&mut rw, "the output")?;
        py.detach(|| tables.apply(S::view(src), S::view_mut(dst), layout));
    }
    Ok(out.into_any())
}

/// One of q or k, any accepted storage type.
fn rotated_any<'py>(
    py: Python<'py>,
    x: &Floats<'py>,
    tables: &Tables<'_>,
    unsqueeze_dim: usize,
    what: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match x {
        Floats::F32(a) => rotated(py, a, tables, unsqueeze_dim, what),
        Floats::F16(a) => rotated(py, a, tables, unsqueeze_dim, what),
        Floats::Bf16(a) => rotated(py, a, tables, unsqueeze_dim, what),
    }
}

/// The tables of `cos` and `sin` (float32 `[b or 1, seq, r]`), checked against each other.
fn tables<'a>(
    cos: &'a PyReadonlyArrayDyn<'_, f32>,
    sin: &'a PyReadonlyArrayDyn<'_, f32>,
) -> PyResult<Tables<'a>> {
    if cos.shape() != sin.shape() {
        return Err(value_error(format!(
            "cos {:?} and sin {:?} differ in shape",
            cos.shape(),
            sin.shape()
        )));
    }
    let &[batch, seq, r] = cos.shape() else {
        return Err(value_error(format!(
            "cos and sin must have 3 axes [batch, seq, dim], got shape {:?}",
            cos.shape()
        )));
    };
    Ok(Tables {
        cos: slice(cos, "cos")?,
        sin: slice(sin, "sin")?,
        batch,
        seq,
        r,
    })
}

/// One of q or k rotated in place.
fn rotate_in_place<S: Storage>(
    py: Python<'_>,
    x: &mut PyReadwriteArrayDyn<'_, S>,
    tables: &Tables<'_>,
    unsqueeze_dim: usize,
    what: &str,
) -> PyResult<()> {
    let layout = Layout4::new(x.shape(), unsqueeze_dim, what)?;
    tables.check(&layout, what)?;
    let data = slice_mut(x, what)?;
    py.detach(|| tables.apply_inplace(S::view_mut(data), layout));
    Ok(())
}

/// One of q or k in place, any accepted storage type.
fn rotate_any_in_place(
    py: Python<'_>,
    x: &mut FloatsMut<'_>,
    tables: &Tables<'_>,
    unsqueeze_dim: usize,
    what: &str,
) -> PyResult<()> {
    match x {
        FloatsMut::F32(a) => rotate_in_place(py, a, tables, unsqueeze_dim, what),
        FloatsMut::F16(a) => rotate_in_place(py, a, tables, unsqueeze_dim, what),
        FloatsMut::Bf16(a) => rotate_in_place(py, a, tables, unsqueeze_dim, what),
    }
}

/// The shape of a writable array.
fn dims_mut(x: &FloatsMut<'_>) -> Vec<usize> {
    match x {
        FloatsMut::F32(a) => a.shape().to_vec(),
        FloatsMut::F16(a) => a.shape().to_vec(),
        FloatsMut::Bf16(a) => a.shape().to_vec(),
    }
}

/// [`apply_rotary_pos_emb`] in place on writable `q` and `k`.
#[pyfunction]
#[pyo3(signature = (q, k, cos, sin, unsqueeze_dim = 1))]
pub fn apply_rotary_pos_emb_<'py>(
    py: Python<'py>,
    mut q: FloatsMut<'py>,
    mut k: FloatsMut<'py>,
    cos: PyReadonlyArrayDyn<'py, f32>,
    sin: PyReadonlyArrayDyn<'py, f32>,
    unsqueeze_dim: usize,
) -> PyResult<()> {
    let tables = tables(&cos, &sin)?;
    // Both checked before either changes: a refused call leaves q and k as they were.
    for (x, what) in [(&q, "q"), (&k, "k")] {
        tables.check(&Layout4::new(&dims_mut(x), unsqueeze_dim, what)?, what)?;
    }
    rotate_any_in_place(py, &mut q, &tables, unsqueeze_dim, "q")?;
    rotate_any_in_place(py, &mut k, &tables, unsqueeze_dim, "k")
}

/// `(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`, as transformers'
/// `apply_rotary_pos_emb`; `cos` and `sin` are float32 `[b or 1, seq, r]`.
#[pyfunction]
#[pyo3(signature = (q, k, cos, sin, unsqueeze_dim = 1))]
pub fn apply_rotary_pos_emb<'py>(
    py: Python<'py>,
    q: Floats<'py>,
    k: Floats<'py>,
    cos: PyReadonlyArrayDyn<'py, f32>,
    sin: PyReadonlyArrayDyn<'py, f32>,
    unsqueeze_dim: usize,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let tables = tables(&cos, &sin)?;
    Ok((
        rotated_any(py, &q, &tables, unsqueeze_dim, "q")?,
        rotated_any(py, &k, &tables, unsqueeze_dim, "k")?,
    ))
}
