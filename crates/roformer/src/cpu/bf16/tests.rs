//! The bf16 products against f64 references, the vector kernel against the portable one, and
//! the packing layout.

use proptest::prelude::*;

use super::*;
use crate::cpu::{product as cpu_product, Dst, Precision};

/// Deterministic values in about [-2, 2] (a linear congruential generator).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn bf16_value(x: f32) -> f64 {
    f64::from(f32::from_bits(u32::from(round_bf16(x)) << 16))
}

/// `(sum_k a b, sum_k |a b|)` in f64 for element `(i, j)`, of bf16-rounded or exact operands.
fn reference(
    a: Mat<'_>,
    b: Mat<'_>,
    k: usize,
    (i, j): (usize, usize),
    rounded: bool,
) -> (f64, f64) {
    let round = |x: f32| if rounded { bf16_value(x) } else { f64::from(x) };
    (0..k).fold((0.0, 0.0), |(s, abs), kk| {
        let x = round(a.data[a.offset + i * a.rs + kk * a.cs]);
        let y = round(b.data[b.offset + kk * b.rs + j * b.cs]);
        (s + x * y, abs + (x * y).abs())
    })
}

/// `alpha * a b` (plus `init` when accumulating) through `kernel`.
#[allow(clippy::too_many_arguments)]
fn run(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    a: Mat<'_>,
    b: Mat<'_>,
    init: &[f32],
    rs: usize,
    alpha: f32,
    accumulate: bool,
    parallel: bool,
) -> Vec<f32> {
    let mut c = init.to_vec();
    assert!(a.fits(m, k) && b.fits(k, n) && c.len() >= m.saturating_sub(1) * rs + n);
    // SAFETY: checked just above; `c` is exclusive.
    unsafe {
        product(
            kernel,
            (m, n, k),
            (c.as_mut_ptr(), rs),
            accumulate,
            a,
            b,
            alpha,
            parallel,
        );
    }
    c
}

/// Checks every element of `c` against the f64 references: within `(k + 2) 2^-24 sum|ab|`
/// of the product of the rounded operands (f32 summation), and within `2^-7 sum|ab|` plus
/// that of the exact operands (each bf16 rounding is within 2^-9 relative).
#[allow(clippy::too_many_arguments)]
fn check(
    c: &[f32],
    (m, n, k): (usize, usize, usize),
    a: Mat<'_>,
    b: Mat<'_>,
    init: &[f32],
    rs: usize,
    alpha: f32,
    accumulate: bool,
) {
    let sum_bound = (k as f64 + 2.0) * f64::from(f32::EPSILON) / 2.0;
    for i in 0..m {
        for j in 0..n {
            let at = i * rs + j;
            let base = if accumulate { f64::from(init[at]) } else { 0.0 };
            let alpha = f64::from(alpha);
            let (r, abs) = reference(a, b, k, (i, j), true);
            let got = f64::from(c[at]);
            let tol = sum_bound * abs * alpha.abs()
                + 4.0 * f64::from(f32::EPSILON) * (base + alpha * r).abs()
                + 1e-30;
            assert!(
                (got - (base + alpha * r)).abs() <= tol,
                "({i}, {j}) of {m}x{n}x{k}: {got} against rounded-operand reference {}",
                base + alpha * r
            );
            let (exact, _) = reference(a, b, k, (i, j), false);
            let tol = tol + 2f64.powi(-7) * abs * alpha.abs();
            assert!(
                (got - (base + alpha * exact)).abs() <= tol,
                "({i}, {j}): against exact"
            );
        }
    }
}

/// [`pack_panels`] into a new buffer, which starts non-zero so that padding is checked.
fn packed(x: Mat<'_>, count: usize, k: usize, width: usize, parallel: bool) -> Vec<u32> {
    let mut out = vec![u32::MAX; packed_len(count, k, width)];
    pack_panels(x, (count, k), width, (parallel, false), &mut out);
    out
}

/// The portable kernel, and where this machine has them our vector kernel and oneDNN.
fn kernels() -> Vec<Kernel> {
    let mut all = vec![Kernel::Portable];
    if native().is_some() {
        all.push(Kernel::Avx512Bf16);
    }
    if onednn_here() {
        all.push(Kernel::OneDnn);
    }
    all
}

