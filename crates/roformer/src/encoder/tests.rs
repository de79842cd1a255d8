//! The encoder layer as one training op (`autograd::encoder_layer`) against the op-by-op
//! layer: candle's autograd in f64 (the slow reference) where it can run (candle's rotary op
//! has no f64 kernel), else the op-by-op fused f32 ops; in bf16 against the same path in
//! bf16 and in f32: values and every gradient, with and without dropout.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use rotary::Positions;
use test_support::{max_abs, max_abs_diff};

use super::{Encoder, Layer};
use crate::autograd::tests::{random, to_vec};
use crate::config::{PositionEmbeddingType, RawConfig, RoFormerConfig};
use crate::cpu::reference_path::{self, ReferencePath};
use crate::cpu::Precision;
use crate::fused::tests::padding_mask;
use crate::mode::{Dropout, Mode};
use crate::plan::Plan;
use crate::score_mask::ScoreMask;

/// A tiny layer config: hidden 48 in 4 heads, intermediate 96, the erf GELU, dropout `p` on
/// the probabilities and the hidden states.
fn tiny(p: f64) -> RawConfig {
    RawConfig {
        vocab_size: 10,
        hidden_size: 48,
        num_hidden_layers: 1,
        num_attention_heads: 4,
        intermediate_size: 96,
        hidden_dropout_prob: p,
        attention_probs_dropout_prob: p,
        layer_norm_eps: 1e-12,
        ..RawConfig::default()
    }
}

/// The variables of `map`, by name, as one list (sorted).
fn vars(map: &VarMap) -> Vec<(String, Var)> {
    let mut v: Vec<(String, Var)> = map
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// One encoder (of one layer) of `raw` with random weights in f32, and the same weights in
/// f64: the var map's initialisers for the dense layers, N(1, 0.2^2) / N(0, 0.2^2) layer
/// norm weights and biases (not the identity, so that a mix-up of norm parameters shows),
/// N(0, 0.1^2) dense biases.
fn twins(raw: RawConfig) -> ((Encoder, VarMap), (Encoder, VarMap), RoFormerConfig) {
    let cfg = RoFormerConfig::try_from(raw).unwrap();
    let load = |dtype| {
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, dtype, &Device::Cpu);
        (Encoder::load(vb.pp("encoder"), &cfg).unwrap(), map)
    };
    let (f32s, f64s) = (load(DType::F32), load(DType::F64));
    for ((name, v32), (_, v64)) in vars(&f32s.1).into_iter().zip(vars(&f64s.1)) {
        let shape = v32.shape().clone();
        let (mean, std) = match name {
            n if n.contains("LayerNorm") && n.ends_with("weight") => (1.0, 0.2),
            n if n.ends_with("bias") => (0.0, 0.1),
            _ => (0.0, 0.0),
        };
        if std > 0.0 {
            v32.set(&Tensor::randn(mean, std as f32, shape, &Device::Cpu).unwrap())
                .unwrap();
        }
        v64.set(&v32.to_dtype(DType::F64).unwrap()).unwrap();
    }
    (f32s, f64s, cfg)
}

/// The layer's output and the gradients of `sum(y * w)` (a fixed random `w`) with respect
/// to the input and every variable (by name, sorted), in f64.
struct Run {
    y: Vec<f64>,
    grads: Vec<(String, Vec<f64>)>,
}

