//! Our Q8_0 matrix product against candle's `QMatMul::forward` (its `vec_dot_q8_0_q8_0`), bit
//! for bit, on every instruction set this CPU has; against a plain reference written here from
//! candle's AVX2 arithmetic (itself checked against candle) where candle takes another kernel
//! (`k` a multiple of 256 and `n_out` of 16: candle 0.11's repacked path) or cannot be given
//! the weights (raw blocks with `-128` and extreme scales); and its errors.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use half::f16;
use llama::q8_0::{Isa, Q8_0Matrix};

mod kernel_support;

use kernel_support::{bits, refuses_what_does_not_fit, Kernel, Rng};

/// `rows x cols` values of varied magnitudes: each row on its own scale (1e-4 to 1e4), some
/// rows all zero, some constant, some with one outlier, some blocks all zero, some with exact
/// halves (ties of the rounding).
fn varied(rng: &mut Rng, rows: usize, cols: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let scale = 10f32.powi(rng.below(9) as i32 - 4);
        let kind = if r == 0 { 1 } else { rng.below(9) };
        let mut row: Vec<f32> = (0..cols).map(|_| rng.signed_f32() * scale).collect();
        match kind {
            // All zeros (the first row always): the scale is zero.
            0 | 1 if r % 2 == 0 => row.iter_mut().for_each(|v| *v = 0.0),
            // Constant.
            2 => row.iter_mut().for_each(|v| *v = -0.5 * scale),
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
            // amax = 127 in every block: the scale is 1 and halves are ties.
            5 => {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = match j % 32 {
                        0 => 127.0,
                        1 => -127.0,
                        _ => (rng.below(254) as f32 - 127.0) + 0.5,
                    };
                }
            }
            _ => {}
        }
        out.extend(row);
    }
    out
}

/// The random Q8_0 weight `[n_out, k]` candle quantizes from varied values.
fn weight(rng: &mut Rng, n_out: usize, k: usize) -> QTensor {
    let values = varied(rng, n_out, k);
    let w = Tensor::from_vec(values, (n_out, k), &Device::Cpu).unwrap();
    QTensor::quantize(&w, GgmlDType::Q8_0).unwrap()
}

/// Raw Q8_0 blocks no quantizer writes: every byte from -128 to 127 (`-128` included), scales
/// from subnormal to the largest f16, zero, and negative.
fn raw_blocks(rng: &mut Rng, n_out: usize, k: usize) -> Vec<u8> {
    let scales = [
        f16::from_bits(1),
        f16::MIN_POSITIVE,
        f16::from_f32(1e-3),
        f16::ONE,
        f16::from_f32(-2.5),
        f16::ZERO,
        f16::from_f32(300.0),
        f16::MAX,
    ];
    let mut bytes = Vec::with_capacity(n_out * k / 32 * 34);
    for b in 0..n_out * k / 32 {
        let scale = scales[(b + rng.below(3) as usize) % scales.len()];
        bytes.extend(scale.to_ne_bytes());
        for j in 0..32 {
            let v = match rng.below(4) {
                0 => -128i8,
                1 => 127,
                _ => (rng.next_u64() as u8) as i8,
            };
            bytes.push(if j == 0 && b % 5 == 0 { 0 } else { v as u8 });
        }
    }
    bytes
}

fn from_raw(bytes: &[u8], n_out: usize, k: usize) -> QTensor {
    // candle reads the bytes as blocks with an f16 field: the buffer must be 2-aligned (the
    // allocator gives at least that).
    assert!((bytes.as_ptr() as usize).is_multiple_of(2));
    qtensor_from_ggml(GgmlDType::Q8_0, bytes, vec![n_out, k], &Device::Cpu).unwrap()
}

/// The instruction sets to check: all this CPU has (the scalar one always).
fn isas() -> Vec<Isa> {
    let all = [Isa::Scalar, Isa::Avx512Vnni];
    for isa in all {
        if !isa.is_available() {
            eprintln!("this CPU has no {isa:?}: not checked");
        }
    }
    all.into_iter().filter(|isa| isa.is_available()).collect()
}

