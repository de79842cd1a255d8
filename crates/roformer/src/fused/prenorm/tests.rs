//! The row stages of a pre-norm block against their references of candle ops in f64 (layer
//! norm, candle-nn's dense layer, the erf GELU, the scaled residual) and the fused attention
//! op, with and without biases and rotation, at row counts around the kernel's panels (1,
//! `MR + 1`, several blocks) and odd widths; the row blocks; sizes that do not fit.

use candle_core::{DType, Device, Tensor};
use candle_nn::Linear;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::{max_abs, max_abs_diff};

use rotary::{Coefficients, CosSin, Layout};

use super::{
    attention_half, blocks, mlp_half, normed_product, pack_rows, scaled_residual, Heads,
    PackedDense, RowLayerNorm,
};
use crate::autograd::attention::{attention, FusedAttention};
use crate::autograd::layer_norm_slow;
use crate::autograd::layer_scale::scaled_residual_slow;
use crate::autograd::linear::linear_slow;
use crate::autograd::mlp_branch::{mlp_branch_slow, MlpBranch};
use crate::cpu::bf16::{PackedB, MR};
use crate::cpu::{Mat, Precision};

/// bf16 operands carry 8 bits (relative rounding up to 2^-9 each), so a sum of `k` products
/// of O(1) values is off by up to about `k 2^-8` of its terms' size, and the outputs here (at
/// most 40 terms, two products chained in the MLP) stay within 1 % of the largest value.
/// 3 % bounds that; a wrong term (a missing bias, scale or residual, a row of another block)
/// moves values by tens of percent.
const TOL: f64 = 3e-2;

/// `n` values uniform in `[-1, 1) + shift`.
fn values(rng: &mut StdRng, n: usize, shift: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) + shift)
        .collect()
}

/// `v` as an f64 tensor of `dims`.
fn f64s(v: &[f32], dims: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
}

/// A dense layer `[out, in]` with a bias when `bias`: its f32 values and its packed `W^T`.
struct Layer {
    w: Vec<f32>,
    b: Option<Vec<f32>>,
    packed: PackedB,
    dims: (usize, usize),
}

impl Layer {
    fn new(rng: &mut StdRng, (out, inp): (usize, usize), bias: bool) -> Layer {
        let w = values(rng, out * inp, 0.0);
        let b = bias.then(|| values(rng, out, 0.0));
        let packed = PackedB::new(Mat::rows(&w, inp).t(), inp, out, true);
        Layer {
            w,
            b,
            packed,
            dims: (out, inp),
        }
    }

    fn dense(&self) -> PackedDense<'_> {
        PackedDense {
            weight: self.packed.view(),
            bias: self.b.as_deref(),
        }
    }

    /// The layer in f64, for the references.
    fn linear(&self) -> Linear {
        let (out, inp) = self.dims;
        Linear::new(
            f64s(&self.w, &[out, inp]),
            self.b.as_ref().map(|b| f64s(b, &[out])),
        )
    }

    /// The layer in f32, for the fused attention's reference.
    fn linear_f32(&self) -> Linear {
        let (out, inp) = self.dims;
        let f32s = |v: &[f32], dims: &[usize]| Tensor::from_vec(v.to_vec(), dims, &Device::Cpu);
        Linear::new(
            f32s(&self.w, &[out, inp]).unwrap(),
            self.b.as_ref().map(|b| f32s(b, &[out]).unwrap()),
        )
    }
}

/// A layer norm of `width`: weight around 1.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Norm {
    fn new(rng: &mut StdRng, width: usize) -> Norm {
        Norm {
            w: values(rng, width, 1.0),
            b: values(rng, width, 0.0),
        }
    }

    fn rows(&self) -> RowLayerNorm<'_> {
        RowLayerNorm {
            weight: &self.w,
            bias: &self.b,
            eps: 1e-5,
        }
    }

    fn f64s(&self) -> (Tensor, Tensor) {
        (
            f64s(&self.w, &[self.w.len()]),
            f64s(&self.b, &[self.b.len()]),
        )
    }
}

/// Whether this CPU runs bf16 products (the stages need its native kernel).
fn native() -> bool {
    let here = Precision::Bf16.effective() == Precision::Bf16;
    if !here {
        eprintln!("no native bf16 kernel: the row stages do not run on this CPU");
    }
    here
}

/// Row counts: one, a panel and one, several blocks on the threads, and a batch's 201.
const ROWS: [usize; 4] = [1, MR + 1, 50, 201];