/// Runs the encoder's layer on `x` in `dtype` with products in `precision`, the whole-layer
/// op when `fused` (asserting that it applies), the two sub-layers op by op otherwise, with
/// dropout seeded by `seed`, and collects [`Run`].
fn run(
    (encoder, map): &(Encoder, VarMap),
    x: &Tensor,
    mask: Option<&Tensor>,
    dtype: DType,
    precision: Precision,
    fused: bool,
    seed: u64,
) -> Run {
    let layer: &Layer = &encoder.layers()[0];
    let x = Var::from_tensor(&x.to_dtype(dtype).unwrap()).unwrap();
    let mask = mask.map(|m| m.to_dtype(dtype).unwrap());
    let (b, t, _) = x.dims3().unwrap();
    let coefficients = encoder
        .rope()
        .map(|r| r.coefficients(Positions::START, b, t).unwrap());
    let dropout = Dropout::seeded(seed);
    let plan = Plan::new(
        Mode::Train {
            dropout: &dropout,
            precision,
        },
        &Device::Cpu,
        dtype,
    );
    let score_mask = ScoreMask::new(mask.as_ref(), None);
    let y = if fused {
        layer
            .forward_fused(x.as_tensor(), coefficients.as_ref(), &score_mask, plan)
            .unwrap()
            .expect("the fused layer applies")
    } else {
        layer
            .forward_sublayers(x.as_tensor(), coefficients.as_ref(), &score_mask, plan)
            .unwrap()
    };
    // The same loss weights on every run (the gradients of one loss are compared).
    let w = random(y.dims(), 11, 1.0).to_dtype(dtype).unwrap();
    let loss = (&y * w).unwrap().sum_all().unwrap();
    let store = loss.backward().unwrap();
    let mut grads = vec![("input".to_string(), to_vec(store.get(&x).unwrap()))];
    for (name, v) in vars(map) {
        let g = store
            .get(&v)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        grads.push((name, to_vec(g)));
    }
    Run {
        y: to_vec(&y),
        grads,
    }
}

/// The largest difference of `fast` from `slow`, relative to `slow`'s largest magnitude (at
/// least 1), over the output and every gradient; and the name of the worst.
fn worst(fast: &Run, slow: &Run) -> (f64, String) {
    let rel = |a: &[f64], b: &[f64]| max_abs_diff(a, b) / max_abs(b).max(1.0);
    let mut out = (rel(&fast.y, &slow.y), "output".to_string());
    assert_eq!(fast.grads.len(), slow.grads.len());
    for ((name, a), (other, b)) in fast.grads.iter().zip(&slow.grads) {
        assert_eq!(name, other);
        assert_eq!(a.len(), b.len(), "{name}");
        let d = rel(a, b);
        if d > out.0 || d.is_nan() {
            out = (d, name.clone());
        }
    }
    out
}

// Tolerance against the f64 reference: the fused op computes in f32 (blocked products,
// polynomial exp and erf within a few 1e-7 of libm, row sums in lanes), so values and
// gradients differ from f64 by a few f32 roundings of sums over at most 96 terms: ~1e-6
// relative. 1e-4 leaves room for the GELU's and the norms' conditioning; a wrong weight,
// head, mask row or dropout element moves a gradient by 1e-2 or more.
const F32_TOLERANCE: f64 = 1e-4;

#[test]
fn the_fused_layer_is_candles_autograd_in_f64_with_and_without_dropout() {
    for (name, raw, pad) in [
        ("rotary, no dropout", tiny(0.0), vec![0, 3]),
        ("rotary, dropout 0.1", tiny(0.1), vec![2, 0]),
        (
            "rotary value, dropout 0.2",
            RawConfig {
                rotary_value: true,
                ..tiny(0.2)
            },
            vec![0, 0],
        ),
        (
            "no positions, no biases, dropout 0.1",
            RawConfig {
                position_embedding_type: Some(PositionEmbeddingType::None),
                use_bias: false,
                ..tiny(0.1)
            },
            vec![1, 5],
        ),
    ] {
        let (f32s, f64s, cfg) = twins(raw);
        let (b, t) = (2, 13);
        let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
        let mask = padding_mask(t, &pad);
        let fused = run(&f32s, &x, Some(&mask), DType::F32, Precision::F32, true, 7);
        // candle's rotary op has no f64 kernel: rotary layers are held to the op-by-op path
        // of fused f32 ops (each tested against its candle twin), the others to f64.
        let slow = match f64s.0.rope() {
            Some(_) => run(&f32s, &x, Some(&mask), DType::F32, Precision::F32, false, 7),
            None => run(&f64s, &x, Some(&mask), DType::F64, Precision::F32, false, 7),
        };
        let (diff, what) = worst(&fused, &slow);
        assert!(diff <= F32_TOLERANCE, "{name}: {what} off by {diff}");
        // Every parameter has a gradient that moves (a dropped one would be zero).
        for (n, g) in &fused.grads {
            assert!(max_abs(&g[..]) > 0.0, "{name}: {n} has a zero gradient");
        }
    }
}

