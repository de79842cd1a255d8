//! What `bench serve` prints: a table, or one JSON object with `--json`.

use serde::Serialize;

use super::load::Summary;
use super::requests::Route;
use crate::json;
use crate::output::outln;

/// How each run was bounded.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// A fixed count of requests.
    Requests(u64),
    /// A fixed duration, seconds.
    Seconds(f64),
}

/// The figures of one route at one concurrency level.
#[derive(Debug, Serialize)]
pub struct Record {
    /// The route.
    pub route: Route,
    /// Its figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// Everything the benchmark measured, and where.
#[derive(Debug, Serialize)]
pub struct Report {
    target: String,
    url: String,
    cpu: String,
    cores: usize,
    bound: Bound,
    records: Vec<Record>,
}

impl Report {
    /// The report of `records`, measured on `target` at `url`, on this machine.
    pub fn new(target: &str, url: &str, bound: Bound, records: Vec<Record>) -> Report {
        Report {
            target: target.to_owned(),
            url: url.to_owned(),
            cpu: cpu_name(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            bound,
            records,
        }
    }

    /// Prints the table, or the JSON object when `as_json`.
    ///
    /// # Errors
    /// A figure that is not finite (JSON has no NaN).
    pub fn print(&self, as_json: bool) -> anyhow::Result<()> {
        if as_json {
            outln!("{}", json::to_string_pretty(self)?)?;
            return Ok(());
        }
        let bound = match self.bound {
            Bound::Requests(n) => format!("{n} requests per level"),
            Bound::Seconds(s) => format!("{s} s per level"),
        };
        outln!(
            "{} at {} ({}, {} cores; {bound})",
            self.target,
            self.url,
            self.cpu,
            self.cores
        )?;
        outln!(
            "{:<12} {:>7} {:>8} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "route",
            "clients",
            "requests",
            "errors",
            "req/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "tok/s"
        )?;
        for r in &self.records {
            let s = &r.summary;
            let tokens = s.tokens_s.map_or("-".to_owned(), |t| format!("{t:.1}"));
            outln!(
                "{:<12} {:>7} {:>8} {:>6} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8}",
                r.route.path(),
                s.concurrency,
                s.requests,
                s.requests - s.ok,
                s.req_s,
                s.p50_ms,
                s.p95_ms,
                s.p99_ms,
                tokens
            )?;
        }
        for r in &self.records {
            if let Some(short @ 1..) = r.summary.short_answers {
                outln!(
                    "{} x{}: {short} answers generated fewer tokens than --max-tokens",
                    r.route.path(),
                    r.summary.concurrency
                )?;
            }
        }
        for r in self.records.iter().filter(|r| !r.summary.errors.is_empty()) {
            outln!(
                "{} x{}: failures by status (0 = no answer): {}",
                r.route.path(),
                r.summary.concurrency,
                statuses(&r.summary)
            )?;
        }
        Ok(())
    }
}

/// `status xN, ...` of a summary's failures.
fn statuses(s: &Summary) -> String {
    s.errors
        .iter()
        .map(|(status, n)| format!("{status} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line on stderr after each run, so a long benchmark shows where it is.
pub fn progress_line(route: Route, s: &Summary) -> String {
    format!(
        "{} x{}: {} requests, {} ok, {:.1} req/s, p99 {:.2} ms",
        route.path(),
        s.concurrency,
        s.requests,
        s.ok,
        s.req_s,
        s.p99_ms
    )
}

/// The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none).
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}