/// Whether oneDNN can run here (installed, on a CPU with a native bf16 kernel), whether or not
/// it is chosen by default; else a note that its products are not tested.
fn onednn_here() -> bool {
    let here = native().is_some() && onednn::version().is_ok();
    if !here {
        eprintln!(
            "oneDNN cannot run here ({:?}): its products are not tested",
            onednn::version()
        );
    }
    here
}

/// `alpha * a b` (plus `init` when accumulating, at row stride `rs`) through oneDNN's row
/// path, called directly so that a silent fallback to our kernel cannot pass for it.
#[allow(clippy::too_many_arguments)]
fn onednn_rows(
    m: usize,
    a: Mat<'_>,
    b: Packed<'_>,
    init: &[f32],
    rs: usize,
    alpha: f32,
    accumulate: bool,
    parallel: bool,
) -> Vec<f32> {
    let (n, k) = (b.n(), b.k());
    let mut packed_a = vec![0; packed_len(m, k, MR)];
    assert!(pack_panels(a, (m, k), MR, (parallel, true), &mut packed_a));
    let mut c = init.to_vec();
    assert!(c.len() >= (m - 1) * rs + n);
    // SAFETY: `c` holds m rows at stride rs (checked) and is exclusive; the operands fit.
    let ran = unsafe {
        onednn::product(
            m,
            (c.as_mut_ptr(), rs),
            accumulate,
            (&packed_a, k, 1),
            b,
            alpha,
            parallel,
        )
    };
    assert!(ran, "oneDNN refused a {m}x{n}x{k} product");
    c
}

#[test]
fn onednn_runs_the_products_it_takes_and_agrees_with_our_kernel() {
    if !onednn_here() {
        return;
    }
    let kernel = onednn::implementation(256, 96, 64).expect("oneDNN takes a 256x96x64 product");
    assert!(
        kernel.contains("avx512_core_bf16") || kernel.contains("amx"),
        "oneDNN's bf16 matmul runs on {kernel}, not a native bf16 kernel"
    );
    // Sizes of the vision and text layers, a partial last panel (n = 70), rows past n (rs),
    // a scale and accumulation, on the threads and on one.
    for &((m, n, k), rs, alpha, accumulate, parallel) in &[
        ((201, 1152, 384), 1152, 1.0, false, true),
        ((97, 70, 64), 75, 0.125, true, false),
        ((300, 384, 1536), 384, -0.5, true, true),
    ] {
        let av = values(m * k, (m + k) as u64);
        let bv = values(k * n, (n + 3 * k) as u64);
        let (a, b) = (Mat::rows(&av, k), Mat::rows(&bv, n));
        let init = values((m - 1) * rs + n, 5);
        let ours = run(
            Kernel::Avx512Bf16,
            (m, n, k),
            a,
            b,
            &init,
            rs,
            alpha,
            accumulate,
            parallel,
        );
        let packed_b = PackedB::new(b, k, n, parallel);
        let theirs = onednn_rows(
            m,
            a,
            packed_b.view(),
            &init,
            rs,
            alpha,
            accumulate,
            parallel,
        );
        check(&theirs, (m, n, k), a, b, &init, rs, alpha, accumulate);
        // A stored as its transpose (a weight gradient's `dy^T`), read by oneDNN as it is.
        let a_t = Mat::rows(&av, m).t();
        let mut transposed = init.clone();
        // SAFETY: as above.
        let ran = unsafe {
            onednn_transposed(
                m,
                (transposed.as_mut_ptr(), rs),
                accumulate,
                a_t,
                packed_b.view(),
                alpha,
                parallel,
            )
        };
        assert!(
            ran,
            "oneDNN refused a {m}x{n}x{k} product of a transposed A"
        );
        check(&transposed, (m, n, k), a_t, b, &init, rs, alpha, accumulate);
        for i in 0..m {
            for j in 0..n {
                let (_, abs) = reference(a, b, k, (i, j), true);
                let (o, t) = (ours[i * rs + j], theirs[i * rs + j]);
                // Both sum the same exact bf16 products in f32, in different orders.
                let tol = 2.0 * k as f64 * f64::from(f32::EPSILON) * abs * f64::from(alpha.abs());
                assert!(
                    f64::from((o - t).abs()) <= tol + 1e-30,
                    "({i}, {j}) of {m}x{n}x{k}: oneDNN {t} against ours {o}"
                );
            }
            let past_n = i * rs + n..((i + 1) * rs).min(init.len());
            assert_eq!(
                theirs[past_n.clone()],
                init[past_n],
                "row {i}: columns past n untouched"
            );
        }
    }
}

