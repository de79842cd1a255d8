//! The kernel against two references: an f64 evaluation of the formula, and candle's ops (the
//! path it replaced: `matmul`, the scale, the causal mask, `softmax_last_dim`, `matmul`).
//!
//! Tolerance: inputs in `[-1, 1]`, `head_dim <= 64`. Each score is a dot product of at most 64
//! products summed in f32, off by at most `64 * 2^-24 * 64 / 8 ≈ 3e-5` before the softmax, and
//! usually far less (rounding errors do not all point the same way); the weights inherit that
//! relative error, and each output, a convex combination of values in `[-1, 1]`, moves by at
//! most that much. `1e-4` leaves room; a wrong head, position or mask is off by `1e-2` or more.

use candle_core::{Device, Tensor};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{attend, group_body, Heads, Isa, Queries, PARALLEL_MIN_MACS};
use crate::cache::{KvCache, LayerView};
use crate::config::LlamaConfig;

const TOLERANCE: f64 = 1e-4;

/// `n` values in `[-1, 1)`, drawn from a generator seeded with `seed`.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1f32..1f32)).collect()
}

/// One case: a cache of `batch` sequences holding `offset + t` positions, and `t` queries
/// for each sequence.
struct Case {
    heads: Heads,
    batch: usize,
    offset: usize,
    t: usize,
    capacity: usize,
    /// `[batch, kv_heads, capacity, head_dim]`.
    keys: Vec<f32>,
    values: Vec<f32>,
    /// `[batch, t, heads, head_dim]`.
    q: Vec<f32>,
}

impl Case {
    fn new(heads: Heads, batch: usize, offset: usize, t: usize, seed: u64) -> Case {
        let capacity = offset + t + 3;
        let cache = batch * heads.kv_heads * capacity * heads.head_dim;
        Case {
            heads,
            batch,
            offset,
            t,
            capacity,
            keys: values(seed, cache),
            values: values(seed ^ 1, cache),
            q: values(seed ^ 2, batch * t * heads.heads * heads.head_dim),
        }
    }

