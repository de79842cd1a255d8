//! The load generator: `concurrency` threads, each sending one request at a time over a shared
//! HTTP/1.1 keep-alive client, until a fixed count of requests has been started or a deadline
//! has passed (then the requests in flight finish; each is bounded by the client's timeout).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde::Serialize;

/// When a run stops starting requests.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After this many requests, across all threads.
    Requests(u64),
    /// At this instant.
    Until(Instant),
}

/// One request to send: where, the JSON body, and how to count what it produced.
pub trait Workload: Sync {
    /// The URL to POST to.
    fn url(&self) -> &str;
    /// The JSON body of request number `i`.
    fn body(&self, i: u64) -> String;
    /// Tokens each answer is asked to generate, for a route that generates (then tokens/s is
    /// reported, and the answers that fell short are counted); `None` for the others.
    fn wanted_tokens(&self) -> Option<u64>;
    /// The tokens a successful answer reports.
    fn tokens(&self, answer: &[u8]) -> Tokens;
}

/// Token counts of one answer, as the server reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Tokens of the prompt.
    pub prompt: u64,
    /// Tokens generated.
    pub completion: u64,
}

/// What one request gave.
#[derive(Debug, Clone, Copy)]
struct Sample {
    latency: Duration,
    /// The HTTP status; 0 when no answer came (connection error or client timeout).
    status: u16,
    tokens: Tokens,
}

/// The figures of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Concurrent clients.
    pub concurrency: u32,
    /// Requests sent.
    pub requests: u64,
    /// Requests answered with a 2xx status.
    pub ok: u64,
    /// The other answers by status ("0": no answer: a connection error or the client timeout).
    pub errors: BTreeMap<String, u64>,
    /// Wall seconds from the first request to the last answer.
    pub seconds: f64,
    /// Successful requests per second of wall time.
    pub req_s: f64,
    /// Median latency of the successful requests, milliseconds (0 when none succeeded).
    pub p50_ms: f64,
    /// 95th percentile latency, milliseconds.
    pub p95_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Generated tokens per second of wall time: `completion_tokens / seconds` (completions
    /// only, as are the three counts below).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_s: Option<f64>,
    /// Prompt tokens of the successful answers, as the server counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Generated tokens of the successful answers, as the server counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Successful answers with fewer generated tokens than asked for (0 when every answer
    /// generated exactly the length asked, as a fair comparison needs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_answers: Option<u64>,
}

/// Runs `work` from `concurrency` threads until `stop`.
pub fn run(
    client: &Client,
    work: &dyn Workload,
    concurrency: u32,
    stop: Stop,
    api_key: Option<&str>,
) -> Summary {
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let samples: Vec<Sample> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| scope.spawn(|| worker(client, work, &next, stop, api_key)))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    summarize(concurrency, &samples, start.elapsed(), work.wanted_tokens())
}

/// One client thread: takes request numbers until `stop`, sends each, records the outcome.
fn worker(
    client: &Client,
    work: &dyn Workload,
    next: &AtomicU64,
    stop: Stop,
    api_key: Option<&str>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        match stop {
            Stop::Requests(n) if i >= n => break,
            Stop::Until(t) if Instant::now() >= t => break,
            _ => {}
        }
        let mut request = client
            .post(work.url())
            .header("content-type", "application/json")
            .body(work.body(i));
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        let t0 = Instant::now();
        let (status, tokens) = match request.send() {
            Ok(response) => {
                let status = response.status();
                // The body is read in full: the latency is that of the whole answer.
                let body = response.bytes().unwrap_or_default();
                let tokens = if status.is_success() && work.wanted_tokens().is_some() {
                    work.tokens(&body)
                } else {
                    Tokens::default()
                };
                (status.as_u16(), tokens)
            }
            Err(_) => (0, Tokens::default()),
        };
        out.push(Sample {
            latency: t0.elapsed(),
            status,
            tokens,
        });
    }
    out
}