#[test]
fn onednn_leaves_depths_off_its_blocks_to_our_kernel() {
    if !onednn_here() {
        return;
    }
    assert!(onednn::takes(64) && onednn::takes(1536));
    assert!(!onednn::takes(48) && !onednn::takes(7) && !onednn::takes(0));
    // Through the dispatch, such a product still runs (on our kernel) and is right.
    let (m, n, k) = (20, 40, 48);
    let (av, bv) = (values(m * k, 8), values(k * n, 9));
    let (a, b) = (Mat::rows(&av, k), Mat::rows(&bv, n));
    let init = vec![0f32; m * n];
    let c = run(Kernel::OneDnn, (m, n, k), a, b, &init, n, 1.0, false, true);
    check(&c, (m, n, k), a, b, &init, n, 1.0, false);
}

#[test]
fn rounding_is_to_nearest_even_as_half() {
    let special = [
        0.0f32,
        -0.0,
        1.0,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x3f80_8000), // a tie, rounds down to even
        f32::from_bits(0x3f81_8000), // a tie, rounds up to even
        f32::from_bits(0x7f7f_ffff), // rounds up to infinity
        1e-40,
    ];
    for x in special
        .into_iter()
        .chain(values(10_000, 3).into_iter().map(|v| v * 1e3))
    {
        assert_eq!(round_bf16(x), half::bf16::from_f32(x).to_bits(), "{x:e}");
    }
    assert!(f32::from_bits(u32::from(round_bf16(f32::NAN)) << 16).is_nan());
    let signalling = f32::from_bits(0x7f80_0001);
    assert!(f32::from_bits(u32::from(round_bf16(signalling)) << 16).is_nan());
}

#[test]
fn packing_on_the_threads_writes_the_same_words() {
    // Enough panels for many tasks, an odd k, a last panel cut short; rows, columns and a
    // strided view.
    for &(count, k, width) in &[(1000, 257, MR), (1000, 64, NR), (300, 31, NR), (37, 5, MR)] {
        let data = values(2 * count * (k + 3), (count + k) as u64);
        for x in [
            Mat::rows(&data, k + 3),
            Mat::rows(&data, count).t(),
            Mat {
                data: &data,
                offset: 1,
                rs: 2,
                cs: 2 * count,
            },
        ] {
            assert_eq!(
                packed(x, count, k, width, true),
                packed(x, count, k, width, false),
                "{count}x{k} in panels of {width}"
            );
        }
    }
}

#[test]
fn column_packing_writes_the_words_of_row_packing() {
    // Two implementations: an operand whose k values are strided is packed by ranges of pairs
    // over groups of panels, a row-major one row by row. Sizes with many tasks of each, odd k.
    for &(count, k, width) in &[
        (1000, 257, MR),
        (1000, 64, NR),
        (300, 31, NR),
        (2000, 9, NR),
    ] {
        let data = values(count * k, (count * k) as u64);
        let transposed: Vec<f32> = (0..k)
            .flat_map(|kk| (0..count).map(move |i| (i, kk)))
            .map(|(i, kk)| data[i * k + kk])
            .collect();
        for parallel in [true, false] {
            assert_eq!(
                packed(Mat::rows(&transposed, count).t(), count, k, width, parallel),
                packed(Mat::rows(&data, k), count, k, width, parallel),
                "{count}x{k} in panels of {width}, parallel {parallel}"
            );
        }
    }
}

#[test]
fn panels_hold_pairs_of_k_padded_with_zeros() {
    // x = 5 x 3 row-major, panels of 4: two panels, two pairs.
    let data: Vec<f32> = (0..15).map(|v| v as f32).collect();
    {
        let words = packed(Mat::rows(&data, 3), 5, 3, 4, false);
        assert_eq!(words.len(), 2 * 2 * 4);
        let word = |lo: f32, hi: f32| u32::from(round_bf16(lo)) | u32::from(round_bf16(hi)) << 16;
        // panel 0, pair 0, row 1: x(1, 0), x(1, 1) = 3, 4; pair 1, row 1: x(1, 2), pad.
        assert_eq!(words[1], word(3.0, 4.0));
        assert_eq!(words[4 + 1], word(5.0, 0.0));
        // panel 1, row 0 is x(4, .); rows 1..4 of it are padding.
        assert_eq!(words[8], word(12.0, 13.0));
        assert_eq!(&words[9..12], &[0, 0, 0]);
        assert_eq!(words[12], word(14.0, 0.0));
    }
    // The same matrix stored transposed packs to the same words.
    let t: Vec<f32> = (0..3)
        .flat_map(|kk| (0..5).map(move |i| (i * 3 + kk) as f32))
        .collect();
    assert_eq!(
        packed(Mat::rows(&t, 5).t(), 5, 3, 4, true),
        packed(Mat::rows(&data, 3), 5, 3, 4, false)
    );
}

