//! Causal grouped-query attention of new queries over key/value caches, on slices: no tensor
//! ops, no copies of the caches, every (sequence, key/value head) of a step in one pass over the
//! threads.
//!
//! For query row `i` of a sequence (at position `m = offset + i`) and query head `h`, whose
//! key/value head is `g = h / (heads / kv_heads)`:
//!
//! ```text
//! s_n = (q_{i,h} . k_{g,n}) * (1 / sqrt(head_dim))          for n = 0..=m
//! w_n = exp(s_n - max_n s_n) / Σ_n exp(s_n - max_n s_n)
//! o_{i,h} = Σ_n w_n v_{g,n}
//! ```
//!
//! in f32, the steps in the order candle's ops take them (the product, the scale, softmax with
//! the maximum subtracted, then the weighted sum), so the results stay within a few f32 ulps of
//! them; the tests compare both with an f64 evaluation. Each (sequence, key/value head), with
//! its query heads, is computed whole by one thread, so a sequence's output depends neither on
//! the other sequences of a step nor on the split over threads.
//!
//! The query heads that share a key/value head are attended together: one pass over that
//! head's keys gives the scores of every query head of the group, and one pass over its values
//! their weighted sums, so each cached key and value is read once per group of
//! `heads / kv_heads` query heads, not once per query head. Each query head's arithmetic is
//! the same operations in the same order as alone, so grouping changes no bit.
//!
//! The dot products and the weighted sums run 16 lanes wide: on a CPU with AVX-512 (see
//! [`Isa`], checked once) in 512-bit vectors when the head size is a multiple of 16, else in
//! plain Rust, the same operations in the same order either way, so the same bits.

use crate::cache::LayerView;
use crate::groups::on_pool;

/// The heads of an attention layer: `heads` query heads of `head_dim` values in groups that
/// share each of the `kv_heads` key/value heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heads {
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

impl Heads {
    /// Query heads per key/value head, `heads / kv_heads`.
    fn group(self) -> usize {
        self.heads / self.kv_heads
    }
}

/// The instruction set the kernel is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// The target's baseline.
    Baseline,
    /// x86-64 AVX-512F: 512-bit vectors for heads of a multiple of 16 values.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The widest instruction set this CPU runs, checked once per process.
    pub(crate) fn detect() -> Isa {
        static DETECTED: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            Isa::Baseline
        })
    }
}

/// The new queries of one sequence and its cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queries<'a> {
    /// `[t, heads, head_dim]`, token-major, rotated.
    pub(crate) q: &'a [f32],
    /// The layer's cache holding the sequence (positions `0..offset + t`, the new ones
    /// appended).
    pub(crate) cache: LayerView<'a>,
    /// The sequence's index in the cache's batch.
    pub(crate) sequence: usize,
    /// The position of the first query: the cache's length before this step's append.
    pub(crate) offset: usize,
}

impl Queries<'_> {
    /// Query rows `t`.
    fn rows(&self, heads: Heads) -> usize {
        self.q.len() / (heads.heads * heads.head_dim).max(1)
    }
}

/// Below this many multiply-adds (`Σ t * heads * (offset + t) * head_dim`) a step's attention
/// runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 16;

