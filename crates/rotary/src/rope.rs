//! [`Rope`]: a 1D rotary embedding with a cached, growing cos/sin table.

use std::sync::{Arc, RwLock};

use crate::apply::{check_qk, rotate, rotate_inplace, rotate_qk_inplace, Direction, Shape};
use crate::element::Element;
use crate::error::{Result, RopeError};
use crate::freqs::{check_finite, check_rotary_dim, inv_freqs};
use crate::layout::Layout;
use crate::positions::Positions;
use crate::table::{CosSin, CosSinView};

/// The cached table grows to at most this many bytes; positions past it are computed per call.
pub const MAX_TABLE_BYTES: usize = 64 << 20;

/// Smallest table built on first use, in positions.
const MIN_TABLE_ROWS: usize = 256;

/// A rotary position embedding over 1D positions: pair `i` of a head at position `m` rotates by
/// `m * inv_freq[i]` (times an optional amplitude), in [`Layout::Interleaved`] or
/// [`Layout::Half`] pairs, over the first `rotary_dim` of `head_dim` coordinates.
///
/// Rows for positions `[0, n)` are cached in a table that grows on demand (up to
/// [`MAX_TABLE_BYTES`]); fractional positions and positions past the cap are computed for the
/// call. Either way every coefficient is `cos`/`sin` of an f64 angle rounded once to f32. A
/// `Rope` is `Sync`: threads can share one.
#[derive(Debug)]
pub struct Rope {
    head_dim: usize,
    layout: Layout,
    inv_freq: Vec<f64>,
    amplitude: f64,
    table: RwLock<Arc<CosSin>>,
}

/// The coefficients of one call: a window of the cached table or rows made for the call.
#[derive(Debug, Clone)]
pub enum Coefficients {
    /// Rows `start..start + rows` of the shared table.
    Cached {
        /// The table.
        table: Arc<CosSin>,
        /// First row.
        start: usize,
        /// Number of rows.
        rows: usize,
    },
    /// Rows computed for this call.
    Computed(CosSin),
}

impl Coefficients {
    /// The rows as the kernels read them.
    pub fn view(&self) -> CosSinView<'_> {
        match self {
            Coefficients::Cached { table, start, rows } => table.view_rows(*start, *rows),
            Coefficients::Computed(t) => t.view(),
        }
    }
}

impl Rope {
    /// The paper's schedule `theta_i = base^(-2i / rotary_dim)` on the first `rotary_dim`
    /// coordinates of `head_dim`.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`], [`RopeError::TooLarge`] above
    /// [`crate::freqs::MAX_ROTARY_DIM`], [`RopeError::RotaryDimTooLarge`],
    /// [`RopeError::InvalidBase`].
    pub fn new(head_dim: usize, rotary_dim: usize, base: f64, layout: Layout) -> Result<Rope> {
        check_rotary_dim(rotary_dim)?;
        Rope::from_inv_freq(head_dim, layout, inv_freqs(rotary_dim, base)?, 1.0)
    }

    /// A rotation with given inverse frequencies (`rotary_dim = 2 * inv_freq.len()`) and
    /// amplitude `a` multiplying every cos and sin (1 for a pure rotation; an attention factor
    /// for YaRN or LongRoPE). This is how scaled schedules enter the fast kernels.
    ///
    /// # Errors
    /// [`RopeError::InvalidRotaryDim`] for an empty list, [`RopeError::TooLarge`] for more than
    /// [`crate::freqs::MAX_ROTARY_DIM`] rotated dims, [`RopeError::RotaryDimTooLarge`],
    /// [`RopeError::NonFinite`] for a non-finite frequency or amplitude.
    pub fn from_inv_freq(
        head_dim: usize,
        layout: Layout,
        inv_freq: Vec<f64>,
        amplitude: f64,
    ) -> Result<Rope> {
        let rotary_dim = 2 * inv_freq.len();
        check_rotary_dim(rotary_dim)?;
        if rotary_dim > head_dim {
            return Err(RopeError::RotaryDimTooLarge {
                rotary_dim,
                head_dim,
            });
        }
        check_finite("inverse frequency", &inv_freq)?;
        check_finite("amplitude", &[amplitude])?;
        let table = CosSin::from_positions(layout, &inv_freq, amplitude, 0, |p| p as f64)?;
        Ok(Rope {
            head_dim,
            layout,
            inv_freq,
            amplitude,
            table: RwLock::new(Arc::new(table)),
        })
    }

    /// Elements per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Rotated coordinates per head (the rest pass through).
    pub fn rotary_dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// Pair layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Inverse frequencies `theta_i`, f64.
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// Amplitude multiplying cos and sin.
    pub fn amplitude(&self) -> f64 {
        self.amplitude
    }

    /// Largest number of positions the cached table may hold.
    pub fn max_table_rows(&self) -> usize {
        (MAX_TABLE_BYTES / (2 * 4 * self.rotary_dim())).max(1)
    }