/// Candle's arithmetic written out plainly, as its AVX2 `vec_dot_q8_0_q8_0` does it: `x`
/// quantized to Q8_0 per 32 values; per output eight lanes, each taking per block the sum of
/// four products `|w| * (q with w's sign)` (negation wrapping, as `vpsignb` does), multiplied
/// by `d_w * d_x` and added with one rounding; the lanes summed as `hsum_float_8` does.
fn reference(q: &QTensor, x: &[f32], rows: usize) -> Vec<Vec<f32>> {
    let (n_out, k) = q.shape().dims2().unwrap();
    let bytes = q.data().unwrap();
    let blocks = k / 32;
    let mut out = vec![vec![0f32; n_out]; rows];
    for (r, out_row) in out.iter_mut().enumerate() {
        let xq: Vec<([i8; 32], f16)> = x[r * k..(r + 1) * k]
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
                (q, f16::from_f32(d))
            })
            .collect();
        for (n, y) in out_row.iter_mut().enumerate() {
            let mut lanes = [0f32; 8];
            for (b, (q8, d8)) in xq.iter().enumerate() {
                let block = &bytes[(n * blocks + b) * 34..(n * blocks + b + 1) * 34];
                let dw = f16::from_ne_bytes([block[0], block[1]]);
                let d = dw.to_f32() * d8.to_f32();
                for (l, lane) in lanes.iter_mut().enumerate() {
                    let mut sum = 0i32;
                    for j in 4 * l..4 * l + 4 {
                        let w = block[2 + j] as i8;
                        let signed = match w.signum() {
                            -1 => q8[j].wrapping_neg(),
                            0 => 0,
                            _ => q8[j],
                        };
                        sum += i32::from(w.unsigned_abs()) * i32::from(signed);
                    }
                    *lane = d.mul_add(sum as f32, *lane);
                }
            }
            let l = lanes;
            *y = ((l[4] + l[0]) + (l[6] + l[2])) + ((l[5] + l[1]) + (l[7] + l[3]));
        }
    }
    out
}

