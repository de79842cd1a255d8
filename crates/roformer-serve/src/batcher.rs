//! Dynamic batching: admitted requests queue here, and one thread runs the model on them, one
//! batch at a time (the forward pass spreads over every core through rayon), and answers each
//! request on its own channel.
//!
//! Batches form as in TEI's continuous batching: when the model is free, the oldest request
//! runs at once, with every request already queued behind it (up to `--max-batch-tokens`
//! tokens); while it runs, new arrivals gather in the queue and make up the next batch. So a
//! person alone waits for no one, and under load the batches grow by themselves. With
//! `--max-wait-ms` above 0 (an opt-in; default 0) the batcher also waits that long after a
//! batch's first request for more to arrive, which trades latency for fewer, larger passes.
//!
//! A text's result does not depend on what it is batched with: the batch is padded and the
//! attention mask hides the padding (see `tests/batching.rs` for the measured difference). When
//! a batched pass fails (a text whose outputs are not finite), each request of it runs again
//! alone, so that one bad text fails only its own request.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roformer::pipeline::{self, MaskCandidates, Pooling};
use roformer::Encoding;
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// What to compute for a request's texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// One vector per text.
    Embed {
        /// How token states become one vector.
        pooling: Pooling,
        /// L2-normalise.
        normalize: bool,
    },
    /// The candidates of every mask (the model must be a masked LM).
    FillMask {
        /// Candidates per mask.
        top_k: usize,
    },
    /// The classifier's logits (the model must be a classifier).
    Classify,
    /// The last hidden state of every token of each text.
    TokenStates,
    /// The SPLADE vector of each text (the model must be a masked LM).
    Sparse,
}

impl Task {
    /// Requests that can share one forward pass share a key (fill-mask requests of any
    /// `top_k`: each keeps its own prefix of the candidates).
    fn key(self) -> Task {
        match self {
            Task::FillMask { .. } => Task::FillMask { top_k: 0 },
            other => other,
        }
    }
}

/// The answer for a request's texts, in their order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Vectors ([`Task::Embed`]).
    Vectors(Vec<Vec<f32>>),
    /// Per text, per mask, the candidates ([`Task::FillMask`]).
    Masks(Vec<Vec<MaskCandidates>>),
    /// Per text, the logits ([`Task::Classify`]).
    Logits(Vec<Vec<f32>>),
    /// Per text, per token, the hidden state ([`Task::TokenStates`]).
    TokenStates(Vec<Vec<Vec<f32>>>),
    /// Per text, the `(vocabulary id, weight)` of its non-zero SPLADE weights, by id
    /// ([`Task::Sparse`]).
    Sparse(Vec<Vec<(u32, f32)>>),
}

/// One queued request.
struct Item {
    task: Task,
    encodings: Vec<Encoding>,
    reply: oneshot::Sender<Result<Output, ApiError>>,
}

impl Item {
    fn tokens(&self) -> usize {
        self.encodings.iter().map(Encoding::len).sum()
    }
}

/// Where handlers queue work; cheap to clone. The batcher thread ends when every clone is
/// dropped and the queue is empty.
#[derive(Debug, Clone)]
pub struct Batcher {
    queue: Sender<Item>,
}

/// How the batcher forms batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Most tokens per batch (a larger single request runs alone).
    pub max_tokens: usize,
    /// How long to wait for more requests after a batch's first when the queue is empty
    /// (zero: run at once with whatever is queued).
    pub max_wait: Duration,
}

impl Batcher {
    /// Starts the batcher thread.
    pub fn start(backend: Arc<Backend>, metrics: Arc<Metrics>, limits: BatchLimits) -> Batcher {
        let (queue, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("roformer-batcher".into())
            .spawn(move || run(&rx, &backend, &metrics, limits))
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("error: cannot start the batcher thread: {e}"));
        Batcher { queue }
    }