    fn view(&self) -> LayerView<'_> {
        LayerView {
            keys: &self.keys,
            values: &self.values,
            capacity: self.capacity,
        }
    }

    fn queries(&self) -> Vec<Queries<'_>> {
        let per = self.t * self.heads.heads * self.heads.head_dim;
        (0..self.batch)
            .map(|b| Queries {
                q: &self.q[b * per..(b + 1) * per],
                cache: self.view(),
                sequence: b,
                offset: self.offset,
            })
            .collect()
    }

    /// The kernel's output for every sequence, `[batch, t, heads * head_dim]`.
    fn kernel(&self) -> Vec<f32> {
        let mut o = vec![f32::NAN; self.q.len()];
        attend(self.heads, &self.queries(), &mut o);
        o
    }

    /// Each (sequence, key/value head) through the baseline body on this thread, placed by
    /// hand.
    fn baseline(&self) -> Vec<f32> {
        let Heads {
            heads,
            kv_heads,
            head_dim: d,
        } = self.heads;
        let group = heads / kv_heads;
        let mut o = vec![f32::NAN; self.q.len()];
        let mut scores = Vec::new();
        for (b, queries) in self.queries().into_iter().enumerate() {
            for g in 0..kv_heads {
                // `[group, t, head_dim]`.
                let mut piece = vec![f32::NAN; group * self.t * d];
                group_body(self.heads, queries, g, &mut scores, &mut piece);
                for (r, row) in piece.chunks_exact(d).enumerate() {
                    let (h, i) = (g * group + r / self.t, r % self.t);
                    let at = ((b * self.t + i) * heads + h) * d;
                    o[at..at + d].copy_from_slice(row);
                }
            }
        }
        o
    }

    /// Multiply-adds of the step, as `attend` counts them.
    fn macs(&self) -> usize {
        self.batch * self.t * self.heads.heads * (self.offset + self.t) * self.heads.head_dim
    }

    /// The formula in f64.
    fn f64_reference(&self) -> Vec<f64> {
        let Heads {
            heads,
            kv_heads,
            head_dim: d,
        } = self.heads;
        let mut o = Vec::new();
        for b in 0..self.batch {
            for i in 0..self.t {
                for h in 0..heads {
                    let q = &self.q[((b * self.t + i) * heads + h) * d..][..d];
                    let head = (b * kv_heads + h / (heads / kv_heads)) * self.capacity * d;
                    let seen = self.offset + i + 1;
                    let scores: Vec<f64> = (0..seen)
                        .map(|n| {
                            let k = &self.keys[head + n * d..][..d];
                            let s: f64 = q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum();
                            s / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = w.iter().sum();
                    for c in 0..d {
                        let v = |n: usize| self.values[head + n * d + c] as f64;
                        o.push((0..seen).map(|n| w[n] / sum * v(n)).sum());
                    }
                }
            }
        }
        o
    }

    /// The candle ops the kernel replaced, on the same cache.
    fn candle_reference(&self) -> Vec<f32> {
        let Heads {
            heads,
            kv_heads,
            head_dim: d,
        } = self.heads;
        let (batch, t, total) = (self.batch, self.t, self.offset + self.t);
        let cpu = &Device::Cpu;
        let cached = |v: &[f32]| {
            Tensor::from_slice(v, (batch, kv_heads, self.capacity, d), cpu)
                .and_then(|c| c.narrow(2, 0, total))
                .unwrap()
        };
        let (keys, values) = (cached(&self.keys), cached(&self.values));
        let groups = heads / kv_heads;
        let q = Tensor::from_slice(&self.q, (batch, t, heads, d), cpu).unwrap();
        let q = q.transpose(1, 2).unwrap().contiguous().unwrap();
        let q = q.reshape((batch, kv_heads, groups * t, d)).unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let scores = (q.matmul(&keys.t().unwrap()).unwrap() * scale).unwrap();
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| {
                (0..total).map(move |j| {
                    if j <= self.offset + i {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t, total), cpu).unwrap();
        let scores = scores
            .reshape((batch, kv_heads, groups, t, total))
            .unwrap()
            .broadcast_add(&mask)
            .unwrap()
            .reshape((batch, kv_heads, groups * t, total))
            .unwrap();
        let weights = candle_nn::ops::softmax_last_dim(&scores).unwrap();
        let mixed = weights.matmul(&values.contiguous().unwrap()).unwrap();
        mixed
            .reshape((batch, heads, t, d))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    }
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, f64::max)
}

fn heads() -> impl Strategy<Value = Heads> {
    // Head dims below, at and beyond the 16 lanes, with and without a remainder, and past
    // the 8 vectors the AVX-512 kernel keeps in registers (144: the plain kernel); groups of
    // 1 to 5 query heads per key/value head (the AVX-512 kernel takes up to 4 in one pass: 5
    // is a pass of 4 and one of 1).
    (
        1usize..4,
        1usize..6,
        prop::sample::select(vec![1usize, 5, 16, 17, 33, 64, 128, 144]),
    )
        .prop_map(|(kv_heads, groups, head_dim)| Heads {
            heads: kv_heads * groups,
            kv_heads,
            head_dim,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_kernel_and_candles_ops_match_the_formula_in_f64(
        heads in heads(), batch in 1usize..3, offset in 0usize..20, t in 1usize..5, seed: u64,
    ) {
        let case = Case::new(heads, batch, offset, t, seed);
        let exact = case.f64_reference();
        let ours = case.kernel();
        let diff = max_diff(&ours, &exact);
        prop_assert!(diff < TOLERANCE, "kernel off by {diff}");
        let candle = case.candle_reference();
        let diff = max_diff(&candle, &exact);
        prop_assert!(diff < TOLERANCE, "candle off by {diff}");
    }

    #[test]
    fn every_instruction_set_and_thread_split_gives_the_same_bits(
        heads in heads(), offset in 0usize..20, t in 1usize..4, seed: u64,
    ) {
        let case = Case::new(heads, 2, offset, t, seed);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&case.baseline()), bits(&case.kernel()), "{:?}", Isa::detect());
    }

    #[test]
    fn a_query_sees_no_position_after_its_own(
        heads in heads(), offset in 0usize..10, t in 2usize..5, seed: u64,
    ) {
        let mut case = Case::new(heads, 1, offset, t, seed);
        let before = case.kernel();
        // Change the last query's key and value: every earlier query keeps its bits.
        let d = heads.head_dim;
        for g in 0..heads.kv_heads {
            let at = (g * case.capacity + offset + t - 1) * d;
            for x in &mut case.keys[at..at + d] { *x += 0.5; }
            for x in &mut case.values[at..at + d] { *x -= 0.5; }
        }
        let after = case.kernel();
        let row = heads.heads * d;
        let earlier = (t - 1) * row;
        prop_assert_eq!(&before[..earlier], &after[..earlier]);
        prop_assert!(before[earlier..] != after[earlier..]);
    }
}

#[test]
fn steps_on_the_pool_give_the_bits_of_the_calling_thread() {
    // SmolLM2's heads, far enough into the cache that the step goes to the pool; one new row
    // per sequence (written in place) and three (staged, then placed).
    let heads = Heads {
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
    };
    for t in [1, 3] {
        let case = Case::new(heads, 3, 200, t, 7 + t as u64);
        assert!(case.macs() >= PARALLEL_MIN_MACS);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&case.baseline()), bits(&case.kernel()), "t = {t}");
        let diff = max_diff(&case.kernel(), &case.f64_reference());
        assert!(diff < TOLERANCE, "t = {t}: {diff}");
    }
}

