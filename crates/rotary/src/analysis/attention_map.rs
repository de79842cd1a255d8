//! RoPE-only attention maps: the score of one query position against every key position when
//! q and k carry no content but a fixed vector, so that only the rotation shapes the map.

use crate::apply::{rotate, Direction, Shape};
use crate::error::{checked_product, try_with_capacity, Result, RopeError};
use crate::table::CosSin;

/// Keys rotated per block: memory beyond the table and the scores stays at a few blocks of
/// `head_dim` values however many rows the table has.
const BLOCK_ROWS: usize = 1024;

/// `scores[p] = <R_c q, R_p k>` for every row `p` of `table`, where `R_p` rotates by row `p`'s
/// coefficients (any schedule: 1D, N-D) and `c = query_row`; `q` and `k` are one head of
/// `head_dim >= table.rotary_dim()` elements, rotated through the kernels, dot products in f64.
///
/// For an N-D relative schedule the score depends on the offset `p - c` only.
///
/// # Errors
/// [`RopeError::HeadDimMismatch`] when `q` or `k` do not hold `head_dim` elements,
/// [`RopeError::TableMismatch`] when `query_row` is not a row of `table`,
/// [`RopeError::Allocation`] when the scores cannot be held, and the errors of [`rotate`].
pub fn scores_against_row(
    table: &CosSin,
    head_dim: usize,
    q: &[f32],
    k: &[f32],
    query_row: usize,
) -> Result<Vec<f64>> {
    for (what, v) in [("q", q), ("k", k)] {
        if v.len() != head_dim {
            return Err(RopeError::HeadDimMismatch {
                what,
                expected: head_dim,
                got: v.len(),
            });
        }
    }
    let rows = table.rows();
    let query = table.gather(std::iter::once(query_row))?;
    let mut q_rot = vec![0f32; head_dim];
    rotate(
        q,
        &mut q_rot,
        Shape::head_major(1, 1, 1, head_dim),
        query.view(),
        Direction::Forward,
    )?;
    let block = BLOCK_ROWS.min(rows);
    let block_len = checked_product("key block elements", block, head_dim, usize::MAX)?;
    let mut keys = try_with_capacity("key block", block_len)?;
    keys.extend(k.iter().copied().cycle().take(block_len));
    let mut k_rot = vec![0f32; block_len];
    let mut scores = try_with_capacity("scores", rows)?;
    for start in (0..rows).step_by(block.max(1)) {
        let n = block.min(rows - start);
        let len = n * head_dim;
        let view = table.view().slice(start, n).ok_or_else(|| {
            RopeError::TableMismatch(format!("rows {start}..{} of {rows}", start + n))
        })?;
        rotate(
            &keys[..len],
            &mut k_rot[..len],
            Shape::head_major(1, 1, n, head_dim),
            view,
            Direction::Forward,
        )?;
        scores.extend(k_rot[..len].chunks_exact(head_dim).map(|kr| {
            kr.iter()
                .zip(&q_rot)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum::<f64>()
        }));
    }
    Ok(scores)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freqs::inv_freqs;
    use crate::layout::Layout;
    use crate::nd::{NdPositions, NdRope};
    use proptest::prelude::*;

    fn unit(v: &[f32]) -> f64 {
        v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// On a 1D table the map is the score by distance: row p against row c is
        /// `<q, R_{p-c} k>`, computed here with explicit f64 angles. Tolerance: cos/sin are
        /// rounded once to f32 and the kernel multiplies in f32, ~1e-6 relative to |q| |k|.
        #[test]
        fn one_axis_map_is_the_relative_score(
            q in proptest::collection::vec(-2.0f32..2.0, 8),
            k in proptest::collection::vec(-2.0f32..2.0, 8),
            c in 0usize..20,
        ) {
            let theta = inv_freqs(8, 10_000.0).unwrap();
            let table = CosSin::from_positions(Layout::Interleaved, &theta, 1.0, 20, |r| r as f64)
                .unwrap();
            let scores = scores_against_row(&table, 8, &q, &k, c).unwrap();
            let scale = (unit(&q) * unit(&k)).sqrt().max(1e-3);
            for (p, s) in scores.iter().enumerate() {
                let r = p as f64 - c as f64;
                let expected: f64 = (0..4)
                    .map(|i| {
                        let (sn, cs) = (r * theta[i]).sin_cos();
                        let (ka, kb) = (f64::from(k[2 * i]), f64::from(k[2 * i + 1]));
                        let (ra, rb) = (ka * cs - kb * sn, kb * cs + ka * sn);
                        f64::from(q[2 * i]) * ra + f64::from(q[2 * i + 1]) * rb
                    })
                    .sum();
                prop_assert!((s - expected).abs() <= 1e-5 * scale, "p={p}: {s} vs {expected}");
            }
        }

        /// Axial 2D maps are additively separable: with the x and y halves rotating
        /// independently, s(dy, dx) - s(dy, 0) - s(0, dx) + s(0, 0) = 0 for every offset.
        #[test]
        fn axial_map_is_separable(
            q in proptest::collection::vec(-2.0f32..2.0, 16),
            r0 in 0usize..6,
            c0 in 0usize..7,
        ) {
            let (h, w) = (6, 7);
            let rope = NdRope::axial_2d(16, 16, 100.0, Layout::Interleaved).unwrap();
            let table = rope.table(&NdPositions::grid_2d(h, w).unwrap()).unwrap();
            let s = scores_against_row(&table, 16, &q, &q, r0 * w + c0).unwrap();
            let at = |r: usize, c: usize| s[r * w + c];
            let slack = 1e-5 * unit(&q).max(1e-3);
            for r in 0..h {
                for c in 0..w {
                    let mixed = at(r, c) - at(r, c0) - at(r0, c) + at(r0, c0);
                    prop_assert!(mixed.abs() <= slack, "({r}, {c}): {mixed}");
                }
            }
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let theta = inv_freqs(4, 10_000.0).unwrap();
        let table =
            CosSin::from_positions(Layout::Interleaved, &theta, 1.0, 3, |r| r as f64).unwrap();
        assert!(scores_against_row(&table, 4, &[0.0; 3], &[0.0; 4], 0).is_err());
        assert!(scores_against_row(&table, 4, &[0.0; 4], &[0.0; 4], 3).is_err());
        assert!(scores_against_row(&table, 2, &[0.0; 2], &[0.0; 2], 0).is_err());
    }
}
