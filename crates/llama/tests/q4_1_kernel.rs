//! Our Q4_1 matrix product against candle's `QMatMul::forward`, bit for bit, on every
//! instruction set this CPU has; against a plain scalar reference (written here from candle's
//! formula) where candle cannot run (rows of an odd number of blocks: its `vec_dot` asserts an
//! even count in debug builds); and its errors.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use half::f16;
use llama::q4_1::{Isa, Q4_1Matrix};

mod kernel_support;

use kernel_support::{bits, refuses_what_does_not_fit, Kernel, Rng};

/// `rows x cols` values of varied magnitudes: each row on its own scale (1e-4 to 1e4), some
/// rows all zero, some constant, some with one outlier, some blocks all zero.
fn varied(rng: &mut Rng, rows: usize, cols: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let scale = 10f32.powi(rng.below(9) as i32 - 4);
        let kind = if r == 0 { 1 } else { rng.below(8) };
        let mut row: Vec<f32> = (0..cols).map(|_| rng.signed_f32() * scale).collect();
        match kind {
            // All zeros (the first row always).
            0 | 1 if r % 2 == 0 => row.iter_mut().for_each(|v| *v = 0.0),
            // Constant: the Q4_1 scale is zero.
            2 => row.iter_mut().for_each(|v| *v = 0.5 * scale),
            // One large outlier, the rest tiny.
            3 => {
                let at = rng.below(cols as u64) as usize;
                row.iter_mut().for_each(|v| *v *= 1e-3);
                row[at] = 1e3 * scale;
            }
            // A zero block among the others.
            4 => {
                let block = rng.below((cols / 32) as u64) as usize;
                row[block * 32..block * 32 + 32].fill(0.0);
            }
            // Positive only: the Q4_1 minimum is positive.
            5 => row.iter_mut().for_each(|v| *v = v.abs() + scale),
            _ => {}
        }
        out.extend(row);
    }
    out
}

/// The random Q4_1 weight `[n_out, k]` candle quantizes from varied values.
fn weight(rng: &mut Rng, n_out: usize, k: usize) -> QTensor {
    let values = varied(rng, n_out, k);
    let w = Tensor::from_vec(values, (n_out, k), &Device::Cpu).unwrap();
    QTensor::quantize(&w, GgmlDType::Q4_1).unwrap()
}

/// The instruction sets to check: all this CPU has (the scalar one always).
fn isas() -> Vec<Isa> {
    let all = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni];
    for isa in all {
        if !isa.is_available() {
            eprintln!("this CPU has no {isa:?}: not checked");
        }
    }
    all.into_iter().filter(|isa| isa.is_available()).collect()
}

/// Candle's arithmetic written out plainly: `x` quantized to Q8_1 per 32 values, then per
/// output the block sums accumulated in order.
fn reference(q: &QTensor, x: &[f32], rows: usize) -> Vec<Vec<f32>> {
    let (n_out, k) = q.shape().dims2().unwrap();
    let bytes = q.data().unwrap();
    let blocks = k / 32;
    let mut out = vec![vec![0f32; n_out]; rows];
    for (r, out_row) in out.iter_mut().enumerate() {
        // Q8_1 blocks of row r: (q, d, s).
        let xq: Vec<([i8; 32], f16, f16)> = x[r * k..(r + 1) * k]
            .chunks(32)
            .map(|v| {
                let mut amax = 0f32;
                for &x in v {
                    amax = amax.max(x.abs());
                }
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let mut q = [0i8; 32];
                for (q, &x) in q.iter_mut().zip(v) {
                    *q = f32::round(x * id) as i8;
                }
                let sum: i32 = q.iter().map(|&q| q as i32).sum();
                let d16 = f16::from_f32(d);
                (q, d16, f16::from_f32(sum as f32) * d16)
            })
            .collect();
        for (n, y) in out_row.iter_mut().enumerate() {
            let mut sumf = 0f32;
            for (b, (q8, d8, s8)) in xq.iter().enumerate() {
                let block = &bytes[(n * blocks + b) * 20..(n * blocks + b + 1) * 20];
                let d4 = f16::from_le_bytes([block[0], block[1]]);
                let m4 = f16::from_le_bytes([block[2], block[3]]);
                let mut sumi = 0i32;
                for j in 0..16 {
                    let lo = (block[4 + j] & 0x0F) as i32;
                    let hi = (block[4 + j] >> 4) as i32;
                    sumi += lo * q8[j] as i32 + hi * q8[j + 16] as i32;
                }
                sumf += sumi as f32 * d4.to_f32() * d8.to_f32() + m4.to_f32() * s8.to_f32();
            }
            *y = sumf;
        }
    }
    out
}

