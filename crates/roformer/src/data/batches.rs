//! Masked-LM batches addressed by training step: a pure function of `(seed, step)`, so a run
//! resumed at step `s` sees exactly the batches it would have seen.

use std::sync::{Arc, Mutex};

use super::blocks::Block;
use super::error::DataError;
use super::masking::Masker;
use super::rng::{shuffle, stream, Purpose};

/// One batch, every vector row-major `[batch, seq]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlmBatch {
    /// Masked input ids.
    pub input_ids: Vec<u32>,
    /// 1 on real tokens, 0 on padding.
    pub attention_mask: Vec<u32>,
    /// All 0 (one segment).
    pub token_type_ids: Vec<u32>,
    /// Original ids at the predicted positions, -100 elsewhere.
    pub labels: Vec<i64>,
    /// Number of rows.
    pub batch: usize,
    /// Row length (the blocks' `seq_len`).
    pub seq: usize,
}

impl MlmBatch {
    fn with_capacity(batch: usize, seq: usize) -> Self {
        Self {
            input_ids: Vec::with_capacity(batch * seq),
            attention_mask: Vec::with_capacity(batch * seq),
            token_type_ids: vec![0; batch * seq],
            labels: Vec::with_capacity(batch * seq),
            batch,
            seq,
        }
    }

    /// Appends a row: `block` masked by `masker` with the stream `rng`.
    fn push(&mut self, block: &Block, masker: &Masker, rng: &mut rand_chacha::ChaCha8Rng) {
        let masked = masker.mask(block, rng);
        self.input_ids.extend_from_slice(&masked.input_ids);
        self.labels.extend_from_slice(&masked.labels);
        let real = block.len.min(self.seq);
        self.attention_mask
            .extend((0..self.seq).map(|i| u32::from(i < real)));
    }
}

/// Training batches of a fixed set of blocks.
///
/// Sample `j` of step `s` is the global sample `g = s * batch_size + j`; its epoch is
/// `e = g / n` and its place in that epoch `p = g % n` (`n` blocks). It is block
/// `order(e)[p]`, where `order(e)` is the identity shuffled by Fisher-Yates with the stream
/// `(seed, Order, e, 0)`, masked by [`Masker::mask`] with the stream
/// `(seed, TrainMask, e, block index)` (see the `rng` module for the streams). So every
/// batch is full, each epoch visits every block once (a batch may straddle two epochs), the
/// masks of a block change from epoch to epoch, and nothing depends on which steps were
/// asked for before.
#[derive(Debug)]
pub struct MlmBatches {
    blocks: Vec<Block>,
    batch_size: usize,
    seed: u64,
    masker: Masker,
    seq: usize,
    /// The last epoch's order, a cache only (never changes a result).
    order: Mutex<Option<(u64, Arc<Vec<usize>>)>>,
}

impl MlmBatches {
    /// Batches of `batch_size` blocks.
    ///
    /// # Errors
    /// [`DataError::ZeroBatchSize`]; [`DataError::BadBlocks`] if there is no block or the
    /// blocks differ in length.
    pub fn new(
        blocks: Vec<Block>,
        batch_size: usize,
        seed: u64,
        masker: Masker,
    ) -> Result<Self, DataError> {
        if batch_size == 0 {
            return Err(DataError::ZeroBatchSize);
        }
        let seq = blocks
            .first()
            .ok_or_else(|| DataError::BadBlocks("there is no block".into()))?
            .seq_len();
        for (index, block) in blocks.iter().enumerate() {
            if block.seq_len() != seq || block.word_ids.len() != seq {
                return Err(DataError::BadBlocks(format!(
                    "block {index} has {} ids and {} word ids, block 0 has {seq}",
                    block.seq_len(),
                    block.word_ids.len()
                )));
            }
        }
        Ok(Self {
            blocks,
            batch_size,
            seed,
            masker,
            seq,
            order: Mutex::new(None),
        })
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Rows per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The blocks' length.
    pub fn seq_len(&self) -> usize {
        self.seq
    }

    /// The epoch of the first row of `step`'s batch: `floor(step * batch_size / n)`.
    pub fn epoch_of(&self, step: u64) -> u64 {
        let first = u128::from(step) * self.batch_size as u128;
        (first / self.blocks.len() as u128) as u64
    }

    /// The block order of `epoch`: a permutation of `0..n`.
    pub fn order(&self, epoch: u64) -> Arc<Vec<usize>> {
        let mut cache = self
            .order
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some((cached, order)) = cache.as_ref() {
            if *cached == epoch {
                return Arc::clone(order);
            }
        }
        let mut order: Vec<usize> = (0..self.blocks.len()).collect();
        shuffle(&mut order, &mut stream(self.seed, Purpose::Order, epoch, 0));
        let order = Arc::new(order);
        *cache = Some((epoch, Arc::clone(&order)));
        order
    }

    /// The batch of training step `step` (see the type's documentation for the scheme).
    pub fn batch(&self, step: u64) -> MlmBatch {
        let n = self.blocks.len() as u128;
        let mut batch = MlmBatch::with_capacity(self.batch_size, self.seq);
        for j in 0..self.batch_size {
            let global = u128::from(step) * self.batch_size as u128 + j as u128;
            let epoch = (global / n) as u64;
            let place = (global % n) as usize;
            let current = self.order(epoch);
            let index = current[place];
            let mut rng = stream(self.seed, Purpose::TrainMask, epoch, index as u64);
            batch.push(&self.blocks[index], &self.masker, &mut rng);
        }
        batch
    }

    /// Evaluation batches over every block in order (`batch_size` rows, the last batch
    /// possibly fewer), block `i` masked with the stream `(seed, EvalMask, 0, i)`: the same
    /// masks at every evaluation. Build a separate `MlmBatches` over the validation blocks
    /// for it.
    pub fn eval_batches(&self) -> EvalBatches<'_> {
        EvalBatches {
            batches: self,
            next: 0,
        }
    }
}

/// The iterator of [`MlmBatches::eval_batches`].
#[derive(Debug)]
pub struct EvalBatches<'a> {
    batches: &'a MlmBatches,
    /// Index of the next block.
    next: usize,
}

impl Iterator for EvalBatches<'_> {
    type Item = MlmBatch;

    fn next(&mut self) -> Option<MlmBatch> {
        let source = self.batches;
        let start = self.next;
        let end = (start + source.batch_size).min(source.blocks.len());
        if start >= end {
            return None;
        }
        let mut batch = MlmBatch::with_capacity(end - start, source.seq);
        for (index, block) in source.blocks[start..end].iter().enumerate() {
            let index = (start + index) as u64;
            let mut rng = stream(source.seed, Purpose::EvalMask, 0, index);
            batch.push(block, &source.masker, &mut rng);
        }
        self.next = end;
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batches.blocks.len().saturating_sub(self.next);
        let batches = left.div_ceil(self.batches.batch_size);
        (batches, Some(batches))
    }
}

impl ExactSizeIterator for EvalBatches<'_> {}

#[cfg(test)]
#[path = "batches_tests.rs"]
mod tests;
