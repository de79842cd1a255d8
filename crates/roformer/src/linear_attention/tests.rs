//! Tests of eq. 19: the linear-time forms against the formula, causality, masks, relativity.

use candle_core::{Device, Tensor};
use proptest::prelude::*;
use rotary::{Layout, Positions, Rope};
use test_support::{SplitMix64, GAMMA};

use super::*;

/// Deterministic pseudo-random values in [-2, 2) (SplitMix64).
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed.wrapping_mul(GAMMA).wrapping_add(1));
    (0..len).map(|_| rng.unit_f32() * 4.0 - 2.0).collect()
}

/// One attention problem: q, k `[b, h, t, d]`, v `[b, h, t, dv]` as flat vectors.
struct Case {
    b: usize,
    h: usize,
    t: usize,
    d: usize,
    dv: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// `[b, t]` 0/1 key mask, if any.
    mask: Option<Vec<f32>>,
}

impl Case {
    fn new(b: usize, h: usize, t: usize, d: usize, dv: usize, seed: u64) -> Case {
        Case {
            b,
            h,
            t,
            d,
            dv,
            q: data(b * h * t * d, seed),
            k: data(b * h * t * d, seed + 1),
            v: data(b * h * t * dv, seed + 2),
            mask: None,
        }
    }

    fn tensors(&self) -> (Tensor, Tensor, Tensor, Option<Tensor>) {
        let dev = Device::Cpu;
        let (b, h, t) = (self.b, self.h, self.t);
        let q = Tensor::from_slice(&self.q, (b, h, t, self.d), &dev).unwrap();
        let k = Tensor::from_slice(&self.k, (b, h, t, self.d), &dev).unwrap();
        let v = Tensor::from_slice(&self.v, (b, h, t, self.dv), &dev).unwrap();
        let mask = self
            .mask
            .as_ref()
            .map(|m| Tensor::from_slice(m, (b, t), &dev).unwrap());
        (q, k, v, mask)
    }

    fn rope(&self) -> Rope {
        Rope::new(self.d, self.d, 10_000.0, Layout::Interleaved).unwrap()
    }

    /// Runs `f` on the case's tensors with coefficients for positions `offset..offset + t`.
    fn run(
        &self,
        offset: usize,
        f: impl Fn(
            &Tensor,
            &Tensor,
            &Tensor,
            &Coefficients,
            Option<&Tensor>,
        ) -> candle_core::Result<Tensor>,
    ) -> Vec<f32> {
        let (q, k, v, mask) = self.tensors();
        let coefficients = self
            .rope()
            .coefficients(Positions::Range { offset }, self.b, self.t)
            .unwrap();
        let out = f(&q, &k, &v, &coefficients, mask.as_ref()).unwrap();
        assert_eq!(out.dims(), [self.b, self.h, self.t, self.dv]);
        out.flatten_all().unwrap().to_vec1().unwrap()
    }

    fn fast(&self, chunk: usize, masking: Masking) -> Vec<f32> {
        let attention = LinearAttention::new(chunk).unwrap();
        self.run(0, |q, k, v, c, m| {
            attention.forward(q, k, v, Some(c), m, masking)
        })
    }

    fn slow(&self, masking: Masking) -> Vec<f32> {
        self.run(0, |q, k, v, c, m| {
            linear_attention_slow(q, k, v, Some(c), m, masking)
        })
    }