#[test]
fn a_different_dropout_seed_gives_a_different_layer() {
    // The seed reaches the fused op's masks: another seed must change the output (so the
    // matching above is the same masks, not no masks).
    let (f32s, _, cfg) = twins(tiny(0.2));
    let x = Tensor::randn(0f32, 1.0, (2, 9, cfg.hidden_size), &Device::Cpu).unwrap();
    let a = run(&f32s, &x, None, DType::F32, Precision::F32, true, 7);
    let b = run(&f32s, &x, None, DType::F32, Precision::F32, true, 8);
    assert!(max_abs_diff(&a.y[..], &b.y[..]) > 1e-2);
}

// Tolerance in bf16: both paths round the same operands (the dense layers' inputs and output
// gradients, the attention's) to bf16 and sum in f32, in a different order and at slightly
// different places (the op-by-op path rounds the tails' outputs where it packs them); a bf16
// rounding is 2^-9 relative, and a handful of them through the norms gives ~1e-2 relative at
// worst. A wrong operand or layout moves values by O(1).
const BF16_TOLERANCE: f64 = 3e-2;

#[test]
fn the_fused_layer_in_bf16_is_the_op_by_op_fused_ops_in_bf16() {
    if Precision::Bf16.effective() != Precision::Bf16 {
        return; // no native bf16 dot product here: both paths would be f32
    }
    let (f32s, _, cfg) = twins(tiny(0.1));
    let (b, t) = (3, 17);
    let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
    let mask = padding_mask(t, &[0, 4, 1]);
    let fused = run(&f32s, &x, Some(&mask), DType::F32, Precision::Bf16, true, 3);
    let ops = run(
        &f32s,
        &x,
        Some(&mask),
        DType::F32,
        Precision::Bf16,
        false,
        3,
    );
    let (diff, what) = worst(&fused, &ops);
    assert!(diff <= BF16_TOLERANCE, "{what} off by {diff}");
    let f32_ops = run(&f32s, &x, Some(&mask), DType::F32, Precision::F32, false, 3);
    let (diff, what) = worst(&fused, &f32_ops);
    assert!(diff <= BF16_TOLERANCE, "against f32: {what} off by {diff}");
}

#[test]
fn the_fused_layer_reads_nothing_recycled_and_packs_weights_once_to_the_same_bits() {
    // The layer op takes its kept activations and scratch rows from `cpu::recycle`, whose
    // buffers hold the last user's values. A second run after every held buffer is overwritten
    // with NaN must give the same output and gradients to the bit (the runs are
    // deterministic: fixed-order sums, seeded masks); an element read before it is written
    // would be NaN, or at least another value.
    let (f32s, _, cfg) = twins(tiny(0.1));
    let (b, t) = (2, 11);
    let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
    let mask = padding_mask(t, &[0, 3]);
    for precision in [Precision::F32, Precision::Bf16.effective()] {
        let first = run(&f32s, &x, Some(&mask), DType::F32, precision, true, 5);
        crate::cpu::recycle::poison();
        let second = run(&f32s, &x, Some(&mask), DType::F32, precision, true, 5);
        let bits = |r: &Run| -> Vec<u64> {
            let grads = r.grads.iter().flat_map(|(_, g)| g.iter());
            r.y.iter().chain(grads).map(|v| v.to_bits()).collect()
        };
        assert!(first.y.iter().all(|v| v.is_finite()), "{precision:?}");
        assert_eq!(bits(&first), bits(&second), "{precision:?}");
        // Each weight packed once for the step reads the same words as each product packing
        // its own, so the same sums, to the bit.
        let per_product = reference_path::with(ReferencePath::WeightsPerProduct, || {
            run(&f32s, &x, Some(&mask), DType::F32, precision, true, 5)
        });
        assert_eq!(
            bits(&first),
            bits(&per_product),
            "{precision:?} packed once"
        );
        // So does the attention's q, k and v packed once per head.
        let attention_per_product = reference_path::with(ReferencePath::OperandsPerProduct, || {
            run(&f32s, &x, Some(&mask), DType::F32, precision, true, 5)
        });
        assert_eq!(
            bits(&first),
            bits(&attention_per_product),
            "{precision:?} attention operands packed once"
        );
    }
}
