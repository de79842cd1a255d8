//! Pair layouts: which two dimensions of a head rotate together.

use crate::error::{try_with_capacity, Result, RopeError};
use crate::freqs::check_rotary_dim;

/// How the rotated dimensions of a head are paired.
///
/// Both layouts rotate pair `i` by the angle `m * theta_i`; they differ only in which two
/// coordinates form that pair, so each is the other up to a fixed permutation of the head's
/// coordinates (see [`pair_permutation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// Pair `i` is `(x[2i], x[2i+1])`: the paper's eq. 34, RoFormer, GPT-J.
    #[default]
    Interleaved,
    /// Pair `i` is `(x[i], x[i + r/2])` ("rotate_half"): GPT-NeoX, LLaMA.
    Half,
}

impl Layout {
    /// The two coordinates of pair `i` among `rotary_dim` rotated dimensions.
    #[inline]
    pub fn pair(self, i: usize, rotary_dim: usize) -> (usize, usize) {
        match self {
            Layout::Interleaved => (2 * i, 2 * i + 1),
            Layout::Half => (i, i + rotary_dim / 2),
        }
    }

    /// Lower-case name (`interleaved` or `half`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Interleaved => "interleaved",
            Layout::Half => "half",
        }
    }
}

/// The permutation of one head's coordinates that turns a vector laid out for `from` into the
/// same rotation problem laid out for `to`: `converted[j] = original[perm[j]]`.
///
/// Coordinates `rotary_dim..head_dim` (not rotated) map to themselves. Because the permutation
/// is orthogonal and carries pair `i` of `from` onto pair `i` of `to`,
/// `<R^to_m P q, R^to_n P k> = <R^from_m q, R^from_n k>`.
///
/// # Errors
/// [`RopeError::InvalidRotaryDim`] or [`RopeError::RotaryDimTooLarge`];
/// [`RopeError::Allocation`] for a `head_dim` too large to hold.
pub fn pair_permutation(
    head_dim: usize,
    rotary_dim: usize,
    from: Layout,
    to: Layout,
) -> Result<Vec<usize>> {
    check_dims(head_dim, rotary_dim)?;
    let mut perm = try_with_capacity("permutation", head_dim)?;
    perm.extend(0..head_dim);
    for i in 0..rotary_dim / 2 {
        let (a_to, b_to) = to.pair(i, rotary_dim);
        let (a_from, b_from) = from.pair(i, rotary_dim);
        perm[a_to] = a_from;
        perm[b_to] = b_from;
    }
    Ok(perm)
}

/// Checks that `rotary_dim` is even, non-zero and at most `head_dim`.
fn check_dims(head_dim: usize, rotary_dim: usize) -> Result<()> {
    check_rotary_dim(rotary_dim)?;
    if rotary_dim > head_dim {
        return Err(RopeError::RotaryDimTooLarge {
            rotary_dim,
            head_dim,
        });
    }
    Ok(())
}

/// Converts the output rows of a q or k projection (a PyTorch `Linear` weight of shape
/// `[num_heads * head_dim, row_len]`, or its bias with `row_len = 1`) from one pair layout to the
/// other, head by head, with [`pair_permutation`].
///
/// Attention scores computed with `to`-layout RoPE on the converted projections equal those of
/// `from`-layout RoPE on the original ones. Value projections are not converted.
///
/// # Errors
/// [`RopeError::Projection`] when `rows.len() != num_heads * head_dim * row_len`, plus the errors
/// of [`pair_permutation`].
pub fn convert_projection<T: Copy>(
    rows: &[T],
    row_len: usize,
    num_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    from: Layout,
    to: Layout,
) -> Result<Vec<T>> {
    check_dims(head_dim, rotary_dim)?;
    let expected = num_heads
        .checked_mul(head_dim)
        .and_then(|n| n.checked_mul(row_len));
    if expected != Some(rows.len()) {
        return Err(RopeError::Projection(format!(
            "{} elements given, {num_heads} heads x {head_dim} dims x {row_len} per row expected",
            rows.len()
        )));
    }
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // Here head_dim <= rows.len(): the permutation is no larger than the data.
    let perm = pair_permutation(head_dim, rotary_dim, from, to)?;
    let mut out = Vec::with_capacity(rows.len());
    for head in rows.chunks_exact(head_dim * row_len) {
        for &src in &perm {
            out.extend_from_slice(&head[src * row_len..(src + 1) * row_len]);
        }
    }
    Ok(out)
}