/// Writes `o` (`[Σ t, heads * head_dim]`: each sequence's rows in turn, the heads side by side
/// as the output projection reads them) for every sequence of `queries`, by the formula of the
/// [module documentation](self). The (sequence, key/value head) pairs, each with its group of
/// query heads, are spread over candle's barrier pool when the step is large enough.
pub(crate) fn attend(heads: Heads, queries: &[Queries<'_>], o: &mut [f32]) {
    let d = heads.head_dim;
    let rows: Vec<usize> = queries.iter().map(|q| q.rows(heads)).collect();
    let macs: usize = queries
        .iter()
        .zip(&rows)
        .map(|(q, &t)| t * heads.heads * (q.offset + t) * d)
        .sum();
    // One row per sequence: the (sequence, key/value head) pieces lie in `o`
    // in that order already.
    let direct = rows.iter().all(|&t| t == 1);
    let mut staged = if direct {
        Vec::new()
    } else {
        vec![0f32; o.len()]
    };
    let target: &mut [f32] = if direct { o } else { &mut staged };
    // Piece `p` is the group of query heads of key/value head `p % kv_heads` of sequence
    // `p / kv_heads`: `[heads / kv_heads, t, head_dim]`.
    let group = heads.group();
    let mut pieces = Vec::with_capacity(queries.len() * heads.kv_heads);
    let mut rest = target;
    for &t in &rows {
        for _ in 0..heads.kv_heads {
            let (piece, tail) = rest.split_at_mut(group * t * d);
            pieces.push(piece);
            rest = tail;
        }
    }
    let run = |p: usize, dst: &mut [f32], scores: &mut Vec<f32>| {
        let (s, g) = (p / heads.kv_heads, p % heads.kv_heads);
        attend_group(heads, queries[s], g, scores, dst);
    };
    if macs < PARALLEL_MIN_MACS {
        let mut scores = Vec::new();
        for (p, dst) in pieces.into_iter().enumerate() {
            run(p, dst, &mut scores);
        }
    } else {
        on_pool(pieces, |p, dst| run(p, dst, &mut Vec::new()));
    }
    if !direct {
        // `[s][h][i][d]` to `[s][i][h][d]`.
        let mut staged = staged.chunks_exact(d);
        let mut first = 0;
        for &t in &rows {
            for h in 0..heads.heads {
                for (i, src) in (0..t).zip(&mut staged) {
                    o[((first + i) * heads.heads + h) * d..][..d].copy_from_slice(src);
                }
            }
            first += t;
        }
    }
}

/// The query heads of key/value head `g` of the sequence `queries` into `o`
/// (`[heads / kv_heads, t, head_dim]`, head after head); `scores` is scratch space, grown to
/// `heads / kv_heads * (offset + t)` values.
fn attend_group(
    heads: Heads,
    queries: Queries<'_>,
    g: usize,
    scores: &mut Vec<f32>,
    o: &mut [f32],
) {
    match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if heads.head_dim.is_multiple_of(LANES) => {
            // SAFETY: `Isa::detect` returned `Avx512` only after checking that this CPU has
            // AVX-512F, the feature `x86::group` is compiled for.
            unsafe { x86::group(heads, queries, g, scores, o) }
        }
        _ => group_body(heads, queries, g, scores, o),
    }
}

/// Lanes of the vectorized loops.
const LANES: usize = 16;

/// The plain kernel of [`attend_group`] (any CPU, any head size), and the reference the
/// AVX-512 one equals bit for bit. For each query row: per position, the 16-lane dot product of
/// [`dot`] with each query head of the group; softmax per head ([`to_weights`]); then per
/// position, for each head, `o += w_n * v_n` value by value.
fn group_body(heads: Heads, queries: Queries<'_>, g: usize, scores: &mut Vec<f32>, o: &mut [f32]) {
    let (d, scale, group) = (heads.head_dim, score_scale(heads), heads.group());
    let t = queries.rows(heads);
    let (keys, values) = group_cache(heads, queries, g);
    for (i, q, seen) in group_rows(heads, queries, g) {
        // `[group][seen]`.
        scores.resize(group * seen, 0.0);
        for (n, k) in keys.chunks_exact(d).take(seen).enumerate() {
            for (j, q) in q.chunks_exact(d).enumerate() {
                scores[j * seen + n] = dot(q, k) * scale;
            }
        }
        scores.chunks_exact_mut(seen).for_each(to_weights);
        for j in 0..group {
            o[(j * t + i) * d..][..d].fill(0.0);
        }
        for (n, v) in values.chunks_exact(d).take(seen).enumerate() {
            for j in 0..group {
                let w = scores[j * seen + n];
                for (o, &v) in o[(j * t + i) * d..][..d].iter_mut().zip(v) {
                    *o += w * v;
                }
            }
        }
    }
}

/// `1 / sqrt(head_dim)`, rounded once to f32.
fn score_scale(heads: Heads) -> f32 {
    (1.0 / (heads.head_dim as f64).sqrt()) as f32
}

