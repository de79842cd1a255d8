//! The fused path against the op-by-op encoder, and its maths against references.

use candle_core::DType;
use candle_nn::{VarBuilder, VarMap};
use rotary::Positions;

use super::*;
use crate::config::{RawConfig, RoFormerConfig};
use crate::encoder::Encoder;
use crate::mode::Mode;
use crate::plan::Plan;
use crate::score_mask::ScoreMask;

/// An encoder of `raw` with random weights: the var map's initialisers for the dense
/// layers, and N(1, 0.2^2) / N(0, 0.2^2) layer norm weights and biases (not the identity,
/// so that a mix-up of norm parameters shows).
fn random_encoder(raw: RawConfig) -> (Encoder, RoFormerConfig) {
    let cfg = RoFormerConfig::try_from(raw).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let encoder = Encoder::load(vb.pp("encoder"), &cfg).unwrap();
    for (name, var) in varmap.data().lock().unwrap().iter() {
        if name.contains("LayerNorm") {
            let shape = var.shape().clone();
            let mean = if name.ends_with("weight") { 1.0 } else { 0.0 };
            var.set(&Tensor::randn(mean, 0.2f32, shape, &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    (encoder, cfg)
}

/// An additive mask `[b, 1, 1, t]` hiding the last `pad[s]` keys of sequence `s`.
pub(crate) fn padding_mask(t: usize, pad: &[usize]) -> Tensor {
    let values: Vec<f32> = pad
        .iter()
        .flat_map(|&p| (0..t).map(move |j| if j + p >= t { f32::MIN } else { 0.0 }))
        .collect();
    Tensor::from_vec(values, (pad.len(), 1, 1, t), &Device::Cpu).unwrap()
}

/// An additive causal mask `[1, 1, t, t]`.
fn causal_mask(t: usize) -> Tensor {
    let values: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::MIN } else { 0.0 }))
        .collect();
    Tensor::from_vec(values, (1, 1, t, t), &Device::Cpu).unwrap()
}

use test_support::max_abs_diff;

/// Runs `encoder` fused (asserting the fused path ran) and op by op on random `[b, t,
/// hidden]` inputs, on `threads` threads, and returns the largest difference.
fn fused_vs_ops(
    encoder: &Encoder,
    cfg: &RoFormerConfig,
    b: usize,
    t: usize,
    positions: Positions<'_>,
    mask: Option<&Tensor>,
    threads: usize,
) -> f64 {
    let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
    let (fused, ops) = fused_and_ops(encoder, &x, positions, mask, threads);
    max_abs_diff(&fused, &ops)
}

/// The outputs of `encoder` on `x`, fused (asserting the fused path ran) and op by op, on
/// `threads` threads.
fn fused_and_ops(
    encoder: &Encoder,
    x: &Tensor,
    positions: Positions<'_>,
    mask: Option<&Tensor>,
    threads: usize,
) -> (Tensor, Tensor) {
    let (b, t, _) = x.dims3().unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let coefficients = encoder
            .rope()
            .map(|rope| rope.coefficients(positions, b, t).unwrap());
        let parts: Vec<LayerParts<'_>> = encoder
            .layers()
            .iter()
            .map(|l| l.fusable().unwrap())
            .collect();
        let rope = coefficients.as_ref().map(|c| c.view());
        let fused = encoder_forward(&parts, x, rope, mask)
            .unwrap()
            .expect("the fused path applies");
        let ops = encoder
            .forward_ops(
                x,
                coefficients.as_ref(),
                &ScoreMask::new(mask, None),
                Plan::new(Mode::Inference, &Device::Cpu, DType::F32),
            )
            .unwrap();
        assert_eq!(fused.dims(), ops.dims());
        (fused, ops)
    })
}

fn tiny(hidden_act: &str) -> RawConfig {
    RawConfig {
        vocab_size: 10,
        hidden_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 96,
        hidden_act: hidden_act.parse().unwrap(),
        layer_norm_eps: 1e-12,
        ..RawConfig::default()
    }
}