/// Our product on every instruction set equals `expected` bit for bit.
fn check(ours: &Q8_0Matrix, x: &Tensor, expected: &[Vec<f32>], what: &str) {
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

/// Whether candle 0.11's `QMatMul` runs `vec_dot_q8_0_q8_0` for this shape (its repacked x86
/// kernel takes `k` a multiple of 256 with `n_out` a multiple of 16 on AVX-512 VNNI CPUs).
fn candle_runs_vec_dot(n_out: usize, k: usize) -> bool {
    !(k.is_multiple_of(256) && n_out.is_multiple_of(16))
}

#[test]
fn equals_candle_bit_for_bit() {
    let mut rng = Rng::new(0x5EED_0801);
    // 576 is SmolLM2's width (its head is [49152, 576]); 32 and 96 are one and three blocks.
    for k in [32, 96, 576, 800] {
        for n_out in [1, 7, 13, 64, 100] {
            let q = std::sync::Arc::new(weight(&mut rng, n_out, k));
            let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
            assert_eq!((ours.n_out(), ours.k()), (n_out, k));
            assert!(candle_runs_vec_dot(n_out, k));
            let candle = QMatMul::from_arc(q.clone()).unwrap();
            for rows in [1, 3, 8, 9, 33] {
                let values = varied(&mut rng, rows, k);
                let x = Tensor::from_vec(values.clone(), (rows, k), &Device::Cpu).unwrap();
                let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
                // The reference agrees with candle.
                assert_eq!(
                    bits(reference(&q, &values, rows)),
                    bits(expected.clone()),
                    "reference vs candle, k {k}, n_out {n_out}, rows {rows}"
                );
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
fn large_products_on_the_pool_equal_candle() {
    // Past 2^18 multiply-adds the groups run on candle's pool: 1 row of a 4104-feature weight
    // (513 groups, not a multiple of the pieces), and 17 rows.
    let mut rng = Rng::new(0x5EED_0802);
    let (n_out, k) = (4100, 576);
    let q = std::sync::Arc::new(weight(&mut rng, n_out, k));
    let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
    let candle = QMatMul::from_arc(q).unwrap();
    for rows in [1, 17] {
        let x = Tensor::from_vec(varied(&mut rng, rows, k), (rows, k), &Device::Cpu).unwrap();
        let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
        check(&ours, &x, &expected, &format!("pool, rows {rows}"));
    }
}

#[test]
fn shapes_candle_repacks_equal_the_reference() {
    let mut rng = Rng::new(0x5EED_0803);
    for (n_out, k) in [(16, 256), (48, 512)] {
        assert!(!candle_runs_vec_dot(n_out, k));
        let q = weight(&mut rng, n_out, k);
        let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
        for rows in [1, 5] {
            let values = varied(&mut rng, rows, k);
            let x = Tensor::from_vec(values.clone(), (rows, k), &Device::Cpu).unwrap();
            let expected = reference(&q, &values, rows);
            check(&ours, &x, &expected, &format!("k {k}, n_out {n_out}"));
        }
    }
}

#[test]
fn raw_extreme_blocks_equal_candle() {
    // Weights of -128 and 127, scales from subnormal to f16::MAX: the sign trick of candle's
    // kernel and our exact sums agree (the activations never hold -128).
    let mut rng = Rng::new(0x5EED_0804);
    for (n_out, k) in [(9, 64), (40, 576), (3, 800)] {
        let bytes = raw_blocks(&mut rng, n_out, k);
        let q = std::sync::Arc::new(from_raw(&bytes, n_out, k));
        let ours = Q8_0Matrix::from_blocks(&bytes, n_out, k).unwrap();
        let candle = QMatMul::from_arc(q.clone()).unwrap();
        for rows in [1, 8] {
            let mut values = varied(&mut rng, rows, k);
            // Small activations keep `d_w * d_x * 127 * 128 * 32` finite with f16::MAX scales.
            values.iter_mut().for_each(|v| *v = (*v).clamp(-1.0, 1.0));
            let x = Tensor::from_vec(values.clone(), (rows, k), &Device::Cpu).unwrap();
            let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
            assert_eq!(bits(reference(&q, &values, rows)), bits(expected.clone()));
            check(
                &ours,
                &x,
                &expected,
                &format!("raw, [{n_out}, {k}], rows {rows}"),
            );
        }
    }
}

#[test]
fn non_finite_and_huge_inputs_match_candle() {
    let mut rng = Rng::new(0x5EED_0805);
    let (n_out, k) = (16, 96);
    let q = weight(&mut rng, n_out, k);
    let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
    let candle = QMatMul::from_qtensor(q).unwrap();
    let mut values = varied(&mut rng, 4, k);
    values[3] = f32::NAN;
    values[k + 7] = f32::MAX;
    values[2 * k + 40] = 1e-40;
    values[3 * k + 1] = -1e30;
    let x = Tensor::from_vec(values, (4, k), &Device::Cpu).unwrap();
    let expected = candle.forward(&x).unwrap().to_vec2::<f32>().unwrap();
    check(&ours, &x, &expected, "non-finite and huge inputs");
}

#[test]
fn batched_and_strided_inputs_match_candle() {
    let mut rng = Rng::new(0x5EED_0806);
    let (n_out, k) = (40, 128);
    let q = weight(&mut rng, n_out, k);
    let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
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
    // No rows: no outputs.
    let x = Tensor::zeros((0, k), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(ours.forward(&x).unwrap().dims(), &[0, n_out]);
}

#[test]
fn errors() {
    let mut rng = Rng::new(0x5EED_0807);
    let w = Tensor::from_vec(varied(&mut rng, 4, 64), (4, 64), &Device::Cpu).unwrap();
    let kernel = Kernel {
        dtype: GgmlDType::Q8_0,
        others: [GgmlDType::Q4_1, GgmlDType::Q4_0, GgmlDType::F32],
        from_qtensor: Q8_0Matrix::from_qtensor,
        from_blocks: Q8_0Matrix::from_blocks,
        forward: Q8_0Matrix::forward,
        matmul: Q8_0Matrix::matmul,
    };
    refuses_what_does_not_fit(&kernel, &w);
}

#[test]
fn rows_dequantize_as_candles_embedding() {
    // Every row of raw blocks (weights -128 to 127, scales subnormal to f16::MAX) and of a
    // quantized table, looked up as the token embedding: candle's `QTensor::embedding` bits.
    let mut rng = Rng::new(0x5EED_0807);
    for (n_out, k) in [(1, 32), (9, 64), (17, 576)] {
        let bytes = raw_blocks(&mut rng, n_out, k);
        for q in [from_raw(&bytes, n_out, k), weight(&mut rng, n_out, k)] {
            let ours = Q8_0Matrix::from_qtensor(&q).unwrap();
            let ids: Vec<u32> = (0..n_out as u32).rev().collect();
            let ids = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap();
            let expected = q.embedding(&ids).unwrap().to_vec2::<f32>().unwrap();
            for (n, expected) in (0..n_out).rev().zip(expected) {
                let mut row = vec![f32::NAN; k];
                ours.dequantize_row(n, &mut row).unwrap();
                assert_eq!(
                    bits(vec![row]),
                    bits(vec![expected]),
                    "[{n_out}, {k}] row {n}"
                );
            }
        }
        let ours = Q8_0Matrix::from_blocks(&bytes, n_out, k).unwrap();
        assert!(ours.dequantize_row(n_out, &mut vec![0.0; k]).is_err());
        assert!(ours.dequantize_row(0, &mut vec![0.0; k + 1]).is_err());
    }
}
