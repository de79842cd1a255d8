//! Round-robin timing of several implementations of one operation.
//!
//! Every round calls each implementation once (or a calibrated batch of calls, for calls too
//! short to time alone), so slow phases of a shared machine hit all implementations alike. The
//! figure reported is the median time per call over rounds.

use std::time::{Duration, Instant};

/// How long to time one comparison.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Untimed calls per implementation before timing.
    pub warmup: usize,
    /// Fewest timed rounds.
    pub min_rounds: usize,
    /// Most timed rounds.
    pub max_rounds: usize,
    /// Rounds continue (past `min_rounds`) until this much time has been spent timing.
    pub seconds: f64,
    /// A timed sample repeats a call until it lasts about this long (short calls only).
    pub sample: Duration,
}

/// Per-call times of one implementation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Median seconds per call.
    pub median: f64,
    /// 10th percentile of the per-sample seconds per call.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Timed samples.
    pub samples: usize,
    /// Calls per sample.
    pub calls_per_sample: usize,
}

impl Stats {
    /// The statistics of per-call times `seconds`, each sample being `calls_per_sample` calls.
    pub fn from_samples(mut seconds: Vec<f64>, calls_per_sample: usize) -> Stats {
        seconds.sort_by(f64::total_cmp);
        let n = seconds.len();
        let at = |q: f64| seconds[((q * (n - 1) as f64).round() as usize).min(n - 1)];
        let median = if n % 2 == 1 {
            seconds[n / 2]
        } else {
            0.5 * (seconds[n / 2 - 1] + seconds[n / 2])
        };
        Stats {
            median,
            p10: at(0.1),
            p90: at(0.9),
            samples: n,
            calls_per_sample,
        }
    }
}

/// The median of `values` (not empty), as [`Stats::from_samples`] computes it.
pub fn median(values: &[f64]) -> f64 {
    Stats::from_samples(values.to_vec(), 1).median
}

/// Times `n` implementations round-robin; `call(i)` runs implementation `i` once.
///
/// # Errors
/// The first error a call returns.
pub fn round_robin<E>(
    n: usize,
    budget: &Budget,
    mut call: impl FnMut(usize) -> Result<(), E>,
) -> Result<Vec<Stats>, E> {
    // Warm up, and size each sample from the last warm-up call.
    let mut batch = vec![1usize; n];
    for (i, calls) in batch.iter_mut().enumerate() {
        let mut last = Duration::ZERO;
        for _ in 0..budget.warmup.max(1) {
            let t0 = Instant::now();
            call(i)?;
            last = t0.elapsed();
        }
        let per_call = last.as_secs_f64().max(1e-9);
        *calls = ((budget.sample.as_secs_f64() / per_call).ceil() as usize).clamp(1, 100_000);
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    let start = Instant::now();
    for round in 0..budget.max_rounds.max(1) {
        for (i, times) in samples.iter_mut().enumerate() {
            let t0 = Instant::now();
            for _ in 0..batch[i] {
                call(i)?;
            }
            times.push(t0.elapsed().as_secs_f64() / batch[i] as f64);
        }
        if round + 1 >= budget.min_rounds && start.elapsed().as_secs_f64() >= budget.seconds {
            break;
        }
    }
    Ok(samples
        .into_iter()
        .zip(batch)
        .map(|(s, calls)| Stats::from_samples(s, calls))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles_of_known_samples() {
        let s = Stats::from_samples(vec![5.0, 1.0, 3.0, 2.0, 4.0], 1);
        assert_eq!((s.median, s.p10, s.p90, s.samples), (3.0, 1.0, 5.0, 5));
        let s = Stats::from_samples(vec![4.0, 1.0, 3.0, 2.0], 1);
        assert_eq!(s.median, 2.5);
    }

    #[test]
    fn every_implementation_is_called_in_every_round() {
        let budget = Budget {
            warmup: 2,
            min_rounds: 3,
            max_rounds: 3,
            seconds: 0.0,
            sample: Duration::ZERO,
        };
        let mut calls = [0usize; 3];
        let stats = round_robin(3, &budget, |i| {
            calls[i] += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(calls, [5, 5, 5]);
        assert!(stats
            .iter()
            .all(|s| s.samples == 3 && s.calls_per_sample == 1));
    }
}