// Tolerance: both paths compute in f32 with different summation orders (blocked products
// against candle's, row sums in 16 lanes) and the polynomial exp/erf here (within a few
// 1e-7 of libm): differences of a few 1e-6 on layer-normed outputs of size ~1. A wrong
// head, position, mask row or bias moves outputs by ~0.1 or more.
const TOLERANCE: f64 = 1e-4;

#[test]
fn fused_matches_op_by_op_with_padding_on_any_thread_count() {
    let (encoder, cfg) = random_encoder(tiny("gelu"));
    // b = 3 runs as one task over the threads (products split by columns); b = 4 as
    // sequence tasks on 2 threads; t = 300 takes two score tiles; 1100 rows make a single
    // task of uneven row blocks.
    for (b, t, pad) in [
        (3, 37, vec![0, 5, 36]),
        (4, 130, vec![0, 1, 2, 129]),
        (1, 300, vec![7]),
        (1, 1100, vec![3]),
    ] {
        let mask = padding_mask(t, &pad);
        for threads in [1, 2, 3] {
            let diff = fused_vs_ops(&encoder, &cfg, b, t, Positions::START, Some(&mask), threads);
            assert!(diff <= TOLERANCE, "b {b} t {t} threads {threads}: {diff}");
        }
    }
}

#[test]
fn fused_matches_op_by_op_causal_relu_without_mask() {
    let (encoder, cfg) = random_encoder(RawConfig {
        is_decoder: true,
        ..tiny("relu")
    });
    let mask = causal_mask(20);
    assert!(fused_vs_ops(&encoder, &cfg, 2, 20, Positions::START, Some(&mask), 2) <= TOLERANCE);
    assert!(fused_vs_ops(&encoder, &cfg, 5, 9, Positions::START, None, 2) <= TOLERANCE);
}

#[test]
fn fused_matches_op_by_op_rotary_value_and_explicit_positions() {
    let (encoder, cfg) = random_encoder(RawConfig {
        rotary_value: true,
        ..tiny("silu")
    });
    let (b, t) = (4, 11);
    // Per-sequence positions (left padding, a far offset), then shared ones.
    let own: Vec<u32> = (0..b as u32)
        .flat_map(|s| (0..t as u32).map(move |i| s * 1000 + i * (s + 1)))
        .collect();
    let shared: Vec<u32> = (0..t as u32).map(|i| 3 * i + 5).collect();
    for positions in [Positions::Explicit(&own), Positions::Explicit(&shared)] {
        for threads in [1, 2] {
            let diff = fused_vs_ops(&encoder, &cfg, b, t, positions, None, threads);
            assert!(diff <= TOLERANCE, "{diff}");
        }
    }
}

#[test]
fn fused_matches_op_by_op_for_rms_norm_without_biases() {
    let (encoder, cfg) = random_encoder(RawConfig {
        norm_type: crate::config::NormType::RmsNorm,
        use_bias: false,
        ..tiny("gelu")
    });
    let mask = padding_mask(16, &[3, 0]);
    assert!(fused_vs_ops(&encoder, &cfg, 2, 16, Positions::START, Some(&mask), 2) <= TOLERANCE);
}

#[test]
fn fused_matches_op_by_op_without_rotary_positions() {
    let (encoder, cfg) = random_encoder(RawConfig {
        position_embedding_type: Some(crate::config::PositionEmbeddingType::None),
        ..tiny("gelu")
    });
    assert!(encoder.rope().is_none());
    let mask = padding_mask(16, &[3, 0]);
    assert!(fused_vs_ops(&encoder, &cfg, 2, 16, Positions::START, Some(&mask), 2) <= TOLERANCE);
}

#[test]
fn fused_matches_op_by_op_with_a_per_head_mask() {
    let (encoder, cfg) = random_encoder(tiny("gelu"));
    // A bias per (sequence, head, query, key), as a position bias with padding gives.
    let per_head = Tensor::randn(
        0f32,
        1.0,
        (2, cfg.num_attention_heads, 16, 16),
        &Device::Cpu,
    )
    .unwrap();
    assert!(fused_vs_ops(&encoder, &cfg, 2, 16, Positions::START, Some(&per_head), 2) <= TOLERANCE);
}