    /// The cached table as it is now (positions `[0, rows)`).
    pub fn table(&self) -> Arc<CosSin> {
        match self.table.read() {
            Ok(t) => Arc::clone(&t),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Grows the cached table to cover positions `[0, n)` (at least; growth doubles), up to
    /// [`Rope::max_table_rows`]. Returns the table.
    ///
    /// # Errors
    /// Only if an angle is not finite, which finite frequencies cannot produce below the cap.
    pub fn reserve(&self, n: usize) -> Result<Arc<CosSin>> {
        let current = self.table();
        let cap = self.max_table_rows();
        let want = n.min(cap);
        if current.rows() >= want {
            return Ok(current);
        }
        let mut guard = match self.table.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.rows() < want {
            // `want <= cap`, so the target covers it; the cap wins over the minimum size (it is
            // below it for rotary dims above 2^15).
            let target = want.next_power_of_two().max(MIN_TABLE_ROWS).min(cap);
            let mut grown = CosSin::clone(&guard);
            grown.extend_positions(&self.inv_freq, self.amplitude, target - grown.rows())?;
            *guard = Arc::new(grown);
        }
        Ok(Arc::clone(&guard))
    }

    /// The coefficients for `positions` of a `batch x seq` call: a window of the cached table
    /// for a range, gathered table rows for explicit integer positions, or rows computed in f64
    /// for fractional positions and positions beyond the table.
    ///
    /// # Errors
    /// The errors of [`Positions::per_sequence`]; [`RopeError::NonFinite`] for a position whose
    /// angle overflows f64; [`RopeError::Allocation`] when `batch * seq` rows cannot be held.
    pub fn coefficients(
        &self,
        positions: Positions<'_>,
        batch: usize,
        seq: usize,
    ) -> Result<Coefficients> {
        let rows = positions.rows(batch, seq)?;
        if let Some(end) = positions.integer_end(rows) {
            let current = self.table();
            let cached = if end <= current.rows() {
                Some(current)
            } else if end <= self.max_table_rows() && worth_growing(current.rows(), end, rows) {
                Some(self.reserve(end)?)
            } else {
                None
            };
            if let Some(table) = cached {
                return Ok(match positions {
                    Positions::Range { offset } => Coefficients::Cached {
                        table,
                        start: offset,
                        rows,
                    },
                    _ => Coefficients::Computed(
                        table.gather((0..rows).map(|row| positions.get(row) as usize))?,
                    ),
                });
            }
        }
        Ok(Coefficients::Computed(CosSin::from_positions(
            self.layout,
            &self.inv_freq,
            self.amplitude,
            rows,
            |row| positions.get(row),
        )?))
    }

    /// Rotates `x` (of `shape`) in place by the positions given.
    ///
    /// # Errors
    /// [`RopeError::HeadDimMismatch`], and the errors of [`Rope::coefficients`] and
    /// [`rotate_inplace`].
    pub fn apply_inplace<T: Element>(
        &self,
        x: &mut [T],
        shape: Shape,
        positions: Positions<'_>,
        direction: Direction,
    ) -> Result<()> {
        shape.check_head_dim("x", self.head_dim)?;
        // Lengths before coefficients: a shape far larger than its slice must fail here, not
        // after building a table for all its positions.
        shape.check_len("x", x.len())?;
        let coefficients = self.coefficients(positions, shape.batch, shape.seq)?;
        rotate_inplace(x, shape, coefficients.view(), direction)
    }

    /// Rotates `src` into `dst` (both of `shape`) by the positions given.
    ///
    /// # Errors
    /// As [`Rope::apply_inplace`] and [`rotate`].
    pub fn apply<T: Element>(
        &self,
        src: &[T],
        dst: &mut [T],
        shape: Shape,
        positions: Positions<'_>,
        direction: Direction,
    ) -> Result<()> {
        shape.check_head_dim("src", self.head_dim)?;
        shape.check_len("src", src.len())?;
        shape.check_len("dst", dst.len())?;
        let coefficients = self.coefficients(positions, shape.batch, shape.seq)?;
        rotate(src, dst, shape, coefficients.view(), direction)
    }

    /// Rotates q and k in place in one fused call (one table lookup, one pass of threads).
    /// Head counts may differ (grouped-query attention).
    ///
    /// # Errors
    /// As [`Rope::apply_inplace`] and [`rotate_qk_inplace`].
    pub fn apply_qk_inplace<T: Element>(
        &self,
        q: &mut [T],
        q_shape: Shape,
        k: &mut [T],
        k_shape: Shape,
        positions: Positions<'_>,
        direction: Direction,
    ) -> Result<()> {
        check_qk(&q_shape, &k_shape)?;
        q_shape.check_head_dim("q", self.head_dim)?;
        q_shape.check_len("q", q.len())?;
        k_shape.check_len("k", k.len())?;
        let coefficients = self.coefficients(positions, q_shape.batch, q_shape.seq)?;
        rotate_qk_inplace(q, q_shape, k, k_shape, coefficients.view(), direction)
    }
}

/// Whether a call needing `rows` rows with positions below `end` should grow a cached table of
/// `have` rows rather than get rows computed for the call.
///
/// Growth is worth it when it is amortised: the table at most doubles (decoding token by token,
/// growing sequences), or the call itself fills a fair share of the new rows (a long prompt). A
/// few tokens at a far position (one packed sequence deep into a document) are computed directly
/// instead of building every row below them.
fn worth_growing(have: usize, end: usize, rows: usize) -> bool {
    end <= have.max(MIN_TABLE_ROWS).saturating_mul(2)
        || rows.saturating_mul(4) >= end.saturating_sub(have)
}
