//! A fuzzing run: the seeds first, then mutants of a two-part corpus, each run in a worker
//! process. One part holds accepted inputs (the seeds and mutants that still load: they reach
//! deepest), the other inputs whose outcome had not been seen before (a cheap stand-in for
//! coverage: a new error message usually means new code reached). Half the mutants come from
//! each, so that a flood of novel rejections cannot crowd the valid inputs out.

use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::findings::{classify, normalize, Finding, Findings};
use super::supervisor::{Verdict, Worker};
use crate::outcome::Outcome;
use crate::rng::Rng;
use crate::targets::Target;

/// Most inputs kept in each part of the corpus.
const CORPUS_MAX: usize = 256;

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What to fuzz.
    pub target: Target,
    /// Seed of the mutations: the same seed and limit in runs give the same inputs.
    pub seed: u64,
    /// Stop after this many inputs...
    pub runs: Option<u64>,
    /// ... or after this long, whichever comes first.
    pub duration: Option<Duration>,
    /// Time limit of one input, past which it is a hang.
    pub timeout: Duration,
    /// Address-space limit of the worker, in MiB.
    pub mem_mb: u64,
    /// Where findings go (a `TARGET` directory is made in it).
    pub findings: PathBuf,
    /// Stop at the first panic, crash or hang.
    pub stop_on_finding: bool,
}

/// Counts of one run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Inputs run.
    pub executions: u64,
    /// Inputs accepted with finite outputs.
    pub accepted: u64,
    /// Inputs refused with an error.
    pub rejected: u64,
    /// Inputs accepted with non-finite outputs.
    pub non_finite: u64,
    /// Inputs that panicked.
    pub panics: u64,
    /// Inputs that killed the worker.
    pub crashes: u64,
    /// Inputs that timed out.
    pub hangs: u64,
    /// Distinct outcomes seen.
    pub outcomes: usize,
    /// Corpus size at the end.
    pub corpus: usize,
    /// Wall time.
    pub elapsed: Duration,
}

impl Stats {
    /// Executions per second.
    pub fn rate(&self) -> f64 {
        self.executions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The end of a run.
#[derive(Debug)]
pub struct Summary {
    /// Counts.
    pub stats: Stats,
    /// Distinct findings.
    pub findings: Vec<Finding>,
}

impl Summary {
    /// Whether any finding fails the run (panics, crashes, hangs).
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.kind.fails())
    }
}

/// Fuzzes `settings.target` until a limit is reached.
///
/// # Errors
/// When a worker cannot be started or a finding cannot be saved.
pub fn run(settings: &Settings) -> io::Result<Summary> {
    let target = settings.target;
    let mut rng = Rng::new(settings.seed);
    let seeds = target.seeds();
    let mut valid = seeds.clone();
    let mut novel: Vec<Vec<u8>> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut findings = Findings::new(settings.findings.join(target.name()));
    let mut stats = Stats::default();
    let mut worker = Worker::spawn(target, settings.mem_mb)?;
    let start = Instant::now();
    let mut last_report = start;
    loop {
        let done_runs = settings.runs.is_some_and(|n| stats.executions >= n);
        let done_time = settings.duration.is_some_and(|d| start.elapsed() >= d);
        if done_runs || done_time {
            break;
        }
        let input = match seeds.get(stats.executions as usize) {
            Some(seed) => seed.clone(),
            None => {
                let pool = if novel.is_empty() || rng.one_in(2) {
                    &valid
                } else {
                    &novel
                };
                let (a, b) = (rng.below(pool.len()), rng.below(valid.len()));
                target.mutate(&mut rng, &pool[a], &valid[b])
            }
        };
        let verdict = worker.run(&input, settings.timeout);
        stats.executions += 1;
        count(&mut stats, &verdict);
        if matches!(verdict, Verdict::Crash { .. } | Verdict::Hang) {
            worker = Worker::spawn(target, settings.mem_mb)?;
        }
        if let Some((kind, key, detail)) = classify(&verdict) {
            findings.record(kind, key, detail, &input)?;
            if settings.stop_on_finding && kind.fails() {
                break;
            }
        }
        if let Verdict::Outcome(outcome) = &verdict {
            let signature = match outcome {
                Outcome::Rejected(message) => normalize(message),
                other => format!("{other:?}"),
            };
            let new = seen.insert(signature);
            if *outcome == Outcome::Accepted {
                if new || rng.one_in(4) {
                    keep(&mut rng, &mut valid, seeds.len(), input);
                }
            } else if new {
                keep(&mut rng, &mut novel, 0, input);
            }
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "{}: {} execs, {:.0}/s, corpus {}, outcomes {}, findings {}",
                target.name(),
                stats.executions,
                stats.executions as f64 / start.elapsed().as_secs_f64(),
                valid.len() + novel.len(),
                seen.len(),
                findings.all().len()
            );
        }
    }
    let _ = worker.finish();
    stats.elapsed = start.elapsed();
    stats.outcomes = seen.len();
    stats.corpus = valid.len() + novel.len();
    Ok(Summary {
        stats,
        findings: findings.all().into_iter().cloned().collect(),
    })
}

fn count(stats: &mut Stats, verdict: &Verdict) {
    match verdict {
        Verdict::Outcome(Outcome::Accepted) => stats.accepted += 1,
        Verdict::Outcome(Outcome::Rejected(_)) => stats.rejected += 1,
        Verdict::Outcome(Outcome::NonFinite(_)) => stats.non_finite += 1,
        Verdict::Panic(_) => stats.panics += 1,
        Verdict::Crash { .. } => stats.crashes += 1,
        Verdict::Hang => stats.hangs += 1,
    }
}

/// Adds `input` to a part of the corpus, replacing a random entry past the first `seeds`
/// when it is full.
fn keep(rng: &mut Rng, corpus: &mut Vec<Vec<u8>>, seeds: usize, input: Vec<u8>) {
    if corpus.len() < CORPUS_MAX {
        corpus.push(input);
    } else if corpus.len() > seeds {
        let i = seeds + rng.below(corpus.len() - seeds);
        corpus[i] = input;
    }
}

/// Shrinks a finding's input: removes chunks (halving their size down to one byte) as long as
/// the same finding happens, within `max_tries` runs.
///
/// # Errors
/// When a worker cannot be started, or `input` is no finding.
pub fn minimize(settings: &Settings, input: Vec<u8>, max_tries: usize) -> io::Result<Vec<u8>> {
    let mut worker = Worker::spawn(settings.target, settings.mem_mb)?;
    let mut key_of = |data: &[u8]| -> io::Result<Option<String>> {
        let verdict = worker.run(data, settings.timeout);
        if matches!(verdict, Verdict::Crash { .. } | Verdict::Hang) {
            worker = Worker::spawn(settings.target, settings.mem_mb)?;
        }
        Ok(classify(&verdict).map(|(_, key, _)| key))
    };
    let Some(key) = key_of(&input)? else {
        return Err(io::Error::other("this input is no finding"));
    };
    eprintln!("minimizing: {key}");
    let mut best = input;
    let mut tries = 0;
    let mut chunk = best.len() / 2;
    while chunk > 0 && tries < max_tries {
        let mut at = 0;
        while at < best.len() && tries < max_tries {
            let end = (at + chunk).min(best.len());
            let candidate = [&best[..at], &best[end..]].concat();
            tries += 1;
            if key_of(&candidate)?.as_ref() == Some(&key) {
                best = candidate;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    eprintln!("minimized to {} bytes in {tries} runs", best.len());
    Ok(best)
}
