//! One completion in the scheduler's batch: its job, its client's channel, its own cache,
//! sampler and stop scan, and how far its prompt has been prefilled.
//!
//! Its prompt is prefilled in chunks of `chunk` tokens cut at multiples of `chunk` from its
//! start (the last one shorter), whatever else runs beside it; then each step feeds it the
//! token the previous step chose. So the operations that make its logits are the same in any
//! batch (the batched pass computes each row on its own: [`llama::Llama::forward_ragged`]).

use llama::generate::Sampler;
use llama::{Chunk, KvCache, Llama};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OwnedSemaphorePermit;

use super::job::{Admitted, Event, Finish, Job};
use super::stop::{Step, StopScan};
use crate::error::ApiError;

/// What a completion does after a step.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// It goes on at the next step.
    Running,
    /// It has ended: the last event to send, or `None` when its client went away.
    Ended(Option<Event>),
}

/// A completion being decoded.
#[derive(Debug)]
pub struct Sequence {
    job: Job,
    tx: UnboundedSender<Event>,
    cache: KvCache,
    sampler: Sampler,
    scan: StopScan,
    /// The completion's tokens that are text (end tokens are not).
    tokens: Vec<u32>,
    /// Tokens chosen, end token included.
    produced: usize,
    /// Prompt tokens in the cache.
    prefilled: usize,
    /// The token chosen last, fed at the next step.
    last: u32,
    place: OwnedSemaphorePermit,
}

impl Sequence {
    /// A sequence for an admitted job, its cache made for the prompt and `max_tokens`.
    pub fn new(admitted: Admitted, model: &Llama) -> Sequence {
        let Admitted { job, tx, place } = admitted;
        Sequence {
            cache: model.cache(1, job.cached_tokens()),
            sampler: Sampler::new(job.sampling),
            scan: StopScan::new(job.stops.clone()),
            tokens: Vec::new(),
            produced: 0,
            prefilled: 0,
            last: 0,
            job,
            tx,
            place,
        }
    }

    /// Cache positions it reserves: its prompt and `max_tokens`.
    pub fn reserved(&self) -> usize {
        self.job.cached_tokens()
    }

    /// Whether its client has gone away (or its request timed out).
    pub fn is_gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Tokens it runs at the next step: its next prompt chunk of at most `chunk` tokens, or
    /// the one token chosen last.
    pub fn step_len(&self, chunk: usize) -> usize {
        match self.job.prompt.len() - self.prefilled {
            0 => 1,
            left => left.min(chunk - self.prefilled % chunk),
        }
    }

    /// Whether it is still prefilling its prompt.
    pub fn is_prefilling(&self) -> bool {
        self.prefilled < self.job.prompt.len()
    }

    /// Whether its part of the next step asks for logits: it decodes, or its last prompt
    /// chunk runs.
    pub fn wants_logits(&self, chunk: usize) -> bool {
        !self.is_prefilling() || self.prefilled + self.step_len(chunk) == self.job.prompt.len()
    }

    /// Its part of the next step ([`Sequence::step_len`] tokens), asking for logits when the
    /// step ends its prompt or decodes.
    pub fn chunk(&mut self, chunk: usize) -> Chunk<'_> {
        let n = self.step_len(chunk);
        let logits = self.wants_logits(chunk);
        let ids = if self.is_prefilling() {
            &self.job.prompt[self.prefilled..self.prefilled + n]
        } else {
            std::slice::from_ref(&self.last)
        };
        Chunk {
            ids,
            cache: &mut self.cache,
            logits,
        }
    }

    /// Records that its part of a step ran: the prompt chunk is cached.
    pub fn ran(&mut self, chunk: usize) {
        if self.is_prefilling() {
            self.prefilled += self.step_len(chunk);
        }
    }

    /// Takes the logits `z` of its last token: chooses the next token, sends the text that is
    /// decided, and says whether it goes on. `token_made` is called for each token chosen.
    pub fn take(&mut self, z: &[f32], model: &super::LlamaModel, token_made: impl Fn()) -> Next {
        if self.is_gone() {
            return Next::Ended(None);
        }
        let token = self.sampler.next(z);
        self.produced += 1;
        token_made();
        if self.job.stop_ids.contains(&token) {
            return self.finish(model, Finish::Stop);
        }
        self.tokens.push(token);
        let text = match model.tokenizer().decode(&self.tokens) {
            Ok(text) => text,
            Err(e) => return self.fail(&e),
        };
        match self.scan.step(&text) {
            Step::Send(piece) => self.send(piece),
            Step::Stop(piece) => {
                self.send(piece);
                return Next::Ended(Some(self.done(Finish::Stop)));
            }
        }
        if self.produced == self.job.max_tokens {
            return self.finish(model, Finish::Length);
        }
        self.last = token;
        Next::Running
    }

    /// The model failed on this sequence.
    pub fn fail(&self, e: &dyn std::fmt::Display) -> Next {
        Next::Ended(Some(Event::Failed(ApiError::Backend(e.to_string()))))
    }

    /// Ends without a stop string: sends the text held back for one, then the end.
    fn finish(&mut self, model: &super::LlamaModel, finish: Finish) -> Next {
        let text = match model.tokenizer().decode(&self.tokens) {
            Ok(text) => text,
            Err(e) => return self.fail(&e),
        };
        let rest = self.scan.finish(&text);
        self.send(rest);
        Next::Ended(Some(self.done(finish)))
    }

    fn done(&self, finish: Finish) -> Event {
        Event::Done {
            finish,
            completion_tokens: self.produced,
        }
    }

    /// Gives back its place, then sends the last event (nothing when its client is gone): a
    /// client that sends its next request as soon as it has its answer finds the place free.
    pub fn end(self, event: Option<Event>) {
        let Sequence { tx, place, .. } = self;
        drop(place);
        if let Some(event) = event {
            let _ = tx.send(event);
        }
    }

    fn send(&self, piece: String) {
        if !piece.is_empty() {
            let _ = self.tx.send(Event::Text(piece));
        }
    }
}
