//! The fused training ops against the candle compositions they replace (their slow twins and
//! the model's op-by-op attention): values and gradients.

use crate::cpu::Precision;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::Linear;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rotary::{rotate_tensor, Direction, Layout, Order, Positions, Rope};

use crate::activation::Activation;
use crate::attention::softmax_attention;
use crate::autograd::attention::{attention, FusedAttention};
use crate::autograd::cross_entropy::cross_entropy;
use crate::autograd::dropout::{dropout, dropout_add, dropout_slow};
use crate::autograd::embedding::embed;
use crate::autograd::layer_scale::{scaled_residual, scaled_residual_slow};
use crate::autograd::linear::linear;
use crate::mode::{Dropout, Mode};
use crate::score_mask::ScoreMask;

fn random(rng: &mut StdRng, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn var(rng: &mut StdRng, dims: &[usize]) -> Var {
    Var::from_tensor(&random(rng, dims)).unwrap()
}

use test_support::max_abs_diff;

/// `sum(y * w)` for a fixed random `w`: a loss whose gradient with respect to `y` is `w`.
fn weighted_sum(y: &Tensor, seed: u64) -> Tensor {
    let w = random(&mut StdRng::seed_from_u64(seed), y.dims());
    (y * w).unwrap().sum_all().unwrap()
}

#[test]
fn linear_matches_matmul_bias_and_gelu_with_gradients() {
    let mut rng = StdRng::seed_from_u64(1);
    for (bias, activation) in [
        (true, None),
        (true, Some(Activation::Gelu)),
        (false, Some(Activation::Relu)),
    ] {
        let x = var(&mut rng, &[2, 5, 7]);
        let w = var(&mut rng, &[3, 7]);
        let b = var(&mut rng, &[3]);
        let layer = Linear::new(w.as_tensor().clone(), bias.then(|| b.as_tensor().clone()));
        let fused = linear(x.as_tensor(), &layer, activation, Precision::F32, None).unwrap();
        let mut reference = x
            .as_tensor()
            .broadcast_matmul(&w.as_tensor().t().unwrap())
            .unwrap();
        if bias {
            reference = reference.broadcast_add(b.as_tensor()).unwrap();
        }
        if let Some(a) = activation {
            reference = a.forward(&reference).unwrap();
        }
        assert_eq!(fused.dims(), &[2, 5, 3]);
        assert!(max_abs_diff(&fused, &reference) < 1e-5);
        let gf = weighted_sum(&fused, 9).backward().unwrap();
        let gr = weighted_sum(&reference, 9).backward().unwrap();
        let mut checked = vec![&x, &w];
        if bias {
            checked.push(&b);
        }
        for v in checked {
            let (a, r) = (gf.get(v).unwrap(), gr.get(v).unwrap());
            assert!(
                max_abs_diff(a, r) < 2e-5,
                "{activation:?}: {}",
                max_abs_diff(a, r)
            );
        }
    }
}

/// The op-by-op attention of `crate::attention` on token-major q, k, v.
#[allow(clippy::too_many_arguments)]
fn composite_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    rope: Option<&rotary::Coefficients>,
    rotary_value: bool,
    mask: Option<&Tensor>,
    dropout: (&Dropout, f64),
) -> Tensor {
    let (b, t, h) = q.dims3().unwrap();
    let split = |x: &Tensor, rotate: bool| {
        let x = x.reshape((b, t, heads, h / heads)).unwrap();
        let x = match (rope, rotate) {
            (Some(c), true) => {
                rotate_tensor(&x, c.clone(), Order::TokenMajor, Direction::Forward).unwrap()
            }
            _ => x,
        };
        x.transpose(1, 2).unwrap().contiguous().unwrap()
    };
    let context = softmax_attention(
        &split(q, true),
        &split(k, true),
        &split(v, rotary_value),
        mask,
        Mode::Train {
            dropout: dropout.0,
            precision: crate::cpu::Precision::F32,
        },
        dropout.1,
    )
    .unwrap();
    context.transpose(1, 2).unwrap().reshape((b, t, h)).unwrap()
}

