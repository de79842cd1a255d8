//! The error type of the rotary core.

/// Everything that can be wrong with a rotary call's arguments.
///
/// Every public function of this crate that takes caller data validates it and returns one of
/// these instead of panicking.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RopeError {
    /// The number of rotated dimensions is zero or odd: dimensions rotate in pairs.
    #[error("rotary dims must be even and non-zero, got {0}")]
    InvalidRotaryDim(usize),
    /// More rotated dimensions than the head has.
    #[error("rotary dims {rotary_dim} exceed head dim {head_dim}")]
    RotaryDimTooLarge {
        /// Requested rotated dimensions.
        rotary_dim: usize,
        /// Dimensions per head.
        head_dim: usize,
    },
    /// A frequency base that is not a finite number above zero.
    #[error("rotary base must be finite and > 0, got {0}")]
    InvalidBase(f64),
    /// An inverse frequency (or another angle parameter) that is not finite.
    #[error("{what} must be finite, got {value} at index {index}")]
    NonFinite {
        /// Which parameter.
        what: &'static str,
        /// Index of the offending entry.
        index: usize,
        /// The value found.
        value: f64,
    },
    /// A data slice whose length does not match the shape that describes it.
    #[error("{what}: slice holds {got} elements but its shape {shape:?} needs {expected}")]
    LengthMismatch {
        /// Which argument.
        what: &'static str,
        /// The shape given, as (batch, heads, seq, head_dim).
        shape: [usize; 4],
        /// Elements the shape needs.
        expected: usize,
        /// Elements the slice holds.
        got: usize,
    },
    /// The head dimension of the data does not match the rotation's.
    #[error("{what}: head dim {got} does not match the rotation's head dim {expected}")]
    HeadDimMismatch {
        /// Which argument.
        what: &'static str,
        /// The rotation's head dim.
        expected: usize,
        /// The data's head dim.
        got: usize,
    },
    /// q and k of a fused call disagree on a dimension they must share.
    #[error("q and k must share {what}: q has {q}, k has {k}")]
    QkMismatch {
        /// The dimension: batch, seq, head dim or order.
        what: &'static str,
        /// q's value.
        q: usize,
        /// k's value.
        k: usize,
    },
    /// An explicit position list of the wrong length.
    #[error("positions: expected {seq} (one per token) or {batch_seq} (one per token of every sequence) entries, got {got}")]
    PositionsLength {
        /// Sequence length.
        seq: usize,
        /// batch * seq.
        batch_seq: usize,
        /// Entries given.
        got: usize,
    },
    /// A position that is NaN or infinite.
    #[error("position {index} is not finite ({value})")]
    NonFinitePosition {
        /// Index of the position in the list.
        index: usize,
        /// The value found.
        value: f64,
    },
    /// A cos/sin table that has the wrong number of rows or the wrong row width.
    #[error("cos/sin table: {0}")]
    TableMismatch(String),
    /// N-D positions that are malformed (coordinate count not a multiple of the axes) or do not
    /// match the rotation's number of axes.
    #[error("N-D positions: {0}")]
    NdPositions(String),
    /// An N-D frequency specification (axis sections, omega matrix) that is inconsistent.
    #[error("N-D frequencies: {0}")]
    NdFrequencies(String),
    /// A shape whose element count overflows `usize`.
    #[error("shape {0:?} overflows the address space")]
    ShapeOverflow([usize; 4]),
    /// A weight matrix handed to the layout conversion has the wrong size.
    #[error("projection: {0}")]
    Projection(String),
    /// A size beyond a documented limit of this crate (such as
    /// [`MAX_ROTARY_DIM`](crate::freqs::MAX_ROTARY_DIM)), or one whose arithmetic overflows
    /// `usize`: refused before anything is allocated for it.
    #[error("{what} {size} exceeds the limit of {limit}")]
    TooLarge {
        /// What was sized (rotary dims, table elements, ...).
        what: &'static str,
        /// The size asked for (a product is computed exactly, so it may exceed `usize::MAX`).
        size: u128,
        /// The largest size accepted.
        limit: usize,
    },
    /// A buffer the arguments call for is larger than the allocator can provide (a table or a
    /// permutation for absurd dimensions).
    #[error("{what}: cannot allocate {elements} elements")]
    Allocation {
        /// What was being allocated.
        what: &'static str,
        /// Elements requested.
        elements: usize,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, RopeError>;

/// `a * b` when it is at most `limit`, else [`RopeError::TooLarge`] naming `what` with the
/// exact product (no overflow: it is computed in `u128`).
pub(crate) fn checked_product(
    what: &'static str,
    a: usize,
    b: usize,
    limit: usize,
) -> Result<usize> {
    let size = a as u128 * b as u128;
    match usize::try_from(size) {
        Ok(n) if n <= limit => Ok(n),
        _ => Err(RopeError::TooLarge { what, size, limit }),
    }
}

/// An empty vector with room for `n` elements, or [`RopeError::Allocation`] where the
/// allocator refuses (instead of the abort or panic of `Vec::with_capacity`).
pub(crate) fn try_with_capacity<T>(what: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| RopeError::Allocation { what, elements: n })?;
    Ok(v)
}
