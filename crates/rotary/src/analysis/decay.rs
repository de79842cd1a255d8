//! Long-term decay (the paper's section 3.4.3, eqs. 35-37 and Figure 2).
//!
//! Write `q` and `k` as `d/2` complex numbers, one per rotated pair (`q_i = q[a] + i q[b]` for
//! pair `(a, b)` of the layout), and `h_i = q_i conj(k_i)`. Then
//!
//! ```text
//! <R_m q, R_n k> = Re[ sum_{i=0}^{d/2-1} h_i e^{i (m-n) theta_i} ]
//! ```
//!
//! and Abel summation with `S_j = sum_{i=0}^{j-1} e^{i (m-n) theta_i}`, `S_0 = 0`, `h_{d/2} = 0`
//! gives the paper's bound (eq. 37)
//!
//! ```text
//! |<R_m q, R_n k>| <= (max_i |h_{i+1} - h_i|) * sum_{j=1}^{d/2} |S_j|
//! ```
//!
//! whose second factor, divided by `d/2`, is the "relative upper bound" of Figure 2: it depends
//! only on the distance `r = m - n` and the schedule, and decays (with oscillation) as `r` grows.

use super::attention_map::scores_against_row;
use crate::error::{try_with_capacity, Result, RopeError};
use crate::freqs::{check_finite, check_rotary_dim};
use crate::layout::Layout;
use crate::rope::Rope;
use crate::table::CosSin;

/// Checks a frequency list: non-empty and finite.
fn check_inv_freq(inv_freq: &[f64]) -> Result<()> {
    check_rotary_dim(2 * inv_freq.len())?;
    check_finite("inverse frequency", inv_freq)
}

/// `sum_{j=1}^{d/2} |S_j(r)|` with `S_j(r) = sum_{i=0}^{j-1} e^{i r theta_i}`, by running
/// partial sums (O(d)).
fn partial_sum_norms(inv_freq: &[f64], distance: f64) -> f64 {
    let (mut re, mut im, mut total) = (0.0f64, 0.0f64, 0.0f64);
    for &theta in inv_freq {
        let (s, c) = (distance * theta).sin_cos();
        re += c;
        im += s;
        total += re.hypot(im);
    }
    total
}

/// The paper's relative upper bound at relative distance `distance`:
/// `(1 / (d/2)) * sum_{j=1}^{d/2} |S_j|`, `S_j = sum_{i=0}^{j-1} exp(i * distance * theta_i)`,
/// with `theta_i = inv_freq[i]` (`d/2 = inv_freq.len()`).
///
/// At distance 0 every `S_j = j`, so the bound is `(d/2 + 1) / 2`. O(d) per distance; angles
/// in f64.
///
/// # Errors
/// [`RopeError::InvalidRotaryDim`] for an empty list, [`RopeError::NonFinite`] for a non-finite
/// frequency or distance.
pub fn relative_bound(inv_freq: &[f64], distance: f64) -> Result<f64> {
    check_inv_freq(inv_freq)?;
    check_finite("distance", &[distance])?;
    Ok(partial_sum_norms(inv_freq, distance) / inv_freq.len() as f64)
}

/// [`relative_bound`] for every integer distance `0..=max_distance` (index = distance).
///
/// # Errors
/// As [`relative_bound`]; [`RopeError::TooLarge`] or [`RopeError::Allocation`] when the
/// `max_distance + 1` results cannot be held.
pub fn relative_bounds(inv_freq: &[f64], max_distance: usize) -> Result<Vec<f64>> {
    check_inv_freq(inv_freq)?;
    let mut bounds = try_with_capacity("bounds", distance_count(max_distance)?)?;
    let half = inv_freq.len() as f64;
    bounds.extend((0..=max_distance).map(|r| partial_sum_norms(inv_freq, r as f64) / half));
    Ok(bounds)
}

/// The number of distances `0..=max_distance`, or [`RopeError::TooLarge`] when it overflows.
fn distance_count(max_distance: usize) -> Result<usize> {
    max_distance.checked_add(1).ok_or(RopeError::TooLarge {
        what: "distances",
        size: max_distance as u128 + 1,
        limit: usize::MAX,
    })
}