/// Our product on every instruction set equals `expected` bit for bit.
fn check(ours: &Q4_1Matrix, x: &Tensor, expected: &[Vec<f32>], what: &str) {
    let expected = bits(expected.to_vec());
    for isa in isas() {
        let got = ours.forward_with(x, isa).unwrap();
        assert_eq!(
            got.dims(),
            &[expected.len(), ours.n_out()],
            "{what}, {isa:?}"
        );
        let got = bits(got.to_vec2::<f32>().unwrap());
        for (r, (g, e)) in got.iter().zip(&expected).enumerate() {
            if let Some(n) = (0..g.len()).find(|&n| g[n] != e[n]) {
                panic!(
                    "{what}, {isa:?}: row {r} output {n}: {} (ours) != {} (expected)",
                    f32::from_bits(g[n]),
                    f32::from_bits(e[n])
                );
            }
        }
    }
}

#[test]
fn equals_candle_bit_for_bit() {
    let mut rng = Rng::new(0x5EED_0001);
    for k in [64, 576, 1536] {
        // Tiles of 16 rows: padded (1, 7, 24: a tile and a half), whole (192, 576).
        for n_out in [1, 7, 24, 192, 576] {
            let q = std::sync::Arc::new(weight(&mut rng, n_out, k));
            let ours = Q4_1Matrix::from_qtensor(&q).unwrap();
            assert_eq!((ours.n_out(), ours.k()), (n_out, k));
            let candle = QMatMul::from_arc(q.clone()).unwrap();
            for rows in [1, 3, 8, 9, 16] {
                let values = varied(&mut rng, rows, k);
                let x = Tensor::from_vec(values.clone(), (rows, k), &Device::Cpu).unwrap();
                let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
                // The reference agrees with candle where both run.
                assert_eq!(
                    bits(reference(&q, &values, rows)),
                    bits(expected.clone()),
                    "reference vs candle, k {k}, n_out {n_out}, rows {rows}"
                );
                let what = format!("k {k}, n_out {n_out}, rows {rows}");
                check(&ours, &x, &expected, &what);
            }
        }
    }
}

#[test]
fn odd_block_counts_equal_the_reference() {
    let mut rng = Rng::new(0x5EED_0002);
    for k in [32, 96, 160] {
        for n_out in [1, 7, 24, 192, 576] {
            let q = weight(&mut rng, n_out, k);
            let ours = Q4_1Matrix::from_qtensor(&q).unwrap();
            for rows in [1, 2, 3, 13, 33] {
                let values = varied(&mut rng, rows, k);
                let x = Tensor::from_vec(values.clone(), (rows, k), &Device::Cpu).unwrap();
                let expected = reference(&q, &values, rows);
                check(
                    &ours,
                    &x,
                    &expected,
                    &format!("k {k}, n_out {n_out}, rows {rows}"),
                );
            }
        }
    }
}

