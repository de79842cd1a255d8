//! Prometheus metrics, kept by hand (no global registry, so several servers can run in one
//! process, as the tests do): request counts by route and status, latency, batch sizes and
//! tokens, the queue. Names follow TEI's where it has one (`te_request_count`,
//! `te_request_duration`, `te_batch_next_size`, `te_queue_size`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A histogram with fixed upper bounds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const SIZES: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];
const TOKENS: &[f64] = &[16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0];

/// The server's counters and histograms.
#[derive(Debug)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    durations: Mutex<BTreeMap<String, Histogram>>,
    batch_sizes: Mutex<Histogram>,
    batch_tokens: Mutex<Histogram>,
    inference: Mutex<Histogram>,
    tokens_total: AtomicU64,
    inputs_total: AtomicU64,
    generated_tokens: AtomicU64,
    generations: Mutex<BTreeMap<&'static str, u64>>,
    generation_steps: Mutex<Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::default(),
            durations: Mutex::default(),
            batch_sizes: Mutex::new(Histogram::new(SIZES)),
            batch_tokens: Mutex::new(Histogram::new(TOKENS)),
            inference: Mutex::new(Histogram::new(SECONDS)),
            tokens_total: AtomicU64::new(0),
            inputs_total: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            generations: Mutex::default(),
            generation_steps: Mutex::new(Histogram::new(SIZES)),
        }
    }
}

/// Locks `m`, taking the data of a poisoned lock (a counter is still a counter).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Metrics {
    /// Counts one answered request of `route` with `status`, its latency, inputs and tokens.
    pub fn request(&self, route: &str, status: u16, latency: Duration, inputs: u64, tokens: u64) {
        *lock(&self.requests)
            .entry((route.to_owned(), status))
            .or_insert(0) += 1;
        lock(&self.durations)
            .entry(route.to_owned())
            .or_insert_with(|| Histogram::new(SECONDS))
            .observe(latency.as_secs_f64());
        self.inputs_total.fetch_add(inputs, Ordering::Relaxed);
        self.tokens_total.fetch_add(tokens, Ordering::Relaxed);
    }

    /// Records one forward pass of the batcher: `inputs` texts, `tokens` tokens, `took`.
    pub fn batch(&self, inputs: usize, tokens: usize, took: Duration) {
        lock(&self.batch_sizes).observe(inputs as f64);
        lock(&self.batch_tokens).observe(tokens as f64);
        lock(&self.inference).observe(took.as_secs_f64());
    }

    /// Counts one token decoded by the GGUF model (`--gguf`).
    pub fn generated_token(&self) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one generation ended with `outcome` (`stop`, `length`, `cancelled`: the client
    /// went away, or `error`).
    pub fn generation_ended(&self, outcome: &'static str) {
        *lock(&self.generations).entry(outcome).or_insert(0) += 1;
    }

    /// Records one decoding step of the GGUF model over `sequences` running completions.
    pub fn generation_step(&self, sequences: usize) {
        lock(&self.generation_steps).observe(sequences as f64);
    }

    /// Tokens decoded by the GGUF model so far.
    pub fn generated_tokens(&self) -> u64 {
        self.generated_tokens.load(Ordering::Relaxed)
    }

    /// The metrics in Prometheus' text format; `queue` is the count of admitted requests,
    /// `generations` the completions waiting or running (with `--gguf`).
    pub fn render(&self, queue: usize, generations: Option<usize>) -> String {
        let mut out = String::new();
        out.push_str("# TYPE te_request_count counter\n");
        for ((route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "te_request_count{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# TYPE te_request_duration histogram\n");
        for (route, h) in lock(&self.durations).iter() {
            h.render(
                &mut out,
                "te_request_duration",
                &format!("route=\"{route}\""),
            );
        }
        out.push_str("# TYPE te_queue_size gauge\n");
        let _ = writeln!(out, "te_queue_size {queue}");
        out.push_str("# TYPE te_batch_next_size histogram\n");
        lock(&self.batch_sizes).render(&mut out, "te_batch_next_size", "");
        out.push_str("# TYPE te_batch_next_tokens histogram\n");
        lock(&self.batch_tokens).render(&mut out, "te_batch_next_tokens", "");
        out.push_str("# TYPE te_batch_inference_duration histogram\n");
        lock(&self.inference).render(&mut out, "te_batch_inference_duration", "");
        out.push_str("# TYPE te_request_inputs_total counter\n");
        let _ = writeln!(
            out,
            "te_request_inputs_total {}",
            self.inputs_total.load(Ordering::Relaxed)
        );
        out.push_str("# TYPE te_request_tokens_total counter\n");
        let _ = writeln!(
            out,
            "te_request_tokens_total {}",
            self.tokens_total.load(Ordering::Relaxed)
        );
        out.push_str("# TYPE te_generation_tokens_total counter\n");
        let _ = writeln!(
            out,
            "te_generation_tokens_total {}",
            self.generated_tokens()
        );
        if let Some(n) = generations {
            out.push_str("# TYPE te_generation_queue_size gauge\n");
            let _ = writeln!(out, "te_generation_queue_size {n}");
        }
        out.push_str("# TYPE te_generation_step_size histogram\n");
        lock(&self.generation_steps).render(&mut out, "te_generation_step_size", "");
        out.push_str("# TYPE te_generation_count counter\n");
        for (outcome, n) in lock(&self.generations).iter() {
            let _ = writeln!(out, "te_generation_count{{finish=\"{outcome}\"}} {n}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request("/embed", 200, Duration::from_millis(3), 2, 10);
        m.request("/embed", 200, Duration::from_millis(30), 1, 5);
        m.request("/embed", 422, Duration::from_millis(1), 0, 0);
        m.batch(3, 15, Duration::from_millis(2));
        let text = m.render(4, None);
        assert!(!text.contains("te_generation_queue_size"));
        assert!(text.contains("te_request_count{route=\"/embed\",status=\"200\"} 2"));
        assert!(text.contains("te_request_count{route=\"/embed\",status=\"422\"} 1"));
        assert!(text.contains("te_request_duration_bucket{route=\"/embed\",le=\"0.005\"} 2"));
        assert!(text.contains("te_request_duration_count{route=\"/embed\"} 3"));
        assert!(text.contains("te_queue_size 4"));
        assert!(text.contains("te_batch_next_size_bucket{le=\"4\"} 1"));
        assert!(text.contains("te_request_tokens_total 15"));
        m.generated_token();
        m.generated_token();
        m.generation_ended("cancelled");
        let text = m.render(0, Some(1));
        assert!(text.contains("te_generation_queue_size 1"));
        assert!(text.contains("te_generation_tokens_total 2"));
        assert!(text.contains("te_generation_count{finish=\"cancelled\"} 1"));
    }
}