/// The paper's absolute bound (eq. 37) for one pair of vectors at relative distance `distance`:
/// `(max_{i=0}^{d/2-1} |h_{i+1} - h_i|) * sum_{j=1}^{d/2} |S_j|`, with `h_i = q_i conj(k_i)` over
/// the pairs of `layout` and `h_{d/2} = 0`. It bounds `|<R_m q, R_n k>|` for `m - n = distance`.
///
/// `q` and `k` are fully rotated vectors: `q.len() == k.len() == 2 * inv_freq.len()`.
///
/// # Errors
/// [`RopeError::LengthMismatch`] for vectors of another length, and the errors of
/// [`relative_bound`].
pub fn pair_bound(
    q: &[f32],
    k: &[f32],
    layout: Layout,
    inv_freq: &[f64],
    distance: f64,
) -> Result<f64> {
    check_inv_freq(inv_freq)?;
    check_finite("distance", &[distance])?;
    let d = 2 * inv_freq.len();
    for (what, v) in [("q", q), ("k", k)] {
        if v.len() != d {
            return Err(RopeError::LengthMismatch {
                what,
                shape: [1, 1, 1, d],
                expected: d,
                got: v.len(),
            });
        }
    }
    let h = |i: usize| -> (f64, f64) {
        if i == d / 2 {
            return (0.0, 0.0);
        }
        let (a, b) = layout.pair(i, d);
        let (qa, qb, ka, kb) = (
            f64::from(q[a]),
            f64::from(q[b]),
            f64::from(k[a]),
            f64::from(k[b]),
        );
        // (qa + i qb)(ka - i kb)
        (qa * ka + qb * kb, qb * ka - qa * kb)
    };
    let max_step = (0..d / 2)
        .map(|i| {
            let (h0, h1) = (h(i), h(i + 1));
            (h1.0 - h0.0).hypot(h1.1 - h0.1)
        })
        .fold(0.0f64, f64::max);
    Ok(max_step * partial_sum_norms(inv_freq, distance))
}