    /// Eq. 19 in plain f64 loops, with its own rotation (interleaved pairs, angle
    /// `m * 10000^(-2i/d)`) and feature map: independent of candle and of the rotary kernels.
    fn formula(&self, masking: Masking) -> Vec<f64> {
        let (d, dv, t) = (self.d, self.dv, self.t);
        let phi = |x: f32| {
            let x = f64::from(x);
            if x > 0.0 {
                x + 1.0
            } else {
                x.exp()
            }
        };
        let rotate = |x: &[f64], m: usize| -> Vec<f64> {
            let mut y = x.to_vec();
            for i in 0..d / 2 {
                let angle = m as f64 * 10_000f64.powf(-2.0 * i as f64 / d as f64);
                let (s, c) = angle.sin_cos();
                y[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
                y[2 * i + 1] = x[2 * i + 1] * c + x[2 * i] * s;
            }
            y
        };
        let mut out = Vec::new();
        for bi in 0..self.b {
            for hi in 0..self.h {
                let row = |src: &[f32], w: usize, n: usize| {
                    let at = ((bi * self.h + hi) * t + n) * w;
                    src[at..at + w].to_vec()
                };
                for m in 0..t {
                    let fq: Vec<f64> = row(&self.q, d, m).into_iter().map(phi).collect();
                    let rq = rotate(&fq, m);
                    let (mut num, mut den) = (vec![0f64; dv], 0f64);
                    let last = if masking == Masking::Causal { m + 1 } else { t };
                    for n in 0..last {
                        let keep = self
                            .mask
                            .as_ref()
                            .map_or(1.0, |mk| f64::from(mk[bi * t + n]));
                        let fk: Vec<f64> = row(&self.k, d, n).into_iter().map(phi).collect();
                        let rk = rotate(&fk, n);
                        let a: f64 = rq.iter().zip(&rk).map(|(x, y)| x * y).sum::<f64>() * keep;
                        den += fq.iter().zip(&fk).map(|(x, y)| x * y).sum::<f64>() * keep;
                        for (acc, vn) in num.iter_mut().zip(row(&self.v, dv, n)) {
                            *acc += a * f64::from(vn);
                        }
                    }
                    out.extend(num.iter().map(|x| if den > 0.0 { x / den } else { 0.0 }));
                }
            }
        }
        out
    }
}

/// Largest |a - b| relative to the largest |b| (outputs are ratios of sums over up to t terms
/// whose size varies a lot between rows, so one scale per output is the fair yardstick).
fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()));
    diff / scale
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// Tolerance against the f64 formula. The f32 paths round phi, cos/sin (2^-24 each) and
/// accumulate sums of up to t ~ 100 products of magnitude ~10: relative error ~1e-6 in
/// practice; 2e-5 leaves an order of magnitude of room without hiding a wrong term (a missing
/// or extra key changes outputs by ~1e-2 and more).
const TOL: f64 = 2e-5;

#[test]
fn both_forms_equal_the_formula() {
    // Shapes with a partial last chunk, a chunk longer than the sequence, chunk 1, one token.
    for (b, h, t, d, dv, chunk) in [
        (2, 3, 37, 8, 5, 8),
        (1, 2, 20, 16, 16, 64),
        (1, 1, 9, 4, 3, 1),
        (2, 1, 1, 6, 2, 4),
        (1, 2, 64, 32, 8, 16),
    ] {
        let case = Case::new(b, h, t, d, dv, (t * 31 + d) as u64);
        for masking in [Masking::Bidirectional, Masking::Causal] {
            let exact = case.formula(masking);
            let slow = rel_err(&case.slow(masking), &exact);
            let fast = rel_err(&case.fast(chunk, masking), &exact);
            assert!(slow < TOL, "slow {masking:?} t={t} d={d}: {slow}");
            assert!(
                fast < TOL,
                "fast {masking:?} t={t} d={d} chunk={chunk}: {fast}"
            );
        }
    }
}

#[test]
fn padding_keys_drop_out() {
    // The last 5 keys of sequence 1 are padding: its first 13 outputs equal those of the
    // 13-token sequence alone (same positions 0..13), for both maskings.
    let (t, keep) = (18, 13);
    let mut case = Case::new(2, 2, t, 8, 4, 7);
    let mut mask = vec![1f32; 2 * t];
    mask[t + keep..].fill(0.0);
    case.mask = Some(mask);
    for masking in [Masking::Bidirectional, Masking::Causal] {
        let exact = case.formula(masking);
        assert!(rel_err(&case.fast(4, masking), &exact) < TOL);
        assert!(rel_err(&case.slow(masking), &exact) < TOL);

        let full = case.fast(4, masking);
        let mut short = Case::new(1, 2, keep, 8, 4, 0);
        let pick = |src: &[f32], w: usize| -> Vec<f32> {
            (0..2)
                .flat_map(|hi| {
                    let at = ((2 + hi) * t) * w; // batch 1, head hi
                    src[at..at + keep * w].to_vec()
                })
                .collect()
        };
        short.q = pick(&case.q, 8);
        short.k = pick(&case.k, 8);
        short.v = pick(&case.v, 4);
        let alone = widen(&short.fast(4, masking));
        let padded = pick(&full, 4);
        assert!(rel_err(&padded, &alone) < TOL, "{masking:?}");
    }
}