/// Each query row `i` of `queries` with the queries of the group of key/value head `g` (its
/// `heads / kv_heads` query heads side by side, `[heads / kv_heads, head_dim]`) and the
/// positions it sees (`offset + i + 1`).
fn group_rows<'a>(
    heads: Heads,
    queries: Queries<'a>,
    g: usize,
) -> impl Iterator<Item = (usize, &'a [f32], usize)> {
    let width = heads.group() * heads.head_dim;
    let rows = queries.q.chunks_exact(heads.heads * heads.head_dim);
    rows.enumerate()
        .map(move |(i, row)| (i, &row[g * width..(g + 1) * width], queries.offset + i + 1))
}

/// The keys and values of key/value head `g` of `queries`' sequence.
fn group_cache<'a>(heads: Heads, queries: Queries<'a>, g: usize) -> (&'a [f32], &'a [f32]) {
    let d = heads.head_dim;
    let cache = queries.cache;
    let start = (queries.sequence * heads.kv_heads + g) * cache.capacity * d;
    let end = start + cache.capacity * d;
    (&cache.keys[start..end], &cache.values[start..end])
}

/// Replaces the scores `s_n` of one query head by their softmax weights:
/// `exp(s_n - max) / Σ exp(s_m - max)`, the sum taken in order.
fn to_weights(scores: &mut [f32]) {
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    for s in scores.iter_mut() {
        *s /= sum;
    }
}

