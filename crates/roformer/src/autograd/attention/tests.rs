//! The training attention with bf16 operands packed once per head against the same op
//! packing them per product: the same bits, values and gradients, where our bf16 kernel runs
//! (the words are the same, so the products are; oneDNN, where it is chosen, takes some of the
//! per-product calls and sums in another order).

use candle_core::{Device, Tensor, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rotary::{Layout, Positions, Rope};

use super::{apply, AttentionCore, AttentionOp, FusedAttention, KeptInputs};
use crate::cpu::bf16::{native, Kernel};
use crate::cpu::Precision;
use crate::mode::Dropout;

/// One case: `b` sequences of `t` tokens, `heads` heads of `d`, the masking (`"padding"`,
/// `"causal"`, `"bias"`: a learned `[1, heads, t, t]` bias beside padding, `"none"`), the
/// dropout rate, rotary positions (and whether v turns too).
struct Case {
    b: usize,
    t: usize,
    heads: usize,
    d: usize,
    masking: &'static str,
    p: f64,
    rotary: (bool, bool),
}

/// The text layer's shapes (short sequences, padding, causal, a learned bias), odd sizes
/// past the tiles (`t` = 7, 13; `d` = 5: an odd depth), two tiles of query rows (`t` = 300:
/// 218 rows a tile, not a whole number of panels) and the ViT block's (54 tokens, 3 heads of
/// 64).
const CASES: [Case; 6] = [
    Case {
        b: 2,
        t: 7,
        heads: 2,
        d: 8,
        masking: "padding",
        p: 0.1,
        rotary: (true, false),
    },
    Case {
        b: 2,
        t: 13,
        heads: 2,
        d: 6,
        masking: "causal",
        p: 0.2,
        rotary: (true, true),
    },
    Case {
        b: 1,
        t: 13,
        heads: 3,
        d: 5,
        masking: "bias",
        p: 0.0,
        rotary: (false, false),
    },
    Case {
        b: 1,
        t: 300,
        heads: 1,
        d: 8,
        masking: "bias",
        p: 0.1,
        rotary: (true, false),
    },
    Case {
        b: 2,
        t: 54,
        heads: 3,
        d: 64,
        masking: "none",
        p: 0.1,
        rotary: (true, false),
    },
    Case {
        b: 1,
        t: 54,
        heads: 3,
        d: 64,
        masking: "none",
        p: 0.0,
        rotary: (true, false),
    },
];

fn random(rng: &mut StdRng, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn bits(x: &Tensor) -> Vec<u32> {
    let v = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl Case {
    fn name(&self) -> String {
        let Case {
            b, t, heads, d, p, ..
        } = self;
        format!(
            "b {b}, t {t}, {heads} heads of {d}, {}, p {p}",
            self.masking
        )
    }

    /// The additive mask of the case.
    fn mask(&self) -> Option<Tensor> {
        let (b, t) = (self.b, self.t);
        let low = f32::MIN;
        match self.masking {
            "padding" | "bias" => {
                // The last sequence ends in three padding tokens.
                let m: Vec<f32> = (0..b * t)
                    .map(|i| {
                        if i / t == b - 1 && i % t >= t - 3 {
                            low
                        } else {
                            0.0
                        }
                    })
                    .collect();
                Some(Tensor::from_vec(m, (b, 1, 1, t), &Device::Cpu).unwrap())
            }
            "causal" => {
                let m: Vec<f32> = (0..t * t)
                    .map(|i| if i % t > i / t { low } else { 0.0 })
                    .collect();
                Some(Tensor::from_vec(m, (1, 1, t, t), &Device::Cpu).unwrap())
            }
            _ => None,
        }
    }

    /// The op's spec in bf16, its dropout drawn from a fresh stream of seed 5.
    fn spec(&self) -> FusedAttention {
        let Case { b, t, heads, d, .. } = *self;
        let rope = self.rotary.0.then(|| {
            let rope = Rope::new(d, d, rotary::DEFAULT_BASE, Layout::Interleaved).unwrap();
            rope.coefficients(Positions::START, b, t).unwrap()
        });
        FusedAttention {
            heads,
            mask: self.mask(),
            rope,
            rotary_value: self.rotary.1,
            dropout: Dropout::seeded(5).keep_mask(b * heads * t * t, self.p),
            precision: Precision::Bf16,
        }
    }
}

/// Whether our bf16 kernel runs every product (no bf16 on this CPU: nothing to compare;
/// oneDNN chosen: it takes some per-product calls).
fn our_kernel() -> bool {
    native() == Some(Kernel::Avx512Bf16)
}

#[test]
fn the_op_with_operands_packed_once_gives_the_same_bits_as_per_product() {
    if !our_kernel() {
        return;
    }
    for case in &CASES {
        let Case { b, t, heads, d, .. } = *case;
        let h = heads * d;
        let mut rng = StdRng::seed_from_u64(t as u64 + 100 * d as u64);
        let qkv = Var::from_tensor(&random(&mut rng, &[b, t, 3 * h])).unwrap();
        let bias = Var::from_tensor(&random(&mut rng, &[1, heads, t, t])).unwrap();
        let weights = random(&mut rng, &[b, t, h]);
        let run = |per_product: bool| {
            let mut op = AttentionOp::new(case.spec());
            op.per_product = per_product;
            let learned = case.masking == "bias";
            let out = apply(qkv.as_tensor(), learned.then(|| bias.as_tensor()), op).unwrap();
            let grads = (&out * &weights).unwrap().sum_all().unwrap();
            let grads = grads.backward().unwrap();
            let dbias = learned.then(|| bits(grads.get(&bias).unwrap()));
            (bits(&out), bits(grads.get(&qkv).unwrap()), dbias)
        };
        let (once, per_product) = (run(false), run(true));
        let name = case.name();
        assert!(once.0 == per_product.0, "{name}: the context");
        assert!(once.1 == per_product.1, "{name}: the projections' gradient");
        assert!(once.2 == per_product.2, "{name}: the bias's gradient");
        let dq_size = once
            .1
            .iter()
            .map(|&x| f32::from_bits(x).abs())
            .fold(0.0, f32::max);
        assert!(dq_size > 1e-3, "{name}: a gradient of {dq_size}");
    }
}

#[test]
fn the_core_with_operands_packed_once_gives_the_same_bits_as_per_product() {
    if !our_kernel() {
        return;
    }
    for case in CASES.iter().filter(|c| c.masking != "bias") {
        let Case { b, t, heads, d, .. } = *case;
        let h = heads * d;
        let mut rng = StdRng::seed_from_u64(t as u64 + 7 * d as u64);
        let part = |rng: &mut StdRng| -> Vec<f32> {
            (0..b * t * h)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        let (q, k, v, g) = (
            part(&mut rng),
            part(&mut rng),
            part(&mut rng),
            part(&mut rng),
        );
        let run = |per_product: bool| {
            let mut core = AttentionCore::new(case.spec()).unwrap();
            core.0.per_product = per_product;
            let dims = (b, t, 3 * h);
            let out = core
                .forward((q.clone(), k.clone(), v.clone()), dims)
                .unwrap();
            let kept_words = matches!(core.0.saved.get().unwrap().inputs, KeptInputs::Words { .. });
            (out, core.backward(dims, &g).unwrap(), kept_words)
        };
        let (once, per_product) = (run(false), run(true));
        let name = case.name();
        assert!(once.2 && !per_product.2, "{name}: the packed-once path ran");
        assert!(same_bits(&once.0, &per_product.0), "{name}: the context");
        let (a, r) = (&once.1, &per_product.1);
        for (what, x, y) in [("dq", &a.0, &r.0), ("dk", &a.1, &r.1), ("dv", &a.2, &r.2)] {
            assert!(same_bits(x, y), "{name}: {what}");
        }
    }
}