/// Asserts `got` (f32, `[rows, width]`) within [`TOL`] of `want` (f64) relative to the largest.
fn assert_near(got: Vec<f32>, want: &Tensor, what: &str) {
    let got = Tensor::from_vec(got, want.dims(), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let scale = max_abs(want).max(1.0);
    let diff = max_abs_diff(&got, want);
    assert!(diff < TOL * scale, "{what}: {diff} of {scale}");
}

#[test]
fn normed_product_matches_layer_norm_then_the_dense_layer_in_f64() {
    if !native() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(3);
    for (rows, (out, inp), bias) in ROWS
        .into_iter()
        .flat_map(|r| [(r, (33, 24), true), (r, (5, 7), false)])
    {
        let (norm, layer) = (
            Norm::new(&mut rng, inp),
            Layer::new(&mut rng, (out, inp), bias),
        );
        let x = values(&mut rng, rows * inp, 0.3);
        let got = normed_product(&x, norm.rows(), layer.dense()).unwrap();
        let (nw, nb) = norm.f64s();
        let xn = layer_norm_slow(&f64s(&x, &[rows, inp]), &nw, &nb, 1e-5).unwrap();
        let want = linear_slow(&xn, &layer.linear(), None).unwrap();
        assert_near(
            got,
            &want,
            &format!("rows {rows}, {out}x{inp}, bias {bias}"),
        );
    }
}

#[test]
fn scaled_residual_matches_the_dense_layer_then_the_scaled_join_in_f64() {
    if !native() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(5);
    for (rows, (out, inp), bias) in ROWS
        .into_iter()
        .flat_map(|r| [(r, (24, 40), true), (r, (9, 9), false)])
    {
        let layer = Layer::new(&mut rng, (out, inp), bias);
        let (c, r) = (
            values(&mut rng, rows * inp, 0.0),
            values(&mut rng, rows * out, 0.2),
        );
        let lambda = values(&mut rng, out, 0.5);
        let got = scaled_residual(&pack_rows(&c, inp), &r, layer.dense(), &lambda).unwrap();
        let branch = linear_slow(&f64s(&c, &[rows, inp]), &layer.linear(), None).unwrap();
        let want = scaled_residual_slow(
            &branch,
            &f64s(&lambda, &[out]),
            &f64s(&r, &[rows, out]),
            None,
        )
        .unwrap();
        assert_near(
            got,
            &want,
            &format!("rows {rows}, {out}x{inp}, bias {bias}"),
        );
    }
}

#[test]
fn mlp_half_matches_the_mlp_branch_reference_in_f64() {
    if !native() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(7);
    for (rows, (hidden, inner), bias) in ROWS
        .into_iter()
        .flat_map(|r| [(r, (16, 40), true), (r, (12, 21), false)])
    {
        let norm = Norm::new(&mut rng, hidden);
        let up = Layer::new(&mut rng, (inner, hidden), bias);
        let down = Layer::new(&mut rng, (hidden, inner), bias);
        let h = values(&mut rng, rows * hidden, 0.3);
        let lambda = values(&mut rng, hidden, 0.5);
        let got = mlp_half(&h, norm.rows(), (up.dense(), down.dense()), &lambda).unwrap();
        let (nw, nb) = norm.f64s();
        let (up64, down64, lambda64) = (up.linear(), down.linear(), f64s(&lambda, &[hidden]));
        let branch = MlpBranch {
            norm: (&nw, &nb, 1e-5),
            up: &up64,
            down: &down64,
            lambda: &lambda64,
        };
        let want = mlp_branch_slow(&f64s(&h, &[rows, hidden]), branch, None).unwrap();
        let what = format!("rows {rows}, {hidden} -> {inner}, bias {bias}");
        assert_near(got, &want, &what);
    }
}

#[test]
fn row_blocks_are_whole_panels_covering_every_row_in_order_evenly() {
    for rows in [0, 1, MR, MR + 1, 201, 1608, 6912] {
        let blocks = blocks(rows);
        let mut next = 0;
        for b in &blocks {
            assert_eq!(b.start, next, "{rows} rows: {blocks:?}");
            assert!(b.start.is_multiple_of(MR) && !b.is_empty(), "{rows}: {b:?}");
            assert!(b.len() <= 4 * MR, "{rows}: {b:?}");
            next = b.end;
        }
        assert_eq!(next, rows, "{rows} rows: {blocks:?}");
        // Panels per block differ by one at most, so the halves of the list hold equal work.
        let panels: Vec<usize> = blocks.iter().map(|b| b.len().div_ceil(MR)).collect();
        let (least, most) = (panels.iter().min(), panels.iter().max());
        assert!(
            most.zip(least).is_none_or(|(m, l)| m - l <= 1),
            "{rows}: {panels:?}"
        );
    }
    let threads = rayon::current_num_threads();
    assert!(blocks(1608).len().is_multiple_of(threads));
}

#[test]
fn sizes_that_do_not_fit_are_errors() {
    if !native() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(11);
    let (norm, layer) = (Norm::new(&mut rng, 8), Layer::new(&mut rng, (6, 8), true));
    let x = values(&mut rng, 3 * 8, 0.0);
    // Rows that are not whole, a norm of another width, a bias of another length.
    assert!(normed_product(&x[..20], norm.rows(), layer.dense()).is_err());
    let short = RowLayerNorm {
        weight: &norm.w[..7],
        ..norm.rows()
    };
    assert!(normed_product(&x, short, layer.dense()).is_err());
    let bad_bias = PackedDense {
        bias: Some(&norm.b[..5]),
        ..layer.dense()
    };
    assert!(normed_product(&x, norm.rows(), bad_bias).is_err());
    // A residual of no whole rows, a scale of another width; an MLP whose layers do not chain.
    let (r, lambda) = (values(&mut rng, 3 * 6, 0.0), values(&mut rng, 6, 0.0));
    let words = pack_rows(&x, 8);
    assert!(scaled_residual(&words, &r[..11], layer.dense(), &lambda).is_err());
    assert!(scaled_residual(&words, &r, layer.dense(), &lambda[..5]).is_err());
    // Heads of an odd dim; a rotation table of other rows.
    let norm6 = Norm::new(&mut rng, 6);
    let (qkv, out) = (
        Layer::new(&mut rng, (18, 6), true),
        Layer::new(&mut rng, (6, 6), true),
    );
    let (x6, lambda6) = (values(&mut rng, 3 * 6, 0.0), values(&mut rng, 6, 0.0));
    let layers = (qkv.dense(), out.dense());
    let odd = Heads {
        b: 1,
        t: 3,
        heads: 2,
        d: 3,
    };
    assert!(attention_half(&x6, odd, norm6.rows(), layers, None, &lambda6).is_err());
    let even = Heads {
        b: 1,
        t: 3,
        heads: 3,
        d: 2,
    };
    let table = CosSin::from_angles(Layout::Half, 2, 5, 1.0, |_, _| 0.5).unwrap();
    let rope = Some(table.view());
    assert!(attention_half(&x6, even, norm6.rows(), layers, rope, &lambda6).is_err());
}

#[test]
fn attention_half_matches_the_fused_attention_op_between_the_reference_layers() {
    if !native() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(13);
    // (sequences, tokens, heads, head dim): one tile, several tiles and a ragged last one.
    for (b, t, heads, d) in [(1, 5, 2, 8), (2, 13, 3, 4), (3, 50, 2, 6)] {
        for (bias, rotate) in [(true, true), (false, true), (true, false)] {
            let h = heads * d;
            let norm = Norm::new(&mut rng, h);
            let qkv = Layer::new(&mut rng, (3 * h, h), bias);
            let out = Layer::new(&mut rng, (h, h), bias);
            let x = values(&mut rng, b * t * h, 0.3);
            let lambda = values(&mut rng, h, 0.5);
            // Token 0 unrotated (a prefix token), the others by angles that grow with it.
            let table = CosSin::from_angles(Layout::Half, d, t, 1.0, |row, i| {
                row as f64 * 0.7 / (i + 1) as f64
            })
            .unwrap();
            let dims = Heads { b, t, heads, d };
            let layers = (qkv.dense(), out.dense());
            let rope = rotate.then(|| table.view());
            let got = attention_half(&x, dims, norm.rows(), layers, rope, &lambda).unwrap();

            let x32 = Tensor::from_vec(x.clone(), (b, t, h), &Device::Cpu).unwrap();
            let (nw, nb) = norm.f64s();
            let f32s = |t: Tensor| t.to_dtype(DType::F32).unwrap();
            let xn = layer_norm_slow(&x32, &f32s(nw), &f32s(nb), 1e-5).unwrap();
            let projections = linear_slow(&xn, &qkv.linear_f32(), None).unwrap();
            let spec = FusedAttention {
                heads,
                mask: None,
                rope: rotate.then(|| Coefficients::Computed(table.clone())),
                rotary_value: false,
                dropout: None,
                precision: Precision::F32,
            };
            let context = attention(&projections, None, spec).unwrap();
            let branch = linear_slow(&context, &out.linear_f32(), None).unwrap();
            let lambda32 = Tensor::from_vec(lambda.clone(), h, &Device::Cpu).unwrap();
            let want = scaled_residual_slow(&branch, &lambda32, &x32, None).unwrap();
            let want = want
                .to_dtype(DType::F64)
                .unwrap()
                .reshape((b * t, h))
                .unwrap();
            let what =
                format!("{b} x {t} tokens, {heads} heads of {d}, bias {bias}, rotate {rotate}");
            assert_near(got, &want, &what);
        }
    }
}