#[test]
fn attention_matches_the_op_by_op_path_with_gradients() {
    let low = f32::MIN;
    // t = 300 takes two tiles of query rows (65536 / 300 = 218 rows per tile).
    for (t, rotary, rotary_value, masking, p) in [
        (9, true, false, "padding", 0.0),
        (9, true, true, "causal", 0.3),
        (300, true, false, "padding", 0.1),
        (17, false, false, "none", 0.2),
        (11, false, false, "bias", 0.2),
        (300, false, false, "bias", 0.0),
        (13, true, false, "fixed bias", 0.1),
    ] {
        let (b, heads, d) = (2, 2, 8);
        let h = heads * d;
        let mut rng = StdRng::seed_from_u64(t as u64);
        let (q, k, v) = (
            var(&mut rng, &[b, t, h]),
            var(&mut rng, &[b, t, h]),
            var(&mut rng, &[b, t, h]),
        );
        let bias = var(&mut rng, &[1, heads, t, t]);
        let rope = Rope::new(d, d, rotary::DEFAULT_BASE, Layout::Interleaved).unwrap();
        let coefficients = rotary.then(|| rope.coefficients(Positions::START, b, t).unwrap());
        // (the constant mask, the bias added to the scores)
        let (mask, bias_term) = match masking {
            "padding" => {
                // The second sequence ends in three padding tokens.
                let m: Vec<f32> = (0..b * t)
                    .map(|i| {
                        if i / t == 1 && i % t >= t - 3 {
                            low
                        } else {
                            0.0
                        }
                    })
                    .collect();
                (
                    Some(Tensor::from_vec(m, (b, 1, 1, t), &Device::Cpu).unwrap()),
                    None,
                )
            }
            "causal" => {
                let m: Vec<f32> = (0..t * t)
                    .map(|i| if i % t > i / t { low } else { 0.0 })
                    .collect();
                (
                    Some(Tensor::from_vec(m, (1, 1, t, t), &Device::Cpu).unwrap()),
                    None,
                )
            }
            // A per-head position bias that learns (T5's), `[1, heads, t, t]`, beside padding.
            "bias" => {
                let padding: Vec<f32> = (0..b * t)
                    .map(|i| {
                        if i / t == 1 && i % t >= t - 2 {
                            low
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let padding = Tensor::from_vec(padding, (b, 1, 1, t), &Device::Cpu).unwrap();
                (Some(padding), Some(bias.as_tensor().clone()))
            }
            // A fixed per-head bias shared by the sequences (ALiBi's), without a mask.
            "fixed bias" => (None, Some(bias.as_tensor().detach())),
            _ => (None, None),
        };
        let score_mask = ScoreMask::new(mask.as_ref(), bias_term.clone());
        let fused_dropout = Dropout::seeded(5);
        let qkv = Tensor::cat(&[q.as_tensor(), k.as_tensor(), v.as_tensor()], 2).unwrap();
        let fused = attention(
            &qkv,
            bias_term.as_ref(),
            FusedAttention {
                heads,
                mask: mask.clone(),
                rope: coefficients.clone(),
                rotary_value,
                dropout: fused_dropout.keep_mask(b * heads * t * t, p),
                precision: Precision::F32,
            },
        )
        .unwrap();
        let reference = composite_attention(
            q.as_tensor(),
            k.as_tensor(),
            v.as_tensor(),
            heads,
            coefficients.as_ref(),
            rotary_value,
            score_mask.sum().unwrap(),
            (&Dropout::seeded(5), p),
        );
        let case = format!("t {t}, rotary {rotary}/{rotary_value}, {masking}, p {p}");
        assert!(max_abs_diff(&fused, &reference) < 1e-5, "{case}: values");
        let gf = weighted_sum(&fused, 3).backward().unwrap();
        let gr = weighted_sum(&reference, 3).backward().unwrap();
        for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
            let diff = max_abs_diff(gf.get(x).unwrap(), gr.get(x).unwrap());
            assert!(diff < 1e-4, "{case}: d{name} differs by {diff}");
        }
        match (gf.get(&bias), gr.get(&bias)) {
            (Some(f), Some(r)) => {
                assert_eq!(masking, "bias", "{case}: a gradient for a fixed mask");
                let diff = max_abs_diff(f, r);
                assert!(diff < 1e-5, "{case}: dbias differs by {diff}");
                let size = test_support::max_abs(r);
                assert!(size > 1e-3, "{case}: the bias gradient is {size}");
            }
            (None, None) => assert_ne!(masking, "bias", "{case}: no bias gradient"),
            (f, r) => panic!(
                "{case}: bias gradient fused {:?}, reference {:?}",
                f.is_some(),
                r.is_some()
            ),
        }
    }
}

#[test]
fn keep_masks_repeat_on_any_thread_count_and_follow_the_stream() {
    use rand::RngCore;
    use rand_chacha::ChaCha8Rng;
    let n = 3 * (1 << 16) + 77;
    let draw = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let d = Dropout::seeded(11);
                let first = d.keep_mask(n, 0.25).unwrap();
                let second = d.keep_mask(n, 0.25).unwrap();
                (first.factors(), second.factors())
            })
    };
    let one = draw(1);
    assert_eq!(one, draw(3));
    assert_ne!(one.0, one.1, "each call draws a new mask");
    // Element i is kept when word i of the call's stream is at least p * 2^32.
    let mut generator = ChaCha8Rng::seed_from_u64(11);
    let mut key = [0u8; 32];
    generator.fill_bytes(&mut key);
    let mut stream = ChaCha8Rng::from_seed(key);
    let threshold = (0.25 * 4_294_967_296.0) as u32;
    for (i, &f) in one.0.iter().enumerate() {
        let kept = stream.next_u32() >= threshold;
        assert_eq!(f != 0.0, kept, "element {i}");
    }
    let dropped = one.0.iter().filter(|&&f| f == 0.0).count() as f64 / n as f64;
    assert!((dropped - 0.25).abs() < 0.01, "{dropped}");
}