/// `a . b` over 16 lanes (lane `l` sums the products `l, l + 16, ...` in order), the lanes then
/// summed in halves (`l + 8`, then `l + 4`, `l + 2`, `l + 1`), then the products past the last
/// whole 16 in order.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let whole = a.len() - a.len() % LANES;
    let (a16, a_rest) = a.split_at(whole);
    let (b16, b_rest) = b.split_at(whole);
    for (a, b) in a16.chunks_exact(LANES).zip(b16.chunks_exact(LANES)) {
        for ((lane, &a), &b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += a * b;
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    a_rest
        .iter()
        .zip(b_rest)
        .fold(lanes[0], |sum, (&a, &b)| sum + a * b)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! [`super::group_body`] on 512-bit vectors, for head sizes that are whole vectors: the
    //! same operations in the same order (no FMA), so the same bits.

    use std::arch::x86_64::*;

    use super::{group_cache, group_rows, score_scale, to_weights, Heads, Queries, LANES};

    /// Query heads attended in one pass over the keys and values: their accumulators (four
    /// vectors each for SmolLM2's heads of 64) stay in registers.
    const MAX_HEADS: usize = 4;

    /// [`super::group_body`] for `head_dim` a multiple of 16: up to 128 values, each chunk of
    /// 16 kept in its own register across the positions ([`group_chunks`]); larger heads go to
    /// the plain kernel.
    #[target_feature(enable = "avx512f,avx2,avx")]
    pub(super) fn group(
        heads: Heads,
        queries: Queries<'_>,
        g: usize,
        scores: &mut Vec<f32>,
        o: &mut [f32],
    ) {
        match heads.head_dim / LANES {
            1 => group_chunks::<1>(heads, queries, g, scores, o),
            2 => group_chunks::<2>(heads, queries, g, scores, o),
            3 => group_chunks::<3>(heads, queries, g, scores, o),
            4 => group_chunks::<4>(heads, queries, g, scores, o),
            5 => group_chunks::<5>(heads, queries, g, scores, o),
            6 => group_chunks::<6>(heads, queries, g, scores, o),
            7 => group_chunks::<7>(heads, queries, g, scores, o),
            8 => group_chunks::<8>(heads, queries, g, scores, o),
            _ => super::group_body(heads, queries, g, scores, o),
        }
    }

    /// [`super::group_body`] for `head_dim = 16 * C`: the group's query heads up to
    /// [`MAX_HEADS`] at a time, each batch in one pass over the keys and one over the values.
    #[target_feature(enable = "avx512f,avx2,avx")]
    fn group_chunks<const C: usize>(
        heads: Heads,
        queries: Queries<'_>,
        g: usize,
        scores: &mut Vec<f32>,
        o: &mut [f32],
    ) {
        let (d, group, t) = (C * LANES, heads.group(), queries.rows(heads));
        let scale = score_scale(heads);
        let cache = group_cache(heads, queries, g);
        for (i, q, seen) in group_rows(heads, queries, g) {
            scores.resize(group * seen, 0.0);
            let mut first = 0;
            while first < group {
                let (q, scores) = (&q[first * d..], &mut scores[first * seen..]);
                let batch = (group - first).min(MAX_HEADS);
                let mut store = |j: usize, acc: &[__m512; C]| {
                    let out = &mut o[((first + j) * t + i) * d..][..d];
                    for (out, &acc) in out.chunks_exact_mut(LANES).zip(acc) {
                        // SAFETY: `out` is 16 writable f32 (`chunks_exact_mut`); `storeu` has
                        // no alignment requirement.
                        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) }
                    }
                };
                match batch {
                    1 => heads_chunks::<C, 1>(q, cache, seen, scale, scores, &mut store),
                    2 => heads_chunks::<C, 2>(q, cache, seen, scale, scores, &mut store),
                    3 => heads_chunks::<C, 3>(q, cache, seen, scale, scores, &mut store),
                    _ => heads_chunks::<C, MAX_HEADS>(q, cache, seen, scale, scores, &mut store),
                }
                first += batch;
            }
        }
    }

    /// `H` query heads (`q`: `[H, 16 * C]`, side by side) of one row over the first `seen`
    /// positions of one key/value head's `(keys, values)`: the scores of all `H` from each key
    /// loaded (`scores`: `[H][seen]`), softmax per head, then the weighted sums of all `H` from
    /// each value loaded, handed to `store(j, sums)` head by head.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,avx")]
    fn heads_chunks<const C: usize, const H: usize>(
        q: &[f32],
        (keys, values): (&[f32], &[f32]),
        seen: usize,
        scale: f32,
        scores: &mut [f32],
        store: &mut impl FnMut(usize, &[__m512; C]),
    ) {
        let d = C * LANES;
        let q: [[__m512; C]; H] =
            std::array::from_fn(|j| std::array::from_fn(|c| load(&q[j * d + c * LANES..])));
        for (n, k) in keys.chunks_exact(d).take(seen).enumerate() {
            let k: [__m512; C] = std::array::from_fn(|c| load(&k[c * LANES..]));
            for (j, q) in q.iter().enumerate() {
                let mut lanes = _mm512_setzero_ps();
                for (&q, &k) in q.iter().zip(&k) {
                    lanes = _mm512_add_ps(lanes, _mm512_mul_ps(q, k));
                }
                scores[j * seen + n] = halves_sum(lanes) * scale;
            }
        }
        scores[..H * seen]
            .chunks_exact_mut(seen)
            .for_each(to_weights);
        let mut acc = [[_mm512_setzero_ps(); C]; H];
        for (n, v) in values.chunks_exact(d).take(seen).enumerate() {
            let v: [__m512; C] = std::array::from_fn(|c| load(&v[c * LANES..]));
            for (j, acc) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(scores[j * seen + n]);
                for (acc, &v) in acc.iter_mut().zip(&v) {
                    *acc = _mm512_add_ps(*acc, _mm512_mul_ps(w, v));
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            store(j, acc);
        }
    }

    /// The first 16 values of `x` (at least 16 long: the slices above are whole chunks).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(x: &[f32]) -> __m512 {
        let x = &x[..LANES];
        // SAFETY: `x` is 16 readable f32; `loadu` has no alignment requirement.
        unsafe { _mm512_loadu_ps(x.as_ptr()) }
    }

    /// The lanes summed as [`super::dot`] sums them: `l + 8`, `l + 4`, `l + 2`, `l + 1`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,avx")]
    fn halves_sum(v: __m512) -> f32 {
        let high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        let s8 = _mm256_add_ps(_mm512_castps512_ps256(v), high);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
        _mm_cvtss_f32(s1)
    }
}

#[cfg(test)]
mod tests;
