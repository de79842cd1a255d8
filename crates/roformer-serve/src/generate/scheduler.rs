//! Continuous batching of completions, on a thread of its own. Each step is one forward pass
//! ([`llama::Llama::forward_ragged`]) over every running completion: one token for each that
//! decodes, and a prompt chunk for those that prefill, at most `--max-prefill-tokens` prompt
//! tokens a step (the first chunk always runs), so a long prompt does not stall the others.
//!
//! Between steps, completions whose clients went away (or whose requests timed out) leave,
//! and waiting ones join, first come first served, while the cache positions they reserve
//! (prompt and `max_tokens`) fit in `--max-cached-tokens`: the cache memory is bounded by
//! `max_cached_tokens * layers * 2 * kv_heads * head_dim * 4` bytes, and a running completion
//! never runs out of cache.
//!
//! A step that fails (a NaN, a panic) is run again one completion at a time, so only the
//! completion that fails alone is answered with the error (a failed step moves no cache on).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use candle_core::Tensor;
use llama::Chunk;

use super::job::{Admitted, Event, GenerationLimits};
use super::model::LlamaModel;
use super::sequence::{Next, Sequence};
use crate::metrics::Metrics;

/// The scheduler's state: the jobs arriving, those waiting, those running.
#[derive(Debug)]
pub struct Scheduler {
    model: Arc<LlamaModel>,
    metrics: Arc<Metrics>,
    limits: GenerationLimits,
    pause: Duration,
    inbox: Receiver<Admitted>,
    waiting: VecDeque<Admitted>,
    running: Vec<Sequence>,
    /// Cache positions the running completions reserve.
    reserved: usize,
}

impl Scheduler {
    /// A scheduler for `model` taking jobs from `inbox`; `pause` follows each step.
    pub fn new(
        model: Arc<LlamaModel>,
        metrics: Arc<Metrics>,
        limits: GenerationLimits,
        pause: Duration,
        inbox: Receiver<Admitted>,
    ) -> Scheduler {
        Scheduler {
            model,
            metrics,
            limits,
            pause,
            inbox,
            waiting: VecDeque::new(),
            running: Vec::new(),
            reserved: 0,
        }
    }

    /// Runs steps until every sender of the inbox is gone and nothing is left to run.
    pub fn run(mut self) {
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                // Idle: sleep until a job arrives.
                match self.inbox.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = self.inbox.try_recv() {
                self.waiting.push_back(job);
            }
            self.drop_gone();
            self.admit();
            if self.running.is_empty() {
                continue;
            }
            self.step();
            if !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
        }
    }

    /// Ends the completions, running or waiting, whose clients went away.
    fn drop_gone(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|a| !a.tx.is_closed());
        for _ in self.waiting.len()..before {
            self.metrics.generation_ended("cancelled");
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].is_gone() {
                self.end(i, None);
            } else {
                i += 1;
            }
        }
    }

    /// Starts waiting completions, in order, while their caches fit.
    fn admit(&mut self) {
        while let Some(next) = self.waiting.front() {
            let needed = next.job.cached_tokens();
            if self.reserved + needed > self.limits.max_cached_tokens {
                break;
            }
            if let Some(admitted) = self.waiting.pop_front() {
                self.reserved += needed;
                self.running
                    .push(Sequence::new(admitted, self.model.model()));
            }
        }
    }

    /// The running completions of the next step, in order: every decoding one, and the
    /// prefilling ones whose chunks fit in `--max-prefill-tokens` (the first always).
    fn plan(&self) -> Vec<usize> {
        let chunk = self.limits.max_prefill_tokens;
        let mut prefill = 0;
        let mut chosen = Vec::with_capacity(self.running.len());
        for (i, seq) in self.running.iter().enumerate() {
            if seq.is_prefilling() {
                let n = seq.step_len(chunk);
                if prefill > 0 && prefill + n > chunk {
                    continue;
                }
                prefill += n;
            }
            chosen.push(i);
        }
        chosen
    }

    /// One step: one pass over the planned completions, then each takes its logits.
    fn step(&mut self) {
        let chunk = self.limits.max_prefill_tokens;
        let plan = self.plan();
        self.metrics.generation_step(plan.len());
        let results = match self.pass(&plan) {
            Ok(rows) => self.deal(&plan, rows),
            // Once more one by one: only a completion that fails alone fails.
            Err(_) => plan
                .iter()
                .map(|&i| match self.pass(&[i]) {
                    Ok(rows) => self.deal(&[i], rows).remove(0),
                    Err(e) => Err(e),
                })
                .collect(),
        };
        let model = self.model.clone();
        let metrics = self.metrics.clone();
        let mut ended = Vec::new();
        for (&i, result) in plan.iter().zip(results) {
            let seq = &mut self.running[i];
            let next = match result {
                Ok(None) => {
                    seq.ran(chunk);
                    Next::Running
                }
                Ok(Some(z)) => {
                    seq.ran(chunk);
                    seq.take(&z, &model, || metrics.generated_token())
                }
                Err(e) => seq.fail(&e),
            };
            if let Next::Ended(event) = next {
                ended.push((i, event));
            }
        }
        // From the last, so the indices of the others stay put.
        for (i, event) in ended.into_iter().rev() {
            self.end(i, event);
        }
    }

    /// The logits rows of a pass over the completions at `indices`, handed to each: `None`
    /// for one whose step is a prompt chunk before the last.
    fn deal(
        &self,
        indices: &[usize],
        rows: Vec<Vec<f32>>,
    ) -> Vec<Result<Option<Vec<f32>>, String>> {
        let chunk = self.limits.max_prefill_tokens;
        let mut rows = rows.into_iter();
        indices
            .iter()
            .map(|&i| {
                if self.running[i].wants_logits(chunk) {
                    rows.next().map(Some).ok_or_else(missing)
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    /// One forward pass over the running completions at `indices`: the logits rows of those
    /// that ask for them, in order; a panic is an error.
    fn pass(&mut self, indices: &[usize]) -> Result<Vec<Vec<f32>>, String> {
        let chunk = self.limits.max_prefill_tokens;
        let model = self.model.clone();
        let mut chunks: Vec<Chunk<'_>> = Vec::with_capacity(indices.len());
        let mut picked = indices.iter().copied().peekable();
        for (i, seq) in self.running.iter_mut().enumerate() {
            if picked.peek() == Some(&i) {
                picked.next();
                chunks.push(seq.chunk(chunk));
            }
        }
        let run = || -> llama::Result<Vec<Vec<f32>>> {
            let logits: Tensor = model.model().forward_ragged(&mut chunks)?;
            Ok(logits.to_vec2::<f32>()?)
        };
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("the model panicked on this prompt (a bug: please report it)".into()),
        }
    }

    /// Ends the running completion `i`: sends its last event, frees its cache and place.
    fn end(&mut self, i: usize, event: Option<Event>) {
        let seq = self.running.remove(i);
        let outcome = match &event {
            Some(Event::Done { finish, .. }) => finish.reason(),
            Some(_) => "error",
            None => "cancelled",
        };
        self.metrics.generation_ended(outcome);
        self.reserved -= seq.reserved();
        seq.end(event);
    }
}

/// A pass that returned fewer rows of logits than asked: a bug.
fn missing() -> String {
    "the model returned no logits for this completion (a bug: please report it)".into()
}