/// Attention scores through the kernels: `scores[r] = <R_m q, R_{m+r} k>` for
/// `r = 0..=max_distance`, with `m = query_position`, `q` and `k` one head each
/// (`rope.head_dim()` elements) rotated by `rope` and the dot product taken in f64.
///
/// Mathematically `scores[r] = <q, R_r k>` for every `m`; measured through the f32 tables it
/// differs from that by rounding only.
///
/// # Errors
/// [`RopeError::TooLarge`] for an unrepresentable distance count, and the errors of
/// [`CosSin::from_positions`] and [`scores_against_row`] ([`RopeError::HeadDimMismatch`] when
/// `q` or `k` is not one head).
pub fn scores_by_distance(
    rope: &Rope,
    q: &[f32],
    k: &[f32],
    query_position: usize,
    max_distance: usize,
) -> Result<Vec<f64>> {
    let d = rope.head_dim();
    let count = distance_count(max_distance)?;
    // Rows for positions m..=m + max_distance: the same f64 angles, rounded once, as the rows
    // of `rope`'s own table.
    let table = CosSin::from_positions(
        rope.layout(),
        rope.inv_freq(),
        rope.amplitude(),
        count,
        |r| query_position as f64 + r as f64,
    )?;
    scores_against_row(&table, d, q, k, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freqs::inv_freqs;
    use proptest::prelude::*;

    /// The bound straight from its definition: every `S_j` summed afresh, O(d^2).
    fn direct(inv_freq: &[f64], r: f64) -> f64 {
        let half = inv_freq.len();
        let total: f64 = (1..=half)
            .map(|j| {
                let (re, im) = inv_freq[..j].iter().fold((0.0, 0.0), |(re, im), t| {
                    (re + (r * t).cos(), im + (r * t).sin())
                });
                (re * re + im * im).sqrt()
            })
            .sum();
        total / half as f64
    }

    #[test]
    fn distance_zero_is_half_of_half_dim_plus_one() {
        for d in [2usize, 8, 64, 128, 256] {
            let f = inv_freqs(d, 10_000.0).unwrap();
            let b = relative_bound(&f, 0.0).unwrap();
            let expected = (d as f64 / 2.0 + 1.0) / 2.0;
            // S_j = j exactly at r = 0: only summation rounding remains.
            assert!(
                (b - expected).abs() < 1e-12 * expected,
                "d={d}: {b} vs {expected}"
            );
        }
    }

    #[test]
    fn decays_from_start_to_far_distances() {
        // Figure 2 (d = 128, base 10^4): the bound falls well below its start. The far average
        // is compared, not each point, because the curve oscillates.
        let f = inv_freqs(128, 10_000.0).unwrap();
        let b = relative_bounds(&f, 256).unwrap();
        let far: f64 = b[200..].iter().sum::<f64>() / b[200..].len() as f64;
        assert!(far < b[0] / 4.0, "far mean {far}, start {}", b[0]);
        assert!(b.iter().all(|&v| v <= b[0] + 1e-12));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(relative_bound(&[], 1.0).is_err());
        assert!(relative_bound(&[1.0, f64::NAN], 1.0).is_err());
        assert!(relative_bound(&[1.0], f64::INFINITY).is_err());
        assert!(pair_bound(&[1.0; 3], &[1.0; 4], Layout::Interleaved, &[1.0, 0.1], 1.0).is_err());
        let rope = Rope::new(8, 8, 10_000.0, Layout::Interleaved).unwrap();
        assert!(scores_by_distance(&rope, &[0.0; 7], &[0.0; 8], 0, 3).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The O(d) running sum equals the definition evaluated directly (O(d^2)). Both sum
        /// unit complex numbers in f64; 1e-9 relative leaves room for their different orders
        /// of summation over up to 128 terms.
        #[test]
        fn running_sum_matches_direct(
            half in 1usize..128,
            base in 2.0f64..1e6,
            r in 0.0f64..5000.0,
        ) {
            let f = inv_freqs(2 * half, base).unwrap();
            let fast = relative_bound(&f, r).unwrap();
            let slow = direct(&f, r);
            prop_assert!((fast - slow).abs() <= 1e-9 * slow.max(1.0), "{fast} vs {slow}");
        }

        /// The paper's inequality holds for measured scores: |<R_m q, R_{m+r} k>| never exceeds
        /// max|h_{i+1} - h_i| * sum |S_j|. The kernel rounds cos/sin to f32 (relative error
        /// ~6e-8 per coefficient), so the score may exceed its exact value by about
        /// 1e-6 * |q| |k|; that slack is allowed.
        #[test]
        fn scores_respect_the_bound(
            q in proptest::collection::vec(-2.0f32..2.0, 16),
            k in proptest::collection::vec(-2.0f32..2.0, 16),
            m in 0usize..2000,
            same in any::<bool>(),
            half_layout in any::<bool>(),
        ) {
            let layout = if half_layout { Layout::Half } else { Layout::Interleaved };
            let k = if same { q.clone() } else { k };
            let rope = Rope::new(16, 16, 10_000.0, layout).unwrap();
            let scores = scores_by_distance(&rope, &q, &k, m, 64).unwrap();
            let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            let slack = 1e-6 * norm(&q) * norm(&k);
            for (r, s) in scores.iter().enumerate() {
                let bound = pair_bound(&q, &k, layout, rope.inv_freq(), r as f64).unwrap();
                prop_assert!(s.abs() <= bound + slack, "r={r}: |{s}| > {bound}");
            }
        }

        /// Scores depend on the distance only: the query's position does not matter, and
        /// distance 0 is the plain dot product. Angles are exact in f64 whatever `m`; each cos
        /// and sin is then rounded once to f32 (relative error 2^-24), and the f32 kernel
        /// rounds its products: 1e-5 * (|q|^2 + |k|^2) covers both with a wide margin.
        #[test]
        fn scores_are_relative(
            q in proptest::collection::vec(-2.0f32..2.0, 8),
            k in proptest::collection::vec(-2.0f32..2.0, 8),
            m in 1usize..5000,
        ) {
            let rope = Rope::new(8, 8, 10_000.0, Layout::Interleaved).unwrap();
            let at_zero = scores_by_distance(&rope, &q, &k, 0, 16).unwrap();
            let at_m = scores_by_distance(&rope, &q, &k, m, 16).unwrap();
            let dot: f64 = q.iter().zip(&k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            let scale: f64 = q.iter().chain(&k).map(|&x| f64::from(x).powi(2)).sum::<f64>();
            prop_assert!((at_zero[0] - dot).abs() <= 1e-5 * scale.max(1.0));
            for (a, b) in at_zero.iter().zip(&at_m) {
                prop_assert!((a - b).abs() <= 1e-5 * scale.max(1.0), "{a} vs {b}");
            }
        }
    }
}