#[test]
fn products_match_f64_on_edge_shapes_every_kernel() {
    for kernel in kernels() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (1, 33, 2),
            (12, 32, 64),
            (13, 31, 7),
            (25, 65, 129),
            (50, 100, 256),
            (3, 300, 5),
            // Long k, even and odd (hundreds of pairs in one micro-kernel call).
            (5, 7, 258),
            (14, 40, 517),
        ] {
            for (transposed_a, transposed_b) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                let av = values(m * k, (m * 7 + k) as u64);
                let bv = values(k * n, (n * 11 + k) as u64);
                let a = if transposed_a {
                    Mat::rows(&av, m).t()
                } else {
                    Mat::rows(&av, k)
                };
                let b = if transposed_b {
                    Mat::rows(&bv, k).t()
                } else {
                    Mat::rows(&bv, n)
                };
                let rs = n + 3;
                let init = values(m * rs, 99);
                for (alpha, accumulate, parallel) in
                    [(1.0, false, false), (0.5, true, true), (-2.0, true, false)]
                {
                    let c = run(
                        kernel,
                        (m, n, k),
                        a,
                        b,
                        &init,
                        rs,
                        alpha,
                        accumulate,
                        parallel,
                    );
                    check(&c, (m, n, k), a, b, &init, rs, alpha, accumulate);
                    // Columns past n in each row are untouched.
                    for i in 0..m {
                        assert_eq!(
                            &c[i * rs + n..(i + 1) * rs.min(c.len() - i * rs).max(n)],
                            &init[i * rs + n..(i + 1) * rs.min(init.len() - i * rs).max(n)]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn native_kernel_agrees_with_portable() {
    let Some(kernel) = native() else {
        eprintln!("no native bf16 kernel on this CPU: only the portable kernel is tested");
        return;
    };
    let (m, n, k) = (37, 70, 300);
    let av = values(m * k, 1);
    let bv = values(k * n, 2);
    let (a, b) = (Mat::rows(&av, k), Mat::rows(&bv, n));
    let init = vec![0f32; m * n];
    let fast = run(kernel, (m, n, k), a, b, &init, n, 1.0, false, true);
    let slow = run(
        Kernel::Portable,
        (m, n, k),
        a,
        b,
        &init,
        n,
        1.0,
        false,
        false,
    );
    for (i, (&f, &s)) in fast.iter().zip(&slow).enumerate() {
        let (_, abs) = reference(a, b, k, (i / n, i % n), true);
        assert!(
            f64::from((f - s).abs()) <= 2.0 * k as f64 * f64::from(f32::EPSILON) * abs,
            "element {i}: {f} against {s}"
        );
    }
}

#[test]
fn a_nan_operand_gives_nan_in_its_row_only() {
    for kernel in kernels() {
        let (m, n, k) = (14, 34, 9);
        let mut av = values(m * k, 5);
        av[3 * k + 4] = f32::NAN;
        let bv = values(k * n, 6);
        let c = run(
            kernel,
            (m, n, k),
            Mat::rows(&av, k),
            Mat::rows(&bv, n),
            &vec![0.0; m * n],
            n,
            1.0,
            false,
            false,
        );
        for (i, row) in c.chunks(n).enumerate() {
            assert_eq!(row.iter().all(|v| v.is_nan()), i == 3, "row {i}");
            assert!(i == 3 || row.iter().all(|v| v.is_finite()));
        }
    }
}

#[test]
fn precision_f32_and_bf16_agree_through_the_dispatch() {
    let (m, n, k) = (40, 48, 96);
    let av = values(m * k, 7);
    let bv = values(k * n, 8);
    let mut f32_out = vec![0f32; m * n];
    let mut bf16_out = vec![0f32; m * n];
    for (out, precision) in [
        (&mut f32_out, Precision::F32),
        (&mut bf16_out, Precision::Bf16),
    ] {
        cpu_product(
            (m, n, k),
            Dst::Slice(out),
            (0, n),
            false,
            Mat::rows(&av, k),
            Mat::rows(&bv, n),
            1.0,
            true,
            precision,
        )
        .unwrap();
    }
    let a = Mat::rows(&av, k);
    let b = Mat::rows(&bv, n);
    for i in 0..m {
        for j in 0..n {
            let (_, abs) = reference(a, b, k, (i, j), false);
            let diff = f64::from((f32_out[i * n + j] - bf16_out[i * n + j]).abs());
            assert!(diff <= 2f64.powi(-7) * abs, "({i}, {j}): {diff}");
        }
    }
    assert_eq!(
        bf16_out != f32_out,
        native().is_some(),
        "bf16 runs exactly where a native kernel exists"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes_match_f64(m in 1usize..40, n in 1usize..70, k in 1usize..80, seed in 0u64..1000, ta: bool, tb: bool) {
        for kernel in kernels() {
            let av = values(m * k, seed);
            let bv = values(k * n, seed + 1);
            let a = if ta { Mat::rows(&av, m).t() } else { Mat::rows(&av, k) };
            let b = if tb { Mat::rows(&bv, k).t() } else { Mat::rows(&bv, n) };
            let init = values(m * n, seed + 2);
            let c = run(kernel, (m, n, k), a, b, &init, n, 0.75, true, seed % 2 == 0);
            check(&c, (m, n, k), a, b, &init, n, 0.75, true);
        }
    }
}

#[test]
fn onednn_stays_right_past_its_cache_bound() {
    if !onednn_here() {
        return;
    }
    // More shapes (row counts and scales) than the cache keeps: it is emptied, its primitives
    // destroyed, on the way, and every product stays right.
    let (n, k) = (32, 32);
    let bv = values(k * n, 3);
    let b = Mat::rows(&bv, n);
    let packed_b = PackedB::new(b, k, n, false);
    for i in 0..onednn::MAX_PRIMITIVES + 20 {
        let (m, alpha) = (1 + i % 8, 1.0 + i as f32 / 1024.0);
        let av = values(m * k, i as u64);
        let a = Mat::rows(&av, k);
        let init = vec![0f32; m * n];
        let c = onednn_rows(m, a, packed_b.view(), &init, n, alpha, false, false);
        check(&c, (m, n, k), a, b, &init, n, alpha, false);
    }
}

#[test]
fn pack_rows_fast_writes_the_words_of_pack_rows_into() {
    // Widths around the 32 values of one conversion, odd ones, and the attention's 201;
    // values with ties, infinities, NaNs, zeros and subnormals among them.
    let specials = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::from_bits(0x3f80_8000), // 1 + 2^-8: a tie between 1 and the next bf16 value
        f32::from_bits(0x3f81_8000), // 1 + 3 2^-8: a tie rounded up, to even
        f32::MIN_POSITIVE,
        1e-40, // subnormal
        -1e-42,
    ];
    for width in [1, 2, 15, 31, 32, 33, 64, 201] {
        let rows = 3;
        let mut block = values(rows * width, width as u64);
        let len = block.len();
        for (i, &s) in specials.iter().enumerate() {
            block[(i * 7) % len] = s;
        }
        let pairs = width.div_ceil(2);
        let mut want = vec![7u32; (rows + 1) * pairs];
        let mut got = want.clone();
        pack_rows_into(&block, width, 1, SharedOut::new(&mut want));
        pack_rows_fast(&block, width, 1, SharedOut::new(&mut got));
        // Row 0 of the output is not written by either.
        assert!(got[..pairs].iter().all(|&w| w == 7), "width {width}");
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate().skip(pairs) {
            let (r, p) = (i / pairs - 1, i % pairs);
            for half in 0..2 {
                let col = 2 * p + half;
                let (g, w) = ((g >> (16 * half)) as u16, (w >> (16 * half)) as u16);
                let x = if col < width {
                    block[r * width + col]
                } else {
                    0.0
                };
                if x != 0.0 && x.abs() < f32::MIN_POSITIVE && native().is_some() {
                    assert_eq!(g & 0x7fff, 0, "subnormal {x} at width {width}: {g:#x}");
                } else {
                    assert_eq!(g, w, "{x} at row {r}, column {col} of width {width}");
                }
            }
        }
    }
}
