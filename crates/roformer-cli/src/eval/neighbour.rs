//! The neighbour baseline: a bigram model of a masked token given its left and right
//! neighbours, with add-k smoothing (the formula is in the [module above](super)).
//!
//! Counts are gathered in a hash map of token pairs, then stored twice as compressed rows:
//! the successors of each token (`c(l, .)`) and the predecessors of each token (`c(., r)`).
//! Scoring one mask fills a dense vector over the vocabulary from the two rows it needs
//! ([`NeighbourModel::scores`], `O(V + |row l| + |row r|)`); `NeighbourModel::score` is the
//! slow reference (one token, binary searches) the tests compare it with.

use std::collections::HashMap;

use roformer::data::{tokenize_documents, Document};
use roformer::RoFormerTokenizer;

/// Documents tokenised at a time (bounds the memory of the tokenised corpus).
const CHUNK: usize = 20_000;

/// The tokens beside a mask as the model sees them; `None` for a masked (unknown) one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Context {
    pub left: Option<u32>,
    pub right: Option<u32>,
}

/// Unigram and bigram counts of framed token sequences.
#[derive(Debug, Default)]
pub(super) struct Counts {
    /// `c(x)`, indexed by id.
    unigram: Vec<u64>,
    /// `N`.
    total: u64,
    /// `c(a, b)`.
    pairs: HashMap<(u32, u32), u32>,
}

impl Counts {
    /// Counts every `[CLS] text [SEP]` of the documents' token ids.
    pub fn from_documents(tokenizer: &RoFormerTokenizer, documents: &[Document]) -> Self {
        let special = tokenizer.special_tokens();
        let (cls, sep) = (special.cls, special.sep);
        let mut counts = Self::default();
        let mut framed = Vec::new();
        for chunk in documents.chunks(CHUNK) {
            for doc in tokenize_documents(tokenizer, chunk) {
                framed.clear();
                framed.push(cls);
                framed.extend_from_slice(&doc.ids);
                framed.push(sep);
                counts.add(&framed);
            }
        }
        counts
    }

    /// Counts one sequence (already framed): each token, and each pair of adjacent tokens.
    pub fn add(&mut self, ids: &[u32]) {
        for &id in ids {
            let i = id as usize;
            if i >= self.unigram.len() {
                self.unigram.resize(i + 1, 0);
            }
            self.unigram[i] += 1;
            self.total += 1;
        }
        for pair in ids.windows(2) {
            let c = self.pairs.entry((pair[0], pair[1])).or_default();
            *c = c.saturating_add(1);
        }
    }

    /// `c(id)`.
    fn count(&self, id: u32) -> u64 {
        self.unigram.get(id as usize).copied().unwrap_or(0)
    }

    /// The `candidates` seen at least once, by descending count (ties: lower id first).
    pub fn ranking(&self, candidates: &[u32]) -> Vec<u32> {
        let mut ranked: Vec<u32> = candidates
            .iter()
            .copied()
            .filter(|&id| self.count(id) > 0)
            .collect();
        ranked.sort_by(|&a, &b| self.count(b).cmp(&self.count(a)).then(a.cmp(&b)));
        ranked
    }
}

/// Rows of `(other token, count)`, sorted by the other token, one row per token.
#[derive(Debug)]
struct Rows {
    /// Row `a` is `entries[starts[a]..starts[a + 1]]`.
    starts: Vec<usize>,
    entries: Vec<(u32, u32)>,
}

impl Rows {
    /// Rows of `triples` `(row, other, count)`, which this sorts.
    fn new(mut triples: Vec<(u32, u32, u32)>, n_rows: usize) -> Self {
        triples.sort_unstable();
        let mut starts = vec![0; n_rows + 1];
        for &(row, _, _) in &triples {
            starts[row as usize + 1] += 1;
        }
        for a in 0..n_rows {
            starts[a + 1] += starts[a];
        }
        let entries = triples.into_iter().map(|(_, b, c)| (b, c)).collect();
        Self { starts, entries }
    }

    fn row(&self, a: u32) -> &[(u32, u32)] {
        let a = a as usize;
        match (self.starts.get(a), self.starts.get(a + 1)) {
            (Some(&s), Some(&e)) => &self.entries[s..e],
            _ => &[],
        }
    }

    /// The count of `b` in row `a` (binary search).
    #[cfg(test)]
    fn get(&self, a: u32, b: u32) -> u32 {
        let row = self.row(a);
        row.binary_search_by_key(&b, |&(x, _)| x)
            .map_or(0, |i| row[i].1)
    }
}

