//! The fused MLP half of a pre-norm block (`mlp_branch`) against its slow twin of candle ops
//! in f64: the output and the gradients of the input and of every parameter, with and without
//! biases and stochastic depth (a fixed keep mask), at odd and even widths; f32 products and
//! bf16 products.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Linear;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::{max_abs, max_abs_diff};

use crate::autograd::dropout::KeepMask;
use crate::autograd::mlp_branch::{mlp_branch, mlp_branch_slow, MlpBranch};
use crate::cpu::Precision;

/// The variables of one case: `h`, the norm's weight and bias, `W1`, `b1`, `W2`, `b2`,
/// `lambda` (biases absent when the case has none).
struct Case {
    vars: Vec<Option<Var>>,
    keep: Option<KeepMask>,
}

const NAMES: [&str; 8] = ["h", "norm.w", "norm.b", "W1", "b1", "W2", "b2", "lambda"];

impl Case {
    /// Samples `b` of `t` tokens, widths `hidden` and `inner`; values uniform in [-1, 1)
    /// (the norm's weight around 1, lambda around 0.5); sample 1 dropped by the mask when
    /// `drop`.
    fn new(
        seed: u64,
        (b, t, hidden, inner): (usize, usize, usize, usize),
        bias: bool,
        drop: bool,
    ) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut var = |dims: &[usize], shift: f32| {
            let n: usize = dims.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|_| f64::from(rng.random_range(-1.0f32..1.0) + shift))
                .collect();
            Some(Var::from_tensor(&Tensor::from_vec(v, dims, &Device::Cpu).unwrap()).unwrap())
        };
        let vars = vec![
            var(&[b, t, hidden], 0.3),
            var(&[hidden], 1.0),
            var(&[hidden], 0.0),
            var(&[inner, hidden], 0.0),
            if bias { var(&[inner], 0.0) } else { None },
            var(&[hidden, inner], 0.0),
            if bias { var(&[hidden], 0.0) } else { None },
            var(&[hidden], 0.5),
        ];
        // Every sample kept but sample 1, kept ones scaled by 1 / (1 - 0.25).
        let bits = (0..b).filter(|&s| s != 1).fold(0u64, |w, s| w | (1 << s));
        let keep = drop.then(|| KeepMask::new(vec![bits], b, 1.0 / 0.75));
        Case { vars, keep }
    }

    /// The variables as tensors in `dtype`, detached from the f64 ones (new leaves).
    fn leaves(&self, dtype: DType) -> Vec<Option<Var>> {
        self.vars
            .iter()
            .map(|v| {
                v.as_ref()
                    .map(|v| Var::from_tensor(&v.as_tensor().to_dtype(dtype).unwrap()).unwrap())
            })
            .collect()
    }
}

/// The output and the gradient of every variable of `sum(y * c)` (`c` fixed, random) for the
/// branch over `leaves`, fused in `precision` or the slow twin (`None`).
fn run(
    case: &Case,
    leaves: &[Option<Var>],
    precision: Option<Precision>,
) -> (Tensor, Vec<Option<Tensor>>) {
    let t = |i: usize| leaves[i].as_ref().map(|v| v.as_tensor().clone());
    let up = Linear::new(t(3).unwrap(), t(4));
    let down = Linear::new(t(5).unwrap(), t(6));
    let (nw, nb, lambda) = (t(1).unwrap(), t(2).unwrap(), t(7).unwrap());
    let p = MlpBranch {
        norm: (&nw, &nb, 1e-5),
        up: &up,
        down: &down,
        lambda: &lambda,
    };
    let h = t(0).unwrap();
    let y = match precision {
        Some(precision) => mlp_branch(&h, p, case.keep.clone(), precision).unwrap(),
        None => mlp_branch_slow(&h, p, case.keep.clone()).unwrap(),
    };
    let c = {
        let mut rng = StdRng::seed_from_u64(99);
        let v: Vec<f32> = (0..y.elem_count())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Tensor::from_vec(v, y.dims(), &Device::Cpu)
            .unwrap()
            .to_dtype(y.dtype())
            .unwrap()
    };
    let grads = (&y * c).unwrap().sum_all().unwrap().backward().unwrap();
    let g = leaves
        .iter()
        .map(|v| {
            v.as_ref()
                .map(|v| grads.get(v.as_tensor()).expect("a gradient").clone())
        })
        .collect();
    (y, g)
}

/// Checks the fused op in `precision` against the f64 twin: every value within `tol` of the
/// reference's largest magnitude (at least 1).
fn check(precision: Precision, tol: f64) {
    let shapes = [(3, 5, 16, 24), (2, 7, 12, 20), (4, 3, 8, 40)];
    for (s, &shape) in shapes.iter().enumerate() {
        for (bias, drop) in [(true, false), (true, true), (false, true), (false, false)] {
            let case = Case::new(s as u64 + 7, shape, bias, drop);
            let what = format!("{precision} {shape:?} bias {bias} drop {drop}");
            let (y64, g64) = run(&case, &case.leaves(DType::F64), None);
            let (y32, g32) = run(&case, &case.leaves(DType::F32), Some(precision));
            let scale = max_abs(&y64).max(1.0);
            let diff = max_abs_diff(&y32, &y64);
            assert!(diff < tol * scale, "{what} y: {diff} of {scale}");
            for (i, (a, b)) in g32.iter().zip(&g64).enumerate() {
                let (Some(a), Some(b)) = (a, b) else {
                    assert!(a.is_none() && b.is_none(), "{what} {}", NAMES[i]);
                    continue;
                };
                let scale = max_abs(b).max(1.0);
                let diff = max_abs_diff(a, b);
                assert!(
                    diff < tol * scale,
                    "{what} d{}: {diff} of {scale}",
                    NAMES[i]
                );
                if drop && i == 0 {
                    // The dropped sample's input gradient is the residual's alone, exactly.
                    let (ga, gb) = (a.get(1).unwrap(), b.get(1).unwrap());
                    assert!(
                        max_abs_diff(&ga, &gb) < 1e-6 * scale,
                        "{what} dropped sample"
                    );
                }
            }
        }
    }
}

#[test]
fn mlp_branch_matches_its_twin_in_f32_with_every_gradient() {
    // f32 against f64 over sums of at most 40 O(1) terms and a layer norm: rounding of a few
    // 1e-7 relative per step, about 1e-6 of the largest value at the end; 1e-4 leaves a wide
    // margin while catching any wrong term (a missing factor moves values by O(0.1)).
    check(Precision::F32, 1e-4);
}

#[test]
fn mlp_branch_matches_its_twin_with_bf16_products() {
    let Precision::Bf16 = Precision::Bf16.effective() else {
        eprintln!("no native bf16 kernel: the products run in f32 here");
        return;
    };
    // bf16 operands carry 8 bits (relative rounding up to 2^-9 = 0.2 %); through four
    // products of at most 40 terms each and the chain of the backward, errors stay near 1 %
    // of the largest value. 3 % bounds that; a wrong term moves values by tens of percent.
    check(Precision::Bf16, 3e-2);
}
