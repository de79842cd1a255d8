use super::*;
use crate::config::RawConfig;
use crate::tasks::{HeadModel, RoFormerForMaskedLM};

/// The slopes written out from the formula of [`alibi_slopes`]: `2^(-8h/n')` for the power of
/// two `n'` at or below `n`, then `2^(-4(2k-1)/n')`.
#[test]
fn alibi_slopes_follow_the_papers_formula() {
    let p = |e: f64| 2f64.powf(e);
    let cases: [(usize, Vec<f64>); 5] = [
        (1, vec![p(-8.0)]),
        (4, vec![p(-2.0), p(-4.0), p(-6.0), p(-8.0)]),
        (8, (1..=8).map(|h| p(-(h as f64))).collect()),
        // n' = 4: 2^-2, 2^-4, 2^-6, 2^-8, then k = 1: 2^(-4/4).
        (5, vec![p(-2.0), p(-4.0), p(-6.0), p(-8.0), p(-1.0)]),
        // n' = 8: 2^-1 .. 2^-8, then k = 1..4: 2^(-0.5), 2^(-1.5), 2^(-2.5), 2^(-3.5).
        (
            12,
            (1..=8)
                .map(|h| p(-(h as f64)))
                .chain([p(-0.5), p(-1.5), p(-2.5), p(-3.5)])
                .collect(),
        ),
    ];
    for (n, expected) in cases {
        let got = alibi_slopes(n);
        assert_eq!(got.len(), n);
        for (h, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!((g - e).abs() <= 1e-15 * e, "n = {n}, head {h}: {g} vs {e}");
        }
    }
    // The paper's example: 8 heads start at 1/2 and halve.
    assert_eq!(alibi_slopes(8)[0], 0.5);
    assert!(alibi_slopes(0).is_empty());
}

/// T5's buckets with its defaults (32 buckets, max distance 128), by hand: 16 buckets a side,
/// 8 exact, then bucket `8 + floor(ln(r/8) / ln(16) * 8)`, whose steps fall at
/// `r = 8 * 2^(k/2)`: 12, 16, 23, 32, 46, 64, 91; positive distances 16 buckets up.
/// (transformers 5.23's `_relative_position_bucket` gives the same on every case.)
#[test]
fn t5_buckets_match_the_formula_by_hand() {
    let bidirectional = [
        (0, 0),
        (-1, 1),
        (1, 17),
        (-7, 7),
        (7, 23),
        (-8, 8),
        (8, 24),
        (-11, 8),
        (-12, 9),
        (12, 25),
        (-15, 9),
        (-16, 10),
        (16, 26),
        (-22, 10),
        (-23, 11),
        (-31, 11),
        (-32, 12),
        (32, 28),
        (-45, 12),
        (-46, 13),
        (-63, 13),
        (-64, 14),
        (64, 30),
        (-90, 14),
        (-91, 15),
        (-127, 15),
        (-128, 15),
        (128, 31),
        (-1000, 15),
        (1000, 31),
    ];
    for (r, bucket) in bidirectional {
        assert_eq!(t5_bucket(r, true, 32, 128), bucket, "relative {r}");
    }
    // Causal: 32 buckets for the past (16 exact), none for the future.
    for (r, bucket) in [
        (0, 0),
        (5, 0),
        (-15, 15),
        (-16, 16),
        (-22, 18),
        (-64, 26),
        (-128, 31),
    ] {
        assert_eq!(t5_bucket(r, false, 32, 128), bucket, "causal relative {r}");
    }
    // 8 buckets, max distance 20: 4 a side, 2 exact, then 2 + floor(ln(r/2) / ln(10) * 2).
    for (r, bucket) in [
        (0, 0),
        (-1, 1),
        (1, 5),
        (-3, 2),
        (-4, 2),
        (-7, 3),
        (7, 7),
        (-100, 3),
    ] {
        assert_eq!(t5_bucket(r, true, 8, 20), bucket, "8/20 relative {r}");
    }
}

#[test]
fn alibi_bias_is_minus_slope_times_distance() {
    let bias = PositionBias::Alibi {
        slopes: alibi_slopes(2),
    };
    let b = bias
        .bias(Positions::START, 3, 3, DType::F32, &Device::Cpu)
        .unwrap();
    assert_eq!(b.dims(), [1, 2, 3, 3]);
    let v: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    // Head 0 (m = 1/16), then head 1 (m = 1/256); |i - j| row by row.
    let distances = [0., 1., 2., 1., 0., 1., 2., 1., 0.];
    for (h, m) in [(0, 1.0 / 16.0), (1, 1.0 / 256.0)] {
        for (k, d) in distances.iter().enumerate() {
            assert_eq!(v[h * 9 + k], -m * d, "head {h}, entry {k}");
        }
    }
    // Explicit positions: one bias per sequence, from the positions' differences.
    let b = bias
        .bias(
            Positions::Explicit(&[0, 1, 2, 5, 3, 5]),
            2,
            3,
            DType::F32,
            &Device::Cpu,
        )
        .unwrap();
    assert_eq!(b.dims(), [2, 2, 3, 3]);
    let v: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    // Sequence 1, head 0, query 0 (position 5): keys at 5, 3, 5.
    assert_eq!(&v[18..21], &[0.0, -2.0 / 16.0, 0.0]);
}