/// The neighbour baseline, ready to rank.
#[derive(Debug)]
pub(super) struct NeighbourModel {
    /// `ln k`.
    ln_k: f64,
    k: f64,
    /// `ln(c(a.) + kV)` for every token `a`.
    ln_out: Vec<f64>,
    /// `ln((c(x) + k) / (N + kV))` for every token `x`.
    ln_unigram: Vec<f64>,
    /// `c(l, x)`: row `l`, entries `x`.
    successors: Rows,
    /// `c(x, r)`: row `r`, entries `x`.
    predecessors: Rows,
    /// The tokens ranked (the vocabulary's characters).
    candidates: Vec<u32>,
}

impl NeighbourModel {
    /// The model of `counts` with add-`k` smoothing over a vocabulary of `vocab_size`
    /// tokens, ranking `candidates`. Ids at or past `vocab_size` in the counts widen the
    /// tables, not `V`.
    pub fn new(counts: &Counts, k: f64, vocab_size: usize, candidates: Vec<u32>) -> Self {
        let largest = counts.pairs.keys().map(|&(a, b)| a.max(b) as usize + 1);
        let n = largest
            .chain(candidates.iter().map(|&x| x as usize + 1))
            .fold(vocab_size.max(counts.unigram.len()), usize::max);
        let kv = k * vocab_size as f64;
        let mut out = vec![0u64; n];
        let mut triples = Vec::with_capacity(counts.pairs.len());
        for (&(a, b), &c) in &counts.pairs {
            out[a as usize] += u64::from(c);
            triples.push((a, b, c));
        }
        let ln_out = out.iter().map(|&c| (c as f64 + kv).ln()).collect();
        let ln_total = (counts.total as f64 + kv).ln();
        let ln_unigram = (0..n as u32)
            .map(|x| (counts.count(x) as f64 + k).ln() - ln_total)
            .collect();
        let successors = Rows::new(triples.clone(), n);
        let predecessors = Rows::new(triples.into_iter().map(|(a, b, c)| (b, a, c)).collect(), n);
        Self {
            ln_k: k.ln(),
            k,
            ln_out,
            ln_unigram,
            successors,
            predecessors,
            candidates,
        }
    }

    /// `ln((c + k) / (c(a.) + kV))` given `ln(c(a.) + kV)`: one smoothed conditional.
    fn ln_conditional(&self, c: u32, ln_out_a: f64) -> f64 {
        if c == 0 {
            self.ln_k - ln_out_a
        } else {
            (f64::from(c) + self.k).ln() - ln_out_a
        }
    }

    /// The left term of `x`: `log P(x | l)`, or `log P(x)` when `l` is unknown.
    fn left_term(&self, left: Option<u32>, x: u32, c_lx: u32) -> f64 {
        match left {
            Some(l) => self.ln_conditional(c_lx, self.ln_out[l as usize]),
            None => self.ln_unigram[x as usize],
        }
    }

    /// The right term of `x`: `log P(r | x)`, or 0 when `r` is unknown.
    fn right_term(&self, right: Option<u32>, x: u32, c_xr: u32) -> f64 {
        match right {
            Some(_) => self.ln_conditional(c_xr, self.ln_out[x as usize]),
            None => 0.0,
        }
    }

    /// `score(x)` at a mask with `context`, the reference: one token, counts by binary search.
    #[cfg(test)]
    pub fn score(&self, context: Context, x: u32) -> f64 {
        let c_lx = context.left.map_or(0, |l| self.successors.get(l, x));
        let c_xr = context.right.map_or(0, |r| self.predecessors.get(r, x));
        self.left_term(context.left, x, c_lx) + self.right_term(context.right, x, c_xr)
    }

    /// `score(x)` for every token `x` at a mask with `context` (the same arithmetic as
    /// `score`, test-only, so the same values bit for bit).
    pub fn scores(&self, context: Context) -> Vec<f64> {
        let n = self.ln_out.len();
        let mut left = vec![0u32; n];
        let mut right = vec![0u32; n];
        if let Some(l) = context.left {
            for &(x, c) in self.successors.row(l) {
                left[x as usize] = c;
            }
        }
        if let Some(r) = context.right {
            for &(x, c) in self.predecessors.row(r) {
                right[x as usize] = c;
            }
        }
        (0..n as u32)
            .map(|x| {
                let i = x as usize;
                self.left_term(context.left, x, left[i])
                    + self.right_term(context.right, x, right[i])
            })
            .collect()
    }

    /// The rank (0-based, when below 5) of `target` among the candidates at a mask with
    /// `context`: how many candidates score higher, ties broken towards lower ids. A target
    /// that is not a candidate is never a hit.
    pub fn rank(&self, context: Context, target: u32) -> Option<usize> {
        if self.candidates.binary_search(&target).is_err() {
            return None;
        }
        let scores = self.scores(context);
        let own = scores[target as usize];
        let higher = self
            .candidates
            .iter()
            .filter(|&&x| {
                let s = scores[x as usize];
                s > own || (s == own && x < target)
            })
            .take(5)
            .count();
        (higher < 5).then_some(higher)
    }
}

#[cfg(test)]
#[path = "neighbour_tests.rs"]
mod tests;