#[test]
fn dropout_ops_scale_by_the_mask_with_gradients() {
    let mut rng = StdRng::seed_from_u64(4);
    let (y, r) = (var(&mut rng, &[3, 50]), var(&mut rng, &[3, 50]));
    let mask = Dropout::seeded(2).keep_mask(150, 0.4).unwrap();
    let factors = Tensor::from_vec(mask.factors(), (3, 50), &Device::Cpu).unwrap();
    let fused = dropout_add(y.as_tensor(), r.as_tensor(), mask.clone()).unwrap();
    let reference = ((y.as_tensor() * &factors).unwrap() + r.as_tensor()).unwrap();
    assert!(max_abs_diff(&fused, &reference) < 1e-6);
    let g = weighted_sum(&fused, 1).backward().unwrap();
    let w = random(&mut StdRng::seed_from_u64(1), &[3, 50]);
    assert!(max_abs_diff(g.get(&y).unwrap(), &(&w * &factors).unwrap()) < 1e-6);
    assert!(max_abs_diff(g.get(&r).unwrap(), &w) < 1e-6);
    let alone = dropout(y.as_tensor(), mask).unwrap();
    assert!(max_abs_diff(&alone, &(y.as_tensor() * &factors).unwrap()) < 1e-6);
    // The slow path (here in f64) uses the same factors.
    let y64 = y.as_tensor().to_dtype(DType::F64).unwrap();
    let mask = Dropout::seeded(2).keep_mask(150, 0.4).unwrap();
    let composite = dropout_slow(&y64, mask)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert!(max_abs_diff(&composite, &alone) < 1e-6);
}

/// The layer scale, stochastic depth and residual add of a block as one op: the same values
/// and gradients as its candle twin, with and without a per-sample mask (a mask of 70 samples
/// draws dropped ones), on awkward sizes (one token, a width of 1 and of 33). Both sides do
/// the same f32 operations in the same order except the scale's gradient, a column sum added
/// in another order: 1e-5 on sums of at most 70 x 3 terms of size 1.
#[test]
fn scaled_residual_matches_its_twin_with_gradients() {
    let mut rng = StdRng::seed_from_u64(11);
    for (samples, tokens, width) in [(70, 3, 33), (2, 1, 1), (3, 5, 16)] {
        for p in [None, Some(0.4)] {
            let dims = [samples, tokens, width];
            let (a, r, lambda) = (
                var(&mut rng, &dims),
                var(&mut rng, &dims),
                var(&mut rng, &[width]),
            );
            let keep = || p.and_then(|p| Dropout::seeded(5).keep_mask(samples, p));
            let fused =
                scaled_residual(a.as_tensor(), lambda.as_tensor(), r.as_tensor(), keep()).unwrap();
            let reference =
                scaled_residual_slow(a.as_tensor(), lambda.as_tensor(), r.as_tensor(), keep())
                    .unwrap();
            assert_eq!(max_abs_diff(&fused, &reference), 0.0, "{dims:?} {p:?}");
            let gf = weighted_sum(&fused, 3).backward().unwrap();
            let gr = weighted_sum(&reference, 3).backward().unwrap();
            for v in [&a, &r, &lambda] {
                let d = max_abs_diff(gf.get(v).unwrap(), gr.get(v).unwrap());
                assert!(d < 1e-5, "{dims:?} {p:?}: {d}");
            }
        }
    }
    let mask = Dropout::seeded(5).keep_mask(70, 0.4).unwrap();
    assert!((0..70).any(|i| !mask.keeps(i)) && (0..70).any(|i| mask.keeps(i)));
    let (a, lambda) = (random(&mut rng, &[2, 3, 4]), random(&mut rng, &[4]));
    let wrong = [
        scaled_residual(&a, &lambda, &random(&mut rng, &[2, 3, 5]), None),
        scaled_residual(&a, &random(&mut rng, &[3]), &a, None),
        scaled_residual(&a, &lambda, &a, Dropout::seeded(1).keep_mask(3, 0.5)),
    ];
    assert!(wrong.iter().all(Result::is_err));
}

