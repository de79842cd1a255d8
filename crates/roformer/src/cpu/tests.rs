//! The row maths against double-precision and libm references, and the task splits.

use candle_core::{Device, Tensor};

use super::math::{exp_approx, gelu_erf, layer_norm_row, rms_norm_row, EXP_MIN};
use super::policy::{pack_group, row_blocks, sequences_per_task};

#[test]
fn exp_approx_is_within_a_few_ulp() {
    for i in 0..=200_000 {
        let x = (-100.0 + i as f32 * 1e-3 * 0.94).min(88.0); // -100 ..= 88
        let got = f64::from(exp_approx(x));
        if x < EXP_MIN {
            assert_eq!(got, 0.0, "{x}");
            continue;
        }
        let want = f64::from(x).exp();
        // 2^-126 is the smallest normal f32: below it only absolute accuracy is possible.
        let err = (got - want).abs() / want.max(f64::from(f32::MIN_POSITIVE));
        assert!(err < 3e-7, "exp({x}) = {got}, want {want}: rel {err}");
    }
    assert_eq!(exp_approx(0.0), 1.0);
    assert_eq!(exp_approx(f32::NEG_INFINITY), 0.0);
    assert!(exp_approx(f32::NAN).is_nan());
}

#[test]
fn gelu_erf_matches_libm_erf() {
    let xs: Vec<f32> = (0..=40_000).map(|i| -10.0 + i as f32 * 5e-4).collect();
    let mut got = xs.clone();
    gelu_erf(&mut got);
    let want: Vec<f32> = Tensor::new(xs.as_slice(), &Device::Cpu)
        .unwrap()
        .gelu_erf()
        .unwrap()
        .to_vec1()
        .unwrap();
    for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
        // Abramowitz-Stegun 7.1.26 is within 1.5e-7 of erf; gelu scales it by x / 2.
        let tolerance = 2e-7 * (1.0 + x.abs()) + 2.0 * f32::EPSILON * w.abs();
        assert!((g - w).abs() <= tolerance, "gelu({x}) = {g}, want {w}");
    }
}

#[test]
fn norms_match_a_double_precision_reference() {
    let row: Vec<f32> = (0..389)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let weight: Vec<f32> = (0..389).map(|i| 1.0 + (i % 7) as f32 / 10.0).collect();
    let bias: Vec<f32> = (0..389).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect();
    let n = row.len() as f64;
    let mean = row.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    let mut got = row.clone();
    let (got_mean, rstd) = layer_norm_row(&mut got, &weight, &bias, 1e-5);
    assert!((f64::from(got_mean) - mean).abs() < 1e-6);
    assert!((f64::from(rstd) - 1.0 / (var + 1e-5).sqrt()).abs() < 1e-5);
    for i in 0..row.len() {
        let want = (f64::from(row[i]) - mean) / (var + 1e-5).sqrt() * f64::from(weight[i])
            + f64::from(bias[i]);
        assert!((f64::from(got[i]) - want).abs() < 1e-5, "{i}");
    }
    let ms = row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / n;
    let mut got = row.clone();
    rms_norm_row(&mut got, 1e-6);
    for i in 0..row.len() {
        let want = f64::from(row[i]) / (ms + 1e-6).sqrt();
        assert!((f64::from(got[i]) - want).abs() < 1e-5, "{i}");
    }
}

#[test]
fn blocks_cover_the_rows_and_tasks_split_the_batch() {
    for rows in [1, 63, 64, 65, 1000, 5000] {
        for threads in [1, 2, 3, 8] {
            let blocks = row_blocks(rows, threads);
            assert_eq!(blocks.first().unwrap().start, 0);
            assert_eq!(blocks.last().unwrap().end, rows);
            assert!(blocks.windows(2).all(|w| w[0].end == w[1].start));
            assert!(blocks.iter().all(|b| !b.is_empty()));
        }
    }
    assert_eq!(sequences_per_task(8, 512, 2), 1);
    assert_eq!(sequences_per_task(8, 128, 2), 4);
    assert_eq!(sequences_per_task(3, 512, 2), 3); // 3 tasks on 2 threads: one task
    assert_eq!(sequences_per_task(1, 512, 2), 1);
    assert_eq!(sequences_per_task(8, 512, 1), 8);
}

#[test]
fn packing_tasks_split_small_operands_over_the_threads() {
    // A 256-column weight (8 panels of 32) and a 256-row operand (22 panels of 12) on two
    // threads: several tasks each, not one.
    assert_eq!(pack_group(8, 32, 2), 1);
    assert_eq!(pack_group(22, 12, 2), 3);
    // Large operands: tasks of at most 256 lanes; tiny ones: at least 32 lanes.
    assert_eq!(pack_group(1000, 32, 2), 8);
    assert_eq!(pack_group(1000, 12, 2), 21);
    assert_eq!(pack_group(4, 12, 8), 3);
    assert_eq!(pack_group(0, 12, 2), 3);
    assert_eq!(pack_group(5, 300, 2), 1);
}