#[test]
fn batched_and_strided_inputs_match_candle() {
    let mut rng = Rng::new(0x5EED_0003);
    let (n_out, k) = (40, 128);
    let q = weight(&mut rng, n_out, k);
    let ours = Q4_1Matrix::from_qtensor(&q).unwrap();
    let candle = QMatMul::from_qtensor(q).unwrap();
    // [2, 5, k]: outputs [2, 5, n_out].
    let x = Tensor::from_vec(varied(&mut rng, 10, k), (2, 5, k), &Device::Cpu).unwrap();
    let expected = candle.forward(&x).unwrap();
    let got = ours.forward(&x).unwrap();
    assert_eq!(got.dims(), &[2, 5, n_out]);
    let flat = |t: &Tensor| bits(vec![t.flatten_all().unwrap().to_vec1::<f32>().unwrap()]);
    assert_eq!(flat(&got), flat(&expected));
    // A transposed (non-contiguous) input is read in its logical order.
    let xt = Tensor::from_vec(varied(&mut rng, 6, k), (k, 6), &Device::Cpu)
        .unwrap()
        .t()
        .unwrap();
    assert!(!xt.is_contiguous());
    let expected = candle.forward(&xt.contiguous().unwrap()).unwrap();
    assert_eq!(flat(&ours.forward(&xt).unwrap()), flat(&expected));
    // The slice API gives the same values.
    let values = varied(&mut rng, 3, k);
    let x = Tensor::from_vec(values.clone(), (3, k), &Device::Cpu).unwrap();
    let mut out = vec![0f32; 3 * n_out];
    ours.matmul(&values, &mut out).unwrap();
    let expected = candle.forward(&x).unwrap().flatten_all().unwrap();
    assert_eq!(
        bits(vec![out]),
        bits(vec![expected.to_vec1::<f32>().unwrap()])
    );
}

#[test]
fn non_finite_inputs_match_candle() {
    let mut rng = Rng::new(0x5EED_0004);
    let (n_out, k) = (16, 64);
    let q = weight(&mut rng, n_out, k);
    let ours = Q4_1Matrix::from_qtensor(&q).unwrap();
    let candle = QMatMul::from_qtensor(q).unwrap();
    let mut values = varied(&mut rng, 4, k);
    values[3] = f32::NAN;
    values[k + 40] = f32::INFINITY;
    values[2 * k + 1] = f32::NEG_INFINITY;
    values[3 * k + 7] = f32::MAX;
    let x = Tensor::from_vec(values, (4, k), &Device::Cpu).unwrap();
    let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
    check(&ours, &x, &expected, "non-finite inputs");
}