#[test]
fn cross_entropy_matches_log_softmax_with_gradients() {
    let mut rng = StdRng::seed_from_u64(8);
    let logits = Var::from_tensor(&(random(&mut rng, &[6, 37]) * 4.0).unwrap()).unwrap();
    let targets: Vec<u32> = (0..6).map(|i| (i * 7 + 3) % 37).collect();
    let (loss, predictions) = cross_entropy(logits.as_tensor(), &targets).unwrap();
    let log_probs = candle_nn::ops::log_softmax(logits.as_tensor(), D::Minus1).unwrap();
    let index = Tensor::from_slice(&targets, (6, 1), &Device::Cpu).unwrap();
    let reference =
        (log_probs.gather(&index, 1).unwrap().sum_all().unwrap() * (-1.0 / 6.0)).unwrap();
    assert!(max_abs_diff(&loss, &reference) < 1e-5);
    let argmax = logits
        .as_tensor()
        .argmax(D::Minus1)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    assert_eq!(predictions, argmax);
    let gf = (loss * 3.0).unwrap().backward().unwrap();
    let gr = (reference * 3.0).unwrap().backward().unwrap();
    assert!(max_abs_diff(gf.get(&logits).unwrap(), gr.get(&logits).unwrap()) < 1e-6);
    assert!(cross_entropy(logits.as_tensor(), &[40, 0, 0, 0, 0, 0]).is_err());
    assert!(cross_entropy(logits.as_tensor(), &[0]).is_err());
}

#[test]
fn embedding_matches_index_select_with_gradients() {
    let mut rng = StdRng::seed_from_u64(6);
    let (word, types) = (var(&mut rng, &[11, 70]), var(&mut rng, &[3, 70]));
    // Repeated ids: their gradient rows add up.
    let ids: Vec<u32> = vec![4, 0, 10, 4, 4, 7];
    for type_ids in [None, Some(vec![0u32, 2, 1, 1, 0, 2])] {
        let fused = embed(
            word.as_tensor(),
            types.as_tensor(),
            ids.clone(),
            type_ids.clone(),
            (2, 3),
        )
        .unwrap();
        let index = Tensor::from_slice(&ids, 6, &Device::Cpu).unwrap();
        let type_index =
            Tensor::from_vec(type_ids.clone().unwrap_or(vec![0; 6]), 6, &Device::Cpu).unwrap();
        let reference = (word.as_tensor().index_select(&index, 0).unwrap()
            + types.as_tensor().index_select(&type_index, 0).unwrap())
        .unwrap()
        .reshape((2, 3, 70))
        .unwrap();
        assert_eq!(max_abs_diff(&fused, &reference), 0.0);
        let gf = weighted_sum(&fused, 2).backward().unwrap();
        let gr = weighted_sum(&reference, 2).backward().unwrap();
        for v in [&word, &types] {
            assert!(max_abs_diff(gf.get(v).unwrap(), gr.get(v).unwrap()) < 1e-6);
        }
    }
    let bad = embed(word.as_tensor(), types.as_tensor(), vec![11], None, (1, 1));
    assert!(bad.is_err());
}

/// `t` rounded to bf16 (to nearest even), back in f32.
fn bf16_rounded(t: &Tensor) -> Tensor {
    t.to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
}

