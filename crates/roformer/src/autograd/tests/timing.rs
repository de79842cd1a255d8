//! Rough CPU timings of the fused ops against the compositions of primitives (ignored; run
//! with `cargo test -p roformer --lib autograd::tests::timing -- --ignored --nocapture`).
//!
//! Each line gives the forward alone, then forward + backward of `L = sum(op(x) * c)` through
//! candle's autograd; the first line of each group times that loss on `x` itself (multiply,
//! sum and their backward, where candle allocates and fills several full-size tensors), which
//! every op's total includes. On a virtual machine fresh allocations page-fault, which can
//! dominate; `MALLOC_MMAP_THRESHOLD_=2000000000 MALLOC_TRIM_THRESHOLD_=4000000000` (glibc)
//! keeps freed memory for reuse and steadies the numbers.

use std::time::{Duration, Instant};

use candle_core::{DType, Tensor, Var};

use super::random;
use crate::autograd::{
    layer_norm, layer_norm_slow, rms_norm, rms_norm_slow, softmax_last_dim,
    softmax_last_dim_backward, softmax_last_dim_slow,
};

/// An op on f32 inputs, for timing.
type Op<'a> = &'a dyn Fn(&[Tensor]) -> Tensor;

/// The fastest of `runs` timings of `f` after two warm-up calls (the least disturbed by other
/// work on a shared machine), in milliseconds.
fn best(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let fastest = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap_or(Duration::ZERO);
    fastest.as_secs_f64() * 1e3
}

/// Forward alone, and forward + backward of `sum(op(inputs) * c)`, in milliseconds.
fn time(op: Op<'_>, inputs: &[Tensor]) -> (f64, f64) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    // The loss works on a 2D view: candle's backward of `sum_all` over 4D tensors takes a slow
    // strided path that would swamp the ops' own costs.
    let flat = |y: Tensor| y.flatten_to(y.rank().saturating_sub(2)).unwrap();
    let shape = flat(op(&tensors)).dims().to_vec();
    let c = random(&shape, 99, 1.0).to_dtype(DType::F32).unwrap();
    let fwd = best(21, || {
        op(&tensors);
    });
    let both = best(21, || {
        let loss = (flat(op(&tensors)) * &c).unwrap().sum_all().unwrap();
        loss.backward().unwrap();
    });
    (fwd, both)
}

/// Prints the timings of the loss alone and of each op in `ops` on `inputs`.
fn report(shape: &str, ops: &[(&str, Op<'_>)], inputs: &[Tensor]) {
    let (_, harness) = time(&|t| t[0].clone(), &inputs[..1]);
    eprintln!("{shape}: the loss alone, forward+backward {harness:.3} ms");
    for (name, op) in ops {
        let (fwd, both) = time(*op, inputs);
        eprintln!("  {name:<28} forward {fwd:7.3} ms   forward+backward {both:7.3} ms");
    }
}

#[test]
#[ignore = "timing, not a check"]
fn timings() {
    eprintln!("rayon threads: {}", rayon::current_num_threads());
    let f32 = |t: Tensor| t.to_dtype(DType::F32).unwrap();

    let x = f32(random(&[8, 6, 128, 128], 1, 4.0));
    let y = softmax_last_dim(&x).unwrap();
    let g = f32(random(&[8, 6, 128, 128], 5, 1.0));
    let kernel = best(21, || {
        softmax_last_dim_backward(&y, &g).unwrap();
    });
    eprintln!("softmax backward kernel alone [8,6,128,128]: {kernel:.3} ms");
    report(
        "softmax [8,6,128,128]",
        &[
            ("fused", &|t| softmax_last_dim(&t[0]).unwrap()),
            ("primitives", &|t| softmax_last_dim_slow(&t[0]).unwrap()),
            ("candle-nn (no backward)", &|t| {
                candle_nn::ops::softmax_last_dim(&t[0]).unwrap()
            }),
        ],
        &[x],
    );

    let x = f32(random(&[1024, 384], 2, 2.0));
    let w = f32(random(&[384], 3, 1.0));
    let b = f32(random(&[384], 4, 1.0));
    report(
        "layer_norm [1024,384]",
        &[
            ("fused", &|t| {
                layer_norm(&t[0], &t[1], &t[2], 1e-12).unwrap()
            }),
            ("primitives", &|t| {
                layer_norm_slow(&t[0], &t[1], &t[2], 1e-12).unwrap()
            }),
            ("candle-nn (no backward)", &|t| {
                candle_nn::ops::layer_norm(&t[0], &t[1], &t[2], 1e-12).unwrap()
            }),
        ],
        &[x.clone(), w, b],
    );
    report(
        "rms_norm [1024,384]",
        &[
            ("fused", &|t| rms_norm(&t[0], 1e-12).unwrap()),
            ("primitives", &|t| rms_norm_slow(&t[0], 1e-12).unwrap()),
        ],
        &[x],
    );
}