#[test]
fn empty_inputs_give_empty_outputs() {
    let mut rng = Rng::new(0x5EED_0005);
    let ours = Q4_1Matrix::from_qtensor(&weight(&mut rng, 8, 64)).unwrap();
    let x = Tensor::zeros((0, 64), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(ours.forward(&x).unwrap().dims(), &[0, 8]);
}

#[test]
fn errors() {
    let mut rng = Rng::new(0x5EED_0006);
    let w = Tensor::from_vec(varied(&mut rng, 4, 64), (4, 64), &Device::Cpu).unwrap();
    let kernel = Kernel {
        dtype: GgmlDType::Q4_1,
        others: [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::F32],
        from_qtensor: Q4_1Matrix::from_qtensor,
        from_blocks: Q4_1Matrix::from_blocks,
        forward: Q4_1Matrix::forward,
        matmul: Q4_1Matrix::matmul,
    };
    refuses_what_does_not_fit(&kernel, &w);
}

/// Blocks of 32 values that stress the Q8_1 rounding: halves (ties go away from zero), values
/// just below halves, infinities, NaN, subnormal and huge magnitudes.
fn rounding_cases(rng: &mut Rng) -> Vec<f32> {
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    // amax = 127: the scale is exactly 1, so x * (1 / d) = x and halves are ties.
    for start in [-127.0f32, -95.5, -63.5, -31.5, 0.5, 32.5, 64.5, 96.5] {
        let mut b: Vec<f32> = (0..32).map(|j| start + j as f32).collect();
        b[31] = if start < 0.0 { -127.0 } else { 127.0 };
        blocks.push(b);
    }
    let below_half = f32::from_bits(0.5f32.to_bits() - 1);
    let mut b = vec![
        127.0f32,
        -0.5,
        0.5,
        below_half,
        -below_half,
        1.5,
        -1.5,
        2.5,
        -2.5,
    ];
    b.extend([
        126.5, -126.5, 0.0, -0.0, 1.4999999, -1.4999999, 3.5000002, -3.5000002,
    ]);
    b.resize(32, 0.25);
    blocks.push(b);
    // amax = 63.5: the scale is exactly 0.5, ties at quarter values.
    let mut b: Vec<f32> = (0..32).map(|j| j as f32 * 0.25 - 4.0).collect();
    b[0] = -63.5;
    blocks.push(b);
    // Non-finite values.
    let mut b: Vec<f32> = (0..32).map(|_| rng.signed_f32()).collect();
    b[3] = f32::NAN;
    blocks.push(b.clone());
    b[5] = f32::INFINITY;
    blocks.push(b.clone());
    b[5] = f32::NEG_INFINITY;
    blocks.push(b.clone());
    blocks.push(vec![f32::NAN; 32]);
    // Subnormal and tiny magnitudes (scale 0, or a scale whose inverse overflows).
    blocks.push((0..32).map(|j| f32::from_bits(j as u32 * 3)).collect());
    blocks.push(
        (0..32)
            .map(|j| -f32::from_bits(1 + j as u32 * 1000))
            .collect(),
    );
    blocks.push((0..32).map(|_| rng.signed_f32() * 1e-38).collect());
    // Huge magnitudes (the f16 scale overflows).
    blocks.push((0..32).map(|_| rng.signed_f32() * f32::MAX).collect());
    blocks.push((0..32).map(|_| rng.signed_f32() * 1e6).collect());
    // Random blocks of every scale.
    for e in -8..8 {
        blocks.push((0..32).map(|_| rng.signed_f32() * 10f32.powi(e)).collect());
    }
    blocks.concat()
}

#[test]
fn activation_quantization_equals_candle() {
    let mut rng = Rng::new(0x5EED_0007);
    let mut values = rounding_cases(&mut rng);
    values.extend(varied(&mut rng, 8, 64));
    let n = values.len();
    let x = Tensor::from_vec(values.clone(), (1, n), &Device::Cpu).unwrap();
    let candle = QTensor::quantize(&x, GgmlDType::Q8_1).unwrap();
    let expected = candle.data().unwrap();
    for isa in isas() {
        let ours = llama::q4_1::q8_1_blocks(&values, isa).unwrap();
        assert_eq!(ours.len(), expected.len());
        for (b, (o, e)) in ours.chunks(36).zip(expected.chunks(36)).enumerate() {
            assert_eq!(
                o,
                e,
                "{isa:?}: block {b} of {:?}",
                &values[b * 32..b * 32 + 32]
            );
        }
    }
    assert!(llama::q4_1::q8_1_blocks(&values[..33], Isa::Scalar).is_err());
}

#[test]
fn rounding_ties_match_candle_in_products() {
    let mut rng = Rng::new(0x5EED_0008);
    let cases = rounding_cases(&mut rng);
    // Rows of 256 values (8 blocks, an even count) cut from the cases.
    let k = 256;
    let rows = cases.len() / k;
    let x = Tensor::from_vec(cases[..rows * k].to_vec(), (rows, k), &Device::Cpu).unwrap();
    for n_out in [8, 24, 200] {
        let q = std::sync::Arc::new(weight(&mut rng, n_out, k));
        let ours = Q4_1Matrix::from_qtensor(&q).unwrap();
        let expected = QMatMul::from_arc(q).unwrap().forward(&x).unwrap();
        check(
            &ours,
            &x,
            &expected.to_vec2().unwrap(),
            &format!("ties, n_out {n_out}"),
        );
    }
}
