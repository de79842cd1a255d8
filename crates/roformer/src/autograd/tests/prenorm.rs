//! The training blocks' dense products written store-only (`dense_store`), their bias added
//! by the pass that reads them (`join`, `join_backward`, `kept_rows::gelu`), against the
//! product with the bias preloaded (`dense`, the reference): the same bits, element by
//! element, in f32 and bf16, with and without a bias, on buffers poisoned with NaN (an
//! element left unwritten would show). Rows and widths off the micro-tile (12 x 32) and an
//! odd depth exercise the edge tiles and the pair padding.

use crate::autograd::dropout::KeepMask;
use crate::autograd::kept_rows;
use crate::autograd::prenorm::{dense, dense_store, Samples};
use crate::cpu::kept::{Kept, Side};
use crate::cpu::{recycle, Precision};

use super::values;

/// `n` values in `[-scale, scale)` as f32.
fn f32s(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    values(n, seed, scale)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// The bit patterns of `v`.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The f32 rows of a kept activation (its slopes' owner keeps only these in f32).
fn rows_of(kept: &Kept) -> Vec<u32> {
    match kept {
        Kept::F32 { data, .. } => bits(data),
        Kept::Bf16 { rows_words, .. } => rows_words.to_vec(),
    }
}

#[test]
fn store_only_products_with_the_bias_added_by_their_readers_give_the_same_bits() {
    // (rows, width k, out): edge tiles in both directions, an odd k, k past one pair block.
    let shapes = [(29, 23, 40), (12, 64, 32), (7, 5, 3)];
    let precisions = [Precision::F32, Precision::Bf16.effective()];
    for (s, &(rows, k, out)) in shapes.iter().enumerate() {
        for precision in precisions {
            for with_bias in [true, false] {
                let what = format!("{precision} {rows}x{k}x{out} bias {with_bias}");
                let seed = 10 * s as u64;
                let x = f32s(rows * k, seed + 1, 1.0);
                let w = f32s(out * k, seed + 2, 0.5);
                let b = with_bias.then(|| f32s(out, seed + 3, 1.0));
                let bias = b.as_deref();
                let input = kept_rows::copy(&x, k, Side::Input, precision, false).0;
                recycle::poison();
                let want = dense(&input, (&w, None), bias, out, rows).unwrap();
                let got = dense_store(&input, (&w, None), out, rows).unwrap();
                assert!(got.iter().all(|v| v.is_finite()), "{what}: unwritten");
                // The product's own elements, the bias added after: the preloaded ones.
                let zeros = vec![0f32; out];
                let b_row = bias.unwrap_or(&zeros);
                let added: Vec<f32> = got
                    .chunks_exact(out)
                    .flat_map(|row| row.iter().zip(b_row).map(|(v, b)| v + b))
                    .collect();
                assert_eq!(bits(&added), bits(&want), "{what}: product + bias");

                // The GELU's pass: the activation and the slopes.
                let (mut u_got, mut u_want) = (got.clone(), want.clone());
                let a_got = kept_rows::gelu(&mut u_got, bias, out, precision);
                let a_want = kept_rows::gelu(&mut u_want, None, out, precision);
                assert_eq!(bits(&u_got), bits(&u_want), "{what}: slopes");
                assert_eq!(rows_of(&a_got), rows_of(&a_want), "{what}: gelu");

                // The join and its backward, one sample of every 2 rows dropped by the mask.
                let lambda = f32s(out, seed + 4, 1.0);
                let h = f32s(rows * out, seed + 5, 1.0);
                let g = f32s(rows * out, seed + 6, 1.0);
                let samples = rows.div_ceil(2).min(64);
                let bits_kept = (0..samples).step_by(2).fold(0u64, |m, s| m | (1 << s));
                let keep = (rows % 2 == 0).then(|| KeepMask::new(vec![bits_kept], samples, 2.0));
                let factors = Samples::new(keep);
                let y_got = factors.join(&h, (&got, bias), &lambda).unwrap();
                let y_want = factors.join(&h, (&want, None), &lambda).unwrap();
                assert_eq!(bits(&y_got), bits(&y_want), "{what}: join");
                let (dm_got, dl_got, db_got) =
                    factors.join_backward(&g, (&got, bias), &lambda, precision);
                let (dm_want, dl_want, db_want) =
                    factors.join_backward(&g, (&want, None), &lambda, precision);
                assert_eq!(bits(&dl_got), bits(&dl_want), "{what}: dlambda");
                assert_eq!(bits(&db_got), bits(&db_want), "{what}: db");
                assert_eq!(rows_of(&dm_got), rows_of(&dm_want), "{what}: dm");
            }
        }
    }
}