/// The figures of `samples`, gathered over `wall`; `wanted` is the length each answer was
/// asked to generate, for a generating route.
fn summarize(concurrency: u32, samples: &[Sample], wall: Duration, wanted: Option<u64>) -> Summary {
    let mut latencies: Vec<f64> = Vec::new();
    let mut errors = BTreeMap::new();
    let mut total = Tokens::default();
    let mut short = 0;
    for s in samples {
        if (200..300).contains(&s.status) {
            latencies.push(s.latency.as_secs_f64() * 1e3);
            total.prompt += s.tokens.prompt;
            total.completion += s.tokens.completion;
            short += u64::from(wanted.is_some_and(|n| s.tokens.completion < n));
        } else {
            *errors.entry(s.status.to_string()).or_insert(0) += 1;
        }
    }
    let generates = wanted.is_some();
    latencies.sort_by(f64::total_cmp);
    let seconds = wall.as_secs_f64().max(1e-9);
    Summary {
        concurrency,
        requests: samples.len() as u64,
        ok: latencies.len() as u64,
        errors,
        seconds,
        req_s: latencies.len() as f64 / seconds,
        p50_ms: percentile(&latencies, 0.50),
        p95_ms: percentile(&latencies, 0.95),
        p99_ms: percentile(&latencies, 0.99),
        tokens_s: generates.then(|| total.completion as f64 / seconds),
        prompt_tokens: generates.then_some(total.prompt),
        completion_tokens: generates.then_some(total.completion),
        short_answers: generates.then_some(short),
    }
}

/// The `q` quantile of the sorted `values` by the nearest-rank method (the smallest value with
/// at least a fraction `q` of the values at or below it); 0 for no values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.95), 95.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.0), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    /// A keep-alive HTTP/1.1 stub: answers 422 to bodies containing "bad", 200 otherwise.
    fn stub() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || serve_connection(stream));
            }
        });
        url
    }

    fn serve_connection(stream: std::net::TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            let mut length = 0;
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            while {
                line.clear();
                reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n"
            } {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body = String::from_utf8_lossy(&body);
            let (status, answer) = if body.contains("bad") {
                ("422 Unprocessable Entity", "{}")
            } else if body.contains("short") {
                (
                    "200 OK",
                    r#"{"usage":{"prompt_tokens":2,"completion_tokens":1}}"#,
                )
            } else {
                (
                    "200 OK",
                    r#"{"usage":{"prompt_tokens":2,"completion_tokens":3}}"#,
                )
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n",
                answer.len()
            );
            if out.write_all(head.as_bytes()).is_err() || out.write_all(answer.as_bytes()).is_err()
            {
                return;
            }
        }
    }

    /// Every fifth request is refused (422); of the others, every tenth generates 1 token of
    /// the 3 asked, the rest 3; each prompt is 2 tokens.
    struct EveryFifthBad(String);

    impl Workload for EveryFifthBad {
        fn url(&self) -> &str {
            &self.0
        }
        fn body(&self, i: u64) -> String {
            match (i % 5, i % 10) {
                (4, _) => "bad",
                (_, 0) => "short",
                _ => "good",
            }
            .to_owned()
        }
        fn wanted_tokens(&self) -> Option<u64> {
            Some(3)
        }
        fn tokens(&self, answer: &[u8]) -> Tokens {
            let v: serde_json::Value = serde_json::from_slice(answer).unwrap();
            Tokens {
                prompt: v["usage"]["prompt_tokens"].as_u64().unwrap(),
                completion: v["usage"]["completion_tokens"].as_u64().unwrap(),
            }
        }
    }

    #[test]
    fn a_fixed_count_is_sent_and_every_answer_counted() {
        let work = EveryFifthBad(stub());
        let client = Client::new();
        let s = run(&client, &work, 4, Stop::Requests(50), None);
        assert_eq!((s.concurrency, s.requests, s.ok), (4, 50, 40));
        assert_eq!(s.errors, BTreeMap::from([("422".to_owned(), 10)]));
        assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p95_ms && s.p95_ms <= s.p99_ms);
        assert!(s.req_s > 0.0);
        // 40 answers: 5 short ones of 1 token, 35 of 3.
        assert_eq!(s.short_answers, Some(5));
        assert_eq!(s.completion_tokens, Some(5 + 35 * 3));
        assert_eq!(s.prompt_tokens, Some(40 * 2));
        assert_eq!(s.tokens_s, Some(110.0 / s.seconds));
    }

    #[test]
    fn a_duration_run_stops_at_its_deadline() {
        let work = EveryFifthBad(stub());
        let client = Client::new();
        let until = Instant::now() + Duration::from_millis(200);
        let s = run(&client, &work, 2, Stop::Until(until), None);
        assert!(s.requests > 0);
        // Stops starting requests at the deadline; the last ones take well under a second.
        assert!(s.seconds < 1.2, "{s:?}");
    }

    #[test]
    fn no_server_counts_as_status_zero() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        drop(listener);
        let work = EveryFifthBad(url);
        let s = run(&Client::new(), &work, 1, Stop::Requests(3), None);
        assert_eq!((s.requests, s.ok), (3, 0));
        assert_eq!(s.errors, BTreeMap::from([("0".to_owned(), 3)]));
        assert_eq!(s.p99_ms, 0.0);
    }
}
