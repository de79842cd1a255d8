//! The row maths against double-precision and libm references, the task splits, and kept
//! activations' products against the products of their rows.

use candle_core::{Device, Tensor};

use super::math::{
    exp_approx, exp_fused, exp_sum, exp_sum_fused, gelu_backward, gelu_erf, gelu_erf_fast,
    gelu_erf_with_slope, layer_norm_row, rms_norm_row, EXP_MIN,
};
use super::policy::{pack_group, row_blocks, sequences_per_task};

#[test]
fn exp_approx_and_exp_fused_are_within_a_few_ulp() {
    for exp in [exp_approx, exp_fused] {
        for i in 0..=200_000 {
            let x = (-100.0 + i as f32 * 1e-3 * 0.94).min(88.0); // -100 ..= 88
            let got = f64::from(exp(x));
            if x < EXP_MIN {
                assert_eq!(got, 0.0, "{x}");
                continue;
            }
            let want = f64::from(x).exp();
            // 2^-126 is the smallest normal f32: below it only absolute accuracy is possible.
            let err = (got - want).abs() / want.max(f64::from(f32::MIN_POSITIVE));
            // 3e-7 is 2.5 ulp at the top of a binade, 5 at its bottom.
            assert!(err < 3e-7, "exp({x}) = {got}, want {want}: rel {err}");
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }
}

#[test]
fn exp_sums_agree_and_sum_what_they_write() {
    // A softmax row: the max subtracted, scores down to -90 (past EXP_MIN) and a -inf.
    let mut row: Vec<f32> = (0..203).map(|i| -((i * 37 % 203) as f32) * 0.45).collect();
    row[7] = f32::NEG_INFINITY;
    let (mut a, mut b) = (row.clone(), row.clone());
    let (sa, sb) = (exp_sum(&mut a, 0.0), exp_sum_fused(&mut b, 0.0));
    for (i, ((&x, &ea), &eb)) in row.iter().zip(&a).zip(&b).enumerate() {
        let want = f64::from(x).exp();
        for (what, e) in [("exp_sum", ea), ("exp_sum_fused", eb)] {
            if x < EXP_MIN {
                assert_eq!(e, 0.0, "{what} [{i}]");
                continue;
            }
            let err = (f64::from(e) - want).abs() / want.max(f64::from(f32::MIN_POSITIVE));
            assert!(err < 3e-7, "{what} [{i}] = {e}, want {want}");
        }
    }
    let want: f64 = row.iter().map(|&x| f64::from(x).exp()).sum();
    for s in [sa, sb] {
        assert!((f64::from(s) - want).abs() < 1e-6 * want, "{s} vs {want}");
    }
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

/// `x Phi(x)` in f64, `Phi(x) = erfc(-x / sqrt 2) / 2` by statrs' erfc (via candle), which
/// keeps its relative accuracy in the negative tail.
fn gelu_f64(x: f64) -> f64 {
    0.5 * x * candle_core::cpu::erf::erfc_f64(-x / std::f64::consts::SQRT_2)
}

#[test]
fn gelu_erf_fast_is_within_2_pow_minus_14_of_the_f64_gelu_relatively() {
    // Every 1/512 over [-14, 14] (the negative tail down to f32's smallest normal result and
    // the positive side well past Phi = 1), the extremes, and both zeros.
    let mut xs: Vec<f32> = (-7168..=7168).map(|i| i as f32 / 512.0).collect();
    xs.extend([-0.0, 1e-30, -1e-30, 40.0, 1e30, -20.0, f32::MAX]);
    let mut got = xs.clone();
    gelu_erf_fast(&mut got);
    let mut reference = xs.clone();
    gelu_erf(&mut reference);
    for ((&x, &g), &r) in xs.iter().zip(&got).zip(&reference) {
        let want = gelu_f64(f64::from(x));
        if want.abs() < f64::from(f32::MIN_POSITIVE) {
            // Below the smallest normal f32 only absolute accuracy is possible.
            assert!(
                f64::from(g).abs() < f64::from(f32::MIN_POSITIVE),
                "gelu({x}) = {g}"
            );
            continue;
        }
        let err = (f64::from(g) - want).abs() / want.abs();
        assert!(
            err < 2f64.powi(-14),
            "gelu({x}) = {g}, want {want}: rel {err}"
        );
        // The reference (absolute accuracy 1.5e-7 in erf) agrees where it is relatively exact.
        if x > -3.0 {
            let diff = f64::from(g - r).abs();
            assert!(
                diff <= 2e-7 * (1.0 + f64::from(x.abs())) + 1e-4 * want.abs(),
                "{x}"
            );
        }
    }
    let mut special = [f32::NAN, f32::INFINITY];
    gelu_erf_fast(&mut special);
    assert!(special[0].is_nan());
    assert_eq!(special[1], f32::INFINITY);
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

#[test]
fn gelu_with_slope_is_gelu_and_its_derivative_bit_for_bit() {
    // At x = u + bias, the sum taken in f32 as the caller would before the call.
    let us: Vec<f32> = (0..=20_000).map(|i| -10.0 + i as f32 * 1e-3).collect();
    let bias: Vec<f32> = (0..us.len()).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
    let xs: Vec<f32> = us.iter().zip(&bias).map(|(u, b)| u + b).collect();
    let (mut slope, mut a) = (us.clone(), vec![0f32; xs.len()]);
    gelu_erf_with_slope(&mut slope, &bias, &mut a);
    let mut want_a = xs.clone();
    gelu_erf(&mut want_a);
    let mut want_slope = vec![0f32; xs.len()];
    gelu_backward(&mut want_slope, &vec![1.0; xs.len()], &xs);
    // The same erf and the same products (halving is exact): the same bits.
    for i in 0..xs.len() {
        assert_eq!(a[i].to_bits(), want_a[i].to_bits(), "gelu({})", xs[i]);
        assert_eq!(
            slope[i].to_bits(),
            want_slope[i].to_bits(),
            "gelu'({})",
            xs[i]
        );
    }
}

/// `n` seeded values in [-1, 1).
fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A row builder that copies row `i` of `v` (rows of `cols` values).
fn rows_of(v: &[f32], cols: usize) -> impl Fn(usize, &mut [f32], &mut [f32]) + Sync + '_ {
    move |i, row, _| row.copy_from_slice(&v[i * cols..(i + 1) * cols])
}

/// The three products of a kept activation (`x W^T`, `dy W`, `dy^T x`) against
/// [`product`] on the same f32 rows in the same precision: the same bits on our kernels
/// (the same rounded operands, the same sums in the same order), over awkward sizes (odd,
/// below and past a panel, a block of rows, a pair of `k`).
#[test]
fn kept_activations_give_the_products_of_their_rows() {
    use super::bf16::{native, Kernel};
    use super::kept::{Kept, Side};
    use super::kept_weight::KeptWeight;
    use super::{product, Dst, Mat, Precision};

    for precision in [Precision::F32, Precision::Bf16] {
        let exact = precision.bf16_kernel().is_none() || native() == Some(Kernel::Avx512Bf16);
        for (rows, width, out) in [
            (1, 1, 1),
            (13, 3, 5),
            (65, 12, 32),
            (131, 33, 37),
            (64, 2, 13),
        ] {
            let x = seeded(rows * width, 1);
            let dy = seeded(rows * out, 2);
            let w = seeded(out * width, 3);
            let (kx, _) = Kept::build((rows, width), Side::Input, precision, 0, rows_of(&x, width));
            let (kdy, _) =
                Kept::build((rows, out), Side::Gradient, precision, 0, rows_of(&dy, out));
            let check = |what: &str, got: &[f32], want: &[f32]| {
                for (g, w) in got.iter().zip(want) {
                    let ok = if exact {
                        g.to_bits() == w.to_bits()
                    } else {
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs())
                    };
                    assert!(ok, "{precision} {what} {rows}x{width}x{out}: {g} vs {w}");
                }
            };
            // x W^T onto a preloaded output.
            let (mut got, mut want) = (vec![0.5f32; rows * out], vec![0.5f32; rows * out]);
            kx.times_wt((&w, None), out, &mut got, true).unwrap();
            // The weight packed once for the step gives the same words, so the same sums.
            let kw = KeptWeight::new(&w, (out, width), 1, precision).unwrap();
            let mut once = vec![0.5f32; rows * out];
            kx.times_wt((&w, kw.forward(0)), out, &mut once, true)
                .unwrap();
            assert_eq!(bits(&once), bits(&got), "{precision} x W^T packed once");
            if out != width && kw.backward().is_some() {
                let wrong = kx.times_wt((&w, kw.backward()), out, &mut once, true);
                assert!(wrong.is_err(), "a weight packed for the other product");
            }
            let wt = Mat::rows(&w, width).t();
            let xm = Mat::rows(&x, width);
            product(
                (rows, out, width),
                Dst::Slice(&mut want),
                (0, out),
                true,
                xm,
                wt,
                1.0,
                true,
                precision,
            )
            .unwrap();
            check("x W^T", &got, &want);
            // dy W.
            let (mut got, mut want) = (vec![0f32; rows * width], vec![0f32; rows * width]);
            kdy.times_w((&w, None), width, &mut got).unwrap();
            let mut once = vec![0f32; rows * width];
            kdy.times_w((&w, kw.backward()), width, &mut once).unwrap();
            assert_eq!(bits(&once), bits(&got), "{precision} dy W packed once");
            let dym = Mat::rows(&dy, out);
            product(
                (rows, width, out),
                Dst::Slice(&mut want),
                (0, width),
                false,
                dym,
                Mat::rows(&w, width),
                1.0,
                true,
                precision,
            )
            .unwrap();
            check("dy W", &got, &want);
            // dy^T x, written at an offset.
            let (mut got, mut want) = (vec![0f32; 3 + out * width], vec![0f32; 3 + out * width]);
            kdy.t_times(&kx, &mut got, 3).unwrap();
            product(
                (out, width, rows),
                Dst::Slice(&mut want),
                (3, width),
                false,
                dym.t(),
                xm,
                1.0,
                true,
                precision,
            )
            .unwrap();
            check("dy^T x", &got, &want);
        }
    }
}

/// The bit patterns of `v`, for comparing results exactly (NaN included).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_weight_kept_for_the_step_holds_the_words_each_product_packed_for_itself() {
    use super::bf16::PackedB;
    use super::kept_weight::KeptWeight;
    use super::{recycle, Mat, Precision};

    recycle::poison();
    // Odd and even widths, blocks of rows off the panel, more rows than a packing task.
    for ((out, inp), parts) in [
        ((1, 1), 1),
        ((6, 5), 3),
        ((37, 33), 1),
        ((3 * 45, 7), 3),
        ((130, 64), 2),
    ] {
        let w = seeded(out * inp, 5);
        let kept = KeptWeight::new(&w, (out, inp), parts, Precision::Bf16).unwrap();
        if Precision::Bf16.bf16_kernel().is_none() {
            assert!(kept.forward(0).is_none() && kept.backward().is_none());
            continue;
        }
        let rows = out / parts;
        for part in 0..parts {
            let block = &w[part * rows * inp..][..rows * inp];
            let want = PackedB::new(Mat::rows(block, inp).t(), inp, rows, false);
            let got = kept.forward(part).unwrap();
            assert_eq!((got.k(), got.n()), (inp, rows));
            assert!(
                got.words() == want.view().words(),
                "W^T {out}x{inp} part {part}"
            );
        }
        assert!(kept.forward(parts).is_none());
        let want = PackedB::new(Mat::rows(&w, inp), out, inp, false);
        let got = kept.backward().unwrap();
        assert_eq!((got.k(), got.n()), (out, inp));
        assert!(got.words() == want.view().words(), "W {out}x{inp}");
    }
    let w = seeded(12, 1);
    let f32_kept = KeptWeight::new(&w, (4, 3), 2, Precision::F32).unwrap();
    assert!(f32_kept.forward(0).is_none() && f32_kept.backward().is_none());
    assert!(KeptWeight::new(&w, (4, 4), 1, Precision::F32).is_err());
    assert!(KeptWeight::new(&w, (4, 3), 3, Precision::Bf16).is_err());
    assert!(KeptWeight::new(&w, (4, 3), 0, Precision::Bf16).is_err());
}