#[test]
fn fully_masked_queries_give_zero() {
    let mut case = Case::new(1, 1, 6, 4, 2, 3);
    case.mask = Some(vec![0.0; 6]);
    for masking in [Masking::Bidirectional, Masking::Causal] {
        assert!(case.fast(4, masking).iter().all(|&x| x == 0.0));
        assert!(case.slow(masking).iter().all(|&x| x == 0.0));
    }
}

#[test]
fn bad_arguments_are_errors() {
    assert_eq!(
        LinearAttention::new(0),
        Err(LinearAttentionError::ZeroChunk)
    );
    let case = Case::new(1, 2, 5, 4, 3, 1);
    let (q, k, v, _) = case.tensors();
    let c = case.rope().coefficients(Positions::START, 1, 5).unwrap();
    let la = LinearAttention::default();
    let short_k = k.narrow(2, 0, 4).unwrap();
    assert!(la
        .forward(&q, &short_k, &v, Some(&c), None, Masking::Causal)
        .is_err());
    let short_v = v.narrow(2, 0, 4).unwrap();
    assert!(la
        .forward(&q, &k, &short_v, Some(&c), None, Masking::Causal)
        .is_err());
    let bad_mask = Tensor::ones((1, 4), DType::F32, &Device::Cpu).unwrap();
    assert!(la
        .forward(
            &q,
            &k,
            &v,
            Some(&c),
            Some(&bad_mask),
            Masking::Bidirectional
        )
        .is_err());
    let few_rows = case.rope().coefficients(Positions::START, 1, 3).unwrap();
    assert!(la
        .forward(&q, &k, &v, Some(&few_rows), None, Masking::Causal)
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Causal output at m does not depend on tokens after m: replacing every q, k, v after
    /// `m` leaves outputs 0..=m unchanged (they see the same terms; only rounding of sums with
    /// the same operands could differ, so 1e-6 relative), while the bidirectional output does
    /// change (the test can fail).
    #[test]
    fn causal_output_ignores_later_tokens(
        t in 2usize..40,
        cut in 0usize..39,
        chunk in 1usize..20,
        seed in 0u64..1000,
    ) {
        let m = cut % (t - 1);
        let case = Case::new(1, 2, t, 8, 4, seed);
        let mut other = Case::new(1, 2, t, 8, 4, seed + 500);
        // Same tokens up to m, different after.
        for (dst, src, w) in [(&mut other.q, &case.q, 8), (&mut other.k, &case.k, 8), (&mut other.v, &case.v, 4)] {
            for hi in 0..2 {
                let at = hi * t * w;
                dst[at..at + (m + 1) * w].copy_from_slice(&src[at..at + (m + 1) * w]);
            }
        }
        let prefix = |x: &[f32]| -> Vec<f32> {
            (0..2).flat_map(|hi| x[hi * t * 4..(hi * t + m + 1) * 4].to_vec()).collect()
        };
        let a = prefix(&case.fast(chunk, Masking::Causal));
        let b = widen(&prefix(&other.fast(chunk, Masking::Causal)));
        prop_assert!(rel_err(&a, &b) < 1e-6, "{}", rel_err(&a, &b));
        let a = prefix(&case.fast(chunk, Masking::Bidirectional));
        let b = widen(&prefix(&other.fast(chunk, Masking::Bidirectional)));
        prop_assert!(rel_err(&a, &b) > 1e-3);
    }

    /// The numerator depends on positions through n - m only: shifting every position by the
    /// same offset leaves the output unchanged (cos/sin of exact f64 angles, rounded once).
    #[test]
    fn shifting_all_positions_changes_nothing(offset in 1usize..100_000, seed in 0u64..1000) {
        let case = Case::new(1, 2, 12, 8, 4, seed);
        for masking in [Masking::Bidirectional, Masking::Causal] {
            let la = LinearAttention::new(5).unwrap();
            let at0 = case.run(0, |q, k, v, c, m| la.forward(q, k, v, Some(c), m, masking));
            let at = case.run(offset, |q, k, v, c, m| la.forward(q, k, v, Some(c), m, masking));
            prop_assert!(rel_err(&at, &widen(&at0)) < TOL);
        }
    }
}