    /// Queues `encodings` for `task` and waits for the answer.
    ///
    /// # Errors
    /// The model's failure on these texts, or [`ApiError::Backend`] when the batcher is gone.
    pub async fn submit(&self, task: Task, encodings: Vec<Encoding>) -> Result<Output, ApiError> {
        let (reply, answer) = oneshot::channel();
        let gone = || ApiError::Backend("the batcher has stopped".into());
        self.queue
            .send(Item {
                task,
                encodings,
                reply,
            })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// The batcher loop: take the oldest request, gather what else is queued, run, repeat until
/// the queue closes.
fn run(rx: &Receiver<Item>, backend: &Backend, metrics: &Metrics, limits: BatchLimits) {
    let mut carried: Option<Item> = None;
    loop {
        let first = match carried.take() {
            Some(item) => item,
            None => match rx.recv() {
                Ok(item) => item,
                Err(_) => return,
            },
        };
        let (batch, next) = gather(rx, first, limits);
        carried = next;
        run_batch(batch, backend, metrics);
    }
}

/// The batch that starts with `first`: every request already queued, then (only with
/// `max_wait` above 0) those arriving within `max_wait` of now, until the token budget is
/// reached. The request that would overflow the budget is returned to start the next batch (a
/// request larger than the budget runs alone).
fn gather(rx: &Receiver<Item>, first: Item, limits: BatchLimits) -> (Vec<Item>, Option<Item>) {
    let deadline = Instant::now() + limits.max_wait;
    let mut tokens = first.tokens();
    let mut batch = vec![first];
    while tokens < limits.max_tokens {
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match rx.recv_timeout(left) {
                    Ok(item) => item,
                    Err(_) => break,
                }
            }
        };
        if tokens + item.tokens() > limits.max_tokens {
            return (batch, Some(item));
        }
        tokens += item.tokens();
        batch.push(item);
    }
    (batch, None)
}