#[test]
fn t5_bias_reads_the_table_by_bucket() {
    // 4 buckets (2 a side, 1 exact), 2 heads: W[k, h] = 10 k + h.
    let table = Tensor::from_vec(
        vec![0f32, 1., 10., 11., 20., 21., 30., 31.],
        (4, 2),
        &Device::Cpu,
    )
    .unwrap();
    let bias = PositionBias::T5 {
        table,
        num_buckets: 4,
        max_distance: 8,
        bidirectional: true,
    };
    let b = bias
        .bias(Positions::START, 1, 2, DType::F32, &Device::Cpu)
        .unwrap();
    assert_eq!(b.dims(), [1, 2, 2, 2]);
    let v: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    // Relative positions [[0, 1], [-1, 0]]: buckets [[0, 3], [1, 0]].
    assert_eq!(v, [0., 30., 10., 0., 1., 31., 11., 1.]);
}

#[test]
fn positions_that_do_not_fit_the_batch_are_an_input_error() {
    let bias = PositionBias::Alibi {
        slopes: alibi_slopes(1),
    };
    assert!(matches!(
        bias.bias(
            Positions::Explicit(&[0, 1, 2]),
            2,
            2,
            DType::F32,
            &Device::Cpu
        ),
        Err(ModelError::Input(_))
    ));
    assert!(matches!(
        bias.bias(
            Positions::Fractional(&[0.0, 0.5]),
            1,
            2,
            DType::F32,
            &Device::Cpu
        ),
        Err(ModelError::Input(_))
    ));
    // A range's offset cancels; t shared positions give one bias for every sequence.
    let shared = bias.bias(Positions::Explicit(&[4, 7]), 3, 2, DType::F32, &Device::Cpu);
    let v: Vec<f32> = shared.unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(v, [0.0, -3.0 / 256.0, -3.0 / 256.0, 0.0]);
    let ranged = bias.bias(
        Positions::Range { offset: 9 },
        1,
        2,
        DType::F32,
        &Device::Cpu,
    );
    let v: Vec<f32> = ranged.unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(v, [0.0, -1.0 / 256.0, -1.0 / 256.0, 0.0]);
}

/// A small config of `position` positions, with `HEADS` heads (`extra` fields on top).
fn small_config(position: &str, extra: RawConfig) -> RoFormerConfig {
    RoFormerConfig::try_from(RawConfig {
        vocab_size: 30,
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: HEADS,
        intermediate_size: 24,
        position_embedding_type: Some(PositionEmbeddingType::parse(position).unwrap()),
        hidden_act: crate::Activation::Gelu,
        ..extra
    })
    .unwrap()
}

/// Heads of [`small_config`].
const HEADS: usize = 4;

/// A `[rows, len]` tensor of token ids.
fn ids(rows: &[&[u32]]) -> Tensor {
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), rows[0].len()), &Device::Cpu).unwrap()
}

/// T5 buckets are exact for distances below `num_buckets / 4`: with 64 buckets (16 exact a
/// side) and a table holding `-m_h |r|` at the bucket of `r`, the T5 model is the ALiBi model
/// with the same weights, on sequences of up to 16 tokens (within 1e-5, f32).
#[test]
fn t5_with_alibis_values_in_its_table_is_alibi() {
    let t5_cfg = small_config(
        "t5_relative",
        RawConfig {
            relative_attention_num_buckets: Some(64),
            ..RawConfig::default()
        },
    );
    let alibi_cfg = small_config("alibi", RawConfig::default());
    let t5 = crate::train::build_trainable::<RoFormerForMaskedLM>(&t5_cfg, None, 3, &Device::Cpu)
        .unwrap();
    let alibi =
        crate::train::build_trainable::<RoFormerForMaskedLM>(&alibi_cfg, None, 3, &Device::Cpu)
            .unwrap();
    let slopes = alibi_slopes(HEADS);
    let mut table = vec![0f32; 64 * HEADS];
    for r in -15i64..=15 {
        let bucket = t5_bucket(r, true, 64, 128);
        for (h, m) in slopes.iter().enumerate() {
            table[bucket * HEADS + h] = (-m * r.unsigned_abs() as f64) as f32;
        }
    }
    t5.params
        .get("roformer.encoder.relative_attention_bias.weight")
        .unwrap()
        .set(&Tensor::from_vec(table, (64, HEADS), &Device::Cpu).unwrap())
        .unwrap();
    let x: Vec<u32> = (0..16).map(|i| 2 + (i * 7) % 27).collect();
    let x = ids(&[&x]);
    let mask = ids(&[&[1; 16]]);
    let a = t5
        .model
        .forward(&x, None, Some(&mask), None)
        .unwrap()
        .logits;
    let b = alibi
        .model
        .forward(&x, None, Some(&mask), None)
        .unwrap()
        .logits;
    let d = test_support::max_abs_diff(&a, &b);
    assert!(d < 1e-5, "{d}");
    // And the bias matters: a zero table is another model.
    let none = crate::train::build_trainable::<RoFormerForMaskedLM>(
        &small_config("none", RawConfig::default()),
        None,
        3,
        &Device::Cpu,
    )
    .unwrap();
    let c = none
        .model
        .forward(&x, None, Some(&mask), None)
        .unwrap()
        .logits;
    assert!(test_support::max_abs_diff(&b, &c) > 1e-4);
}