#[test]
fn other_masks_devices_and_dtypes_take_the_op_path() {
    let (encoder, cfg) = random_encoder(tiny("gelu"));
    let parts: Vec<LayerParts<'_>> = encoder
        .layers()
        .iter()
        .map(|l| l.fusable().unwrap())
        .collect();
    let x = Tensor::randn(0f32, 1.0, (2, 5, cfg.hidden_size), &Device::Cpu).unwrap();
    let c = encoder
        .rope()
        .unwrap()
        .coefficients(Positions::START, 2, 5)
        .unwrap();
    // A mask of 3 heads for a model of 4 is not a shape the fused path reads.
    let three_heads = Tensor::zeros((2, 3, 5, 5), DType::F32, &Device::Cpu).unwrap();
    assert!(
        encoder_forward(&parts, &x, Some(c.view()), Some(&three_heads))
            .unwrap()
            .is_none()
    );
    let f64_x = x.to_dtype(DType::F64).unwrap();
    assert!(encoder_forward(&parts, &f64_x, Some(c.view()), None)
        .unwrap()
        .is_none());
}

/// The fused path in bf16 (weights packed once, products of bf16-rounded operands summed in
/// f32) against the op-by-op f32 path. Each rounding is within 2^-9 relative, so a product's
/// result is off by about 2^-9 of its size; through two layer-normed layers (attention and the
/// norms amplify) the outputs, of size ~1, move by 5e-3 on average and by up to 5e-2 at the
/// worst of ~10^4 elements (measured: means 4.5e-3..6.5e-3, maxima 0.038..0.049). A packing or
/// panel mix-up moves them by ~1 on average.
const BF16_MEAN_TOLERANCE: f32 = 1e-2;
const BF16_MAX_TOLERANCE: f64 = 0.1;

#[test]
fn bf16_fused_matches_f32_op_by_op_within_bf16_rounding() {
    let (mut encoder, cfg) = random_encoder(RawConfig {
        hidden_size: 96,
        intermediate_size: 200,
        num_attention_heads: 3,
        ..tiny("gelu")
    });
    encoder.set_precision(Precision::Bf16).unwrap();
    let native = crate::cpu::bf16::native().is_some();
    // b = 3 on 2 threads splits products by columns (two column tasks, a partial panel);
    // b = 4 runs sequence tasks; 1100 rows take row blocks.
    for (b, t, pad, threads) in [
        (3, 37, vec![0, 5, 36], 2),
        (4, 130, vec![0, 1, 2, 129], 2),
        (1, 1100, vec![3], 2),
        (2, 45, vec![0, 4], 1),
    ] {
        let mask = padding_mask(t, &pad);
        let x = Tensor::randn(0f32, 1.0, (b, t, cfg.hidden_size), &Device::Cpu).unwrap();
        let (fused, ops) = fused_and_ops(&encoder, &x, Positions::START, Some(&mask), threads);
        let diff = max_abs_diff(&fused, &ops);
        if native {
            let mean: f32 = (&fused - &ops)
                .and_then(|d| d.abs()?.mean_all()?.to_scalar())
                .unwrap();
            assert!(mean <= BF16_MEAN_TOLERANCE, "b {b} t {t}: mean {mean}");
            assert!(diff <= BF16_MAX_TOLERANCE, "b {b} t {t}: max {diff}");
            assert!(
                diff > 1e-5,
                "b {b} t {t}: {diff}: the bf16 path did not run"
            );
        } else {
            assert!(
                diff <= TOLERANCE,
                "no native bf16: f32 expected, b {b} t {t}: {diff}"
            );
        }
    }
    encoder.set_precision(Precision::F32).unwrap();
    let mask = padding_mask(37, &[0, 5, 36]);
    let diff = fused_vs_ops(&encoder, &cfg, 3, 37, Positions::START, Some(&mask), 2);
    assert!(diff <= TOLERANCE, "back to f32: {diff}");
}