fn config(kv_heads: usize, head_dim: usize) -> LlamaConfig {
    LlamaConfig {
        layers: 2,
        hidden: kv_heads * head_dim,
        intermediate: 8,
        heads: kv_heads,
        kv_heads,
        head_dim,
        rotary_dim: head_dim,
        rope_base: 10_000.0,
        rms_eps: 1e-6,
        vocab_size: 4,
        context_length: 64,
    }
}

#[test]
fn the_cache_appends_token_major_rows_head_major_and_keeps_them_when_it_grows() {
    let (batch, kv_heads, d) = (2, 3, 4);
    let mut cache = KvCache::new(&config(kv_heads, d), batch, 2, &Device::Cpu);
    // Value of sequence b, position n, head g, component c.
    let value = |b: usize, n: usize, g: usize, c: usize| (1000 * b + 100 * n + 10 * g + c) as f32;
    let mut appended = 0;
    for t in [1, 2, 3] {
        let rows: Vec<f32> = (0..batch)
            .flat_map(|b| {
                (0..t).flat_map(move |i| {
                    (0..kv_heads)
                        .flat_map(move |g| (0..d).map(move |c| value(b, appended + i, g, c)))
                })
            })
            .collect();
        let negated: Vec<f32> = rows.iter().map(|v| -v).collect();
        for layer in 0..2 {
            let view = cache.append(layer, &rows, &negated).unwrap();
            for b in 0..batch {
                for g in 0..kv_heads {
                    for n in 0..appended + t {
                        for c in 0..d {
                            let at = ((b * kv_heads + g) * view.capacity + n) * d + c;
                            assert_eq!(view.keys[at], value(b, n, g, c));
                            assert_eq!(view.values[at], -value(b, n, g, c));
                        }
                    }
                }
            }
        }
        cache.advance(t);
        appended += t;
    }
    assert_eq!(cache.len(), 6);
    assert!(cache.append(0, &[0.0; 5], &[0.0; 5]).is_err());
    assert!(cache.append(0, &[0.0; 24], &[0.0; 48]).is_err());
}
