//! Scores from logits: a stable softmax in f64 and the top k.

/// `softmax(z)_i = exp(z_i - m) / sum_j exp(z_j - m)` with `m = max z`, in f64: every exponent
/// is at most 0, so nothing overflows and the largest term is exactly 1. The logits must be
/// finite (the pipelines check them first).
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&z| f64::from(z))
        .fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|&z| (f64::from(z) - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// The `k` largest scores with their ids, largest first (ties: lower id first).
pub fn top_k(scores: &[f64], k: usize) -> Vec<(u32, f64)> {
    let mut ranked: Vec<(u32, f64)> = scores
        .iter()
        .enumerate()
        .map(|(i, &p)| (i as u32, p))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(k);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_is_stable_and_normalised() {
        // exp(1000) overflows f64; shifted by the max it does not.
        let p = softmax(&[1000.0, 999.0, -1000.0]);
        let e = (-1f64).exp();
        assert!((p[0] - 1.0 / (1.0 + e)).abs() < 1e-15);
        assert!((p[1] - e / (1.0 + e)).abs() < 1e-15);
        assert!(p[2] >= 0.0 && p[2] < 1e-300);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    }

    #[test]
    fn top_k_sorts_descending_and_breaks_ties_by_id() {
        let ranked = top_k(&[0.1, 0.3, 0.3, 0.05, 0.25], 3);
        assert_eq!(ranked, vec![(1, 0.3), (2, 0.3), (4, 0.25)]);
        assert_eq!(top_k(&[0.5, 0.5], 10).len(), 2);
    }
}