/// Runs a batch: one pass per task key, then answers every item.
fn run_batch(batch: Vec<Item>, backend: &Backend, metrics: &Metrics) {
    let mut groups: Vec<(Task, Vec<Item>)> = Vec::new();
    for item in batch {
        let key = item.task.key();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, items)) => items.push(item),
            None => groups.push((key, vec![item])),
        }
    }
    for (key, items) in groups {
        let started = Instant::now();
        let texts: usize = items.iter().map(|i| i.encodings.len()).sum();
        let tokens: usize = items.iter().map(Item::tokens).sum();
        let all: Vec<&Encoding> = items.iter().flat_map(|i| &i.encodings).collect();
        let outputs = compute(backend, key, &all);
        metrics.batch(texts, tokens, started.elapsed());
        match outputs {
            Ok(outputs) => answer(items, outputs),
            Err(_) if items.len() > 1 => {
                for item in items {
                    let refs: Vec<&Encoding> = item.encodings.iter().collect();
                    let result = compute(backend, key, &refs);
                    let _ = item
                        .reply
                        .send(result.map(|o| split(o, &[item.encodings.len()]).remove(0)));
                }
            }
            Err(e) => {
                for item in items {
                    let _ = item.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Splits the batch's outputs back to its items, keeping each item's own `top_k`.
fn answer(items: Vec<Item>, outputs: Output) {
    let sizes: Vec<usize> = items.iter().map(|i| i.encodings.len()).collect();
    for (item, mut output) in items.into_iter().zip(split(outputs, &sizes)) {
        if let (Task::FillMask { top_k }, Output::Masks(texts)) = (item.task, &mut output) {
            for mask in texts.iter_mut().flatten() {
                mask.candidates.truncate(top_k);
            }
        }
        let _ = item.reply.send(Ok(output));
    }
}

/// `output` cut into consecutive parts of `sizes` texts.
fn split(output: Output, sizes: &[usize]) -> Vec<Output> {
    fn parts<T>(all: Vec<T>, sizes: &[usize]) -> Vec<Vec<T>> {
        let mut all = all.into_iter();
        sizes
            .iter()
            .map(|&n| all.by_ref().take(n).collect())
            .collect()
    }
    match output {
        Output::Vectors(v) => parts(v, sizes).into_iter().map(Output::Vectors).collect(),
        Output::Masks(v) => parts(v, sizes).into_iter().map(Output::Masks).collect(),
        Output::Logits(v) => parts(v, sizes).into_iter().map(Output::Logits).collect(),
        Output::TokenStates(v) => parts(v, sizes)
            .into_iter()
            .map(Output::TokenStates)
            .collect(),
        Output::Sparse(v) => parts(v, sizes).into_iter().map(Output::Sparse).collect(),
    }
}

/// The most candidates a fill-mask request may ask for (so one pass serves every request).
pub const MAX_TOP_K: usize = 100;

/// Runs the pipeline of `key` on `batch`; a panic in the model is an error, not a dead
/// batcher.
fn compute(backend: &Backend, key: Task, batch: &[&Encoding]) -> Result<Output, ApiError> {
    let run = || -> Result<Output, ApiError> {
        let pad = backend.pad_id();
        let failed = |e: pipeline::PipelineError| ApiError::Backend(e.to_string());
        match key {
            Task::Embed { pooling, normalize } => {
                let vectors = pipeline::embed(backend.encoder(), batch, pooling, normalize, pad)
                    .map_err(failed)?;
                let vectors = vectors
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| v.map_err(|bad| non_finite(i, bad)))
                    .collect::<Result<_, _>>()?;
                Ok(Output::Vectors(vectors))
            }
            Task::FillMask { .. } => {
                let model = backend
                    .masked_lm()
                    .ok_or_else(|| ApiError::NotFound("the model has no masked-LM head".into()))?;
                let mask = backend.tokenizer.special_tokens().mask.unwrap_or(u32::MAX);
                let masks =
                    pipeline::fill_mask(model, batch, mask, pad, MAX_TOP_K).map_err(failed)?;
                Ok(Output::Masks(masks))
            }
            Task::Classify => {
                let model = backend
                    .classifier()
                    .ok_or_else(|| ApiError::NotFound("the model is not a classifier".into()))?;
                Ok(Output::Logits(
                    pipeline::classify(model, batch, pad).map_err(failed)?,
                ))
            }
            Task::TokenStates => Ok(Output::TokenStates(
                pipeline::token_states(backend.encoder(), batch, pad).map_err(failed)?,
            )),
            Task::Sparse => {
                let model = backend
                    .masked_lm()
                    .ok_or_else(|| ApiError::NotFound("the model has no masked-LM head".into()))?;
                Ok(Output::Sparse(
                    pipeline::splade(model, batch, pad).map_err(failed)?,
                ))
            }
        }
    };
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
        Err(ApiError::Backend(
            "the model panicked on this batch (a bug: please report it)".into(),
        ))
    })
}

/// The error for text `i` whose hidden states are not finite.
fn non_finite(i: usize, bad: pipeline::NonFinite) -> ApiError {
    ApiError::Backend(format!(
        "the model's output for text {i} is not finite ({} at token {}, dimension {}): the \
         checkpoint's weights overflow f32 on this text",
        bad.value, bad.token, bad.dim
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued request of `tokens` tokens, and the end where its answer would arrive.
    fn item(tokens: usize) -> (Item, oneshot::Receiver<Result<Output, ApiError>>) {
        let (reply, answer) = oneshot::channel();
        let encoding = Encoding {
            ids: vec![5; tokens],
            ..Encoding::default()
        };
        let task = Task::Classify;
        let encodings = vec![encoding];
        (
            Item {
                task,
                encodings,
                reply,
            },
            answer,
        )
    }

    fn limits(max_tokens: usize, max_wait: Duration) -> BatchLimits {
        BatchLimits {
            max_tokens,
            max_wait,
        }
    }

    #[test]
    fn without_a_wait_a_batch_is_what_is_queued_and_starts_at_once() {
        let (tx, rx) = mpsc::channel();
        let mut answers = Vec::new();
        for _ in 0..3 {
            let (it, answer) = item(4);
            tx.send(it).unwrap();
            answers.push(answer);
        }
        let (first, _a) = item(4);
        let started = Instant::now();
        let (batch, next) = gather(&rx, first, limits(100, Duration::ZERO));
        assert_eq!(batch.len(), 4, "the first and the three queued");
        assert!(next.is_none());
        // Nothing queued: the lone request does not wait for company.
        let (alone, _b) = item(4);
        let (batch, _) = gather(&rx, alone, limits(100, Duration::ZERO));
        assert_eq!(batch.len(), 1);
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn the_token_budget_carries_the_overflowing_request_to_the_next_batch() {
        let (tx, rx) = mpsc::channel();
        let (a, _a) = item(6);
        let (b, _b) = item(6);
        tx.send(a).unwrap();
        tx.send(b).unwrap();
        let (first, _f) = item(6);
        let (batch, next) = gather(&rx, first, limits(14, Duration::ZERO));
        assert_eq!(batch.len(), 2);
        let next = next.expect("the third request waits for the next batch");
        assert_eq!(next.tokens(), 6);
    }

    #[test]
    fn with_a_wait_late_arrivals_join_the_batch() {
        let (tx, rx) = mpsc::channel();
        let (late, _l) = item(2);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(late).unwrap();
            tx
        });
        let (first, _f) = item(2);
        let (batch, _) = gather(&rx, first, limits(4, Duration::from_millis(2000)));
        let _tx = sender.join().unwrap();
        assert_eq!(batch.len(), 2, "the request sent 50 ms later joined");
    }
}