#[test]
fn bf16_linear_is_the_f32_op_on_bf16_rounded_operands() {
    let native = crate::cpu::bf16::native().is_some();
    let mut rng = StdRng::seed_from_u64(21);
    let x = random(&mut rng, &[3, 40, 70]);
    let w = random(&mut rng, &[50, 70]);
    let b = random(&mut rng, &[50]);
    // The loss weights, bf16-exact, so that the incoming gradient is too.
    let g = bf16_rounded(&random(&mut rng, &[3, 40, 50]));
    let run = |x: &Tensor, w: &Tensor, precision: Precision| {
        let (x, w, b) = (
            Var::from_tensor(x).unwrap(),
            Var::from_tensor(w).unwrap(),
            Var::from_tensor(&b).unwrap(),
        );
        let layer = Linear::new(w.as_tensor().clone(), Some(b.as_tensor().clone()));
        let y = linear(x.as_tensor(), &layer, None, precision, None).unwrap();
        let grads = (&y * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let grad = |v: &Var| grads.get(v).unwrap().clone();
        (y, grad(&x), grad(&w), grad(&b))
    };
    let fast = run(&x, &w, Precision::Bf16);
    let (xr, wr) = if native {
        (bf16_rounded(&x), bf16_rounded(&w))
    } else {
        (x.clone(), w.clone())
    };
    let reference = run(&xr, &wr, Precision::F32);
    // Same products of the same (rounded) operands, summed in another order: within a few
    // f32 ulps of sums of ~70 terms of size ~1. dx = g W and dW = g^T x read bf16-exact
    // operands on both sides.
    for (name, a, r) in [
        ("y", &fast.0, &reference.0),
        ("dx", &fast.1, &reference.1),
        ("dW", &fast.2, &reference.2),
        ("db", &fast.3, &reference.3),
    ] {
        let diff = max_abs_diff(a, r);
        assert!(diff < 2e-5, "{name}: {diff}");
    }
    if native {
        let unrounded = run(&x, &w, Precision::F32);
        assert!(
            max_abs_diff(&fast.0, &unrounded.0) > 1e-4,
            "the bf16 path did not run"
        );
    }
}

#[test]
fn bf16_attention_is_within_bf16_rounding_of_f32() {
    let mut rng = StdRng::seed_from_u64(22);
    let (b, t, heads, d) = (2, 37, 3, 16);
    let q = var(&mut rng, &[b, t, heads * d]);
    let k = var(&mut rng, &[b, t, heads * d]);
    let v = var(&mut rng, &[b, t, heads * d]);
    let rope = Rope::new(d, d, rotary::DEFAULT_BASE, Layout::Interleaved).unwrap();
    let coefficients = rope.coefficients(Positions::START, b, t).unwrap();
    let run = |precision: Precision| {
        let qkv = Tensor::cat(&[q.as_tensor(), k.as_tensor(), v.as_tensor()], 2).unwrap();
        let out = attention(
            &qkv,
            None,
            FusedAttention {
                heads,
                mask: None,
                rope: Some(coefficients.clone()),
                rotary_value: false,
                dropout: None,
                precision,
            },
        )
        .unwrap();
        let grads = weighted_sum(&out, 4).backward().unwrap();
        let grad = |x: &Var| grads.get(x).unwrap().clone();
        (out.clone(), [grad(&q), grad(&k), grad(&v)])
    };
    let (fast, fast_grads) = run(Precision::Bf16);
    let (slow, slow_grads) = run(Precision::F32);
    // Scores of 16 products of terms in [-1, 1] and contexts averaging values in [-1, 1]:
    // each bf16 operand is within 2^-9 relative, so values and gradients (of size ~1) move
    // by a few 1e-3; a wrong head, tile or operand moves them by ~0.5.
    let diff = max_abs_diff(&fast, &slow);
    assert!(diff < 2e-2, "values: {diff}");
    for (name, (f, s)) in ["dq", "dk", "dv"]
        .iter()
        .zip(fast_grads.iter().zip(&slow_grads))
    {
        let diff = max_abs_diff(f, s);
        assert!(diff < 5e-2, "{name}: {diff}");
    }
    if crate::cpu::bf16::native().is_some() {
        assert!(diff > 1e-5, "the bf16 path did not run: {diff}");
    }
}
