//! Gradients against central finite differences, in f64 on the candle-op path, for every
//! position kind: every variable of a tiny classifier (backbone, RoPE-Mixed's frequencies,
//! the absolute table, the head) is checked at a few of its entries.

use candle_core::{DType, Tensor, Var};

use super::{classifier, random, tiny, KINDS};
use crate::mode::{Dropout, Mode};
use crate::vision::model::VisionForImageClassification;
use crate::Precision;

/// `sum(logits * weights)` of `model` on `x` in training mode (no dropout), as f64.
fn loss(model: &VisionForImageClassification, x: &Tensor, weights: &Tensor) -> Tensor {
    let d = Dropout::disabled();
    let mode = Mode::Train {
        dropout: &d,
        precision: Precision::F32,
    };
    let logits = model.forward(x, model.plan(mode)).unwrap();
    (logits * weights).unwrap().sum_all().unwrap()
}

/// `var` with `delta` added at flat index `i`.
fn nudged(var: &Var, i: usize, delta: f64) -> Tensor {
    let mut v = var
        .as_tensor()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    v[i] += delta;
    Tensor::from_vec(v, var.dims(), var.device()).unwrap()
}

#[test]
fn vision_gradients_match_finite_differences_for_every_position_kind() {
    // A 3x2 grid (the config's is 2x3): the absolute table is resampled.
    let x = random(&[1, 2, 13, 9], 8).to_dtype(DType::F64).unwrap();
    for kind in KINDS {
        let cfg = tiny(kind, "");
        let (model, varmap) = classifier(&cfg, DType::F64, 12);
        let weights = random(&[1, 3], 13).to_dtype(DType::F64).unwrap();
        let grads = loss(&model, &x, &weights).backward().unwrap();
        let vars = varmap.data().lock().unwrap();
        let mut names: Vec<&String> = vars.keys().collect();
        names.sort();
        let mut checked = 0;
        for name in names {
            let var = &vars[name];
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{kind}: no gradient for {name}"));
            let g = g.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let n = g.len();
            let original = var.as_tensor().copy().unwrap();
            for i in [0, n / 3, n / 2, n - 1] {
                let eps = 1e-5;
                let at = |delta: f64| {
                    var.set(&nudged(var, i, delta)).unwrap();
                    let l = loss(&model, &x, &weights).to_scalar::<f64>().unwrap();
                    var.set(&original).unwrap();
                    l
                };
                let fd = (at(eps) - at(-eps)) / (2.0 * eps);
                // Central differences in f64: truncation ~1e-10, rounding ~1e-11.
                let tol = 1e-6 + 1e-5 * g[i].abs();
                assert!(
                    (fd - g[i]).abs() < tol,
                    "{kind} {name}[{i}]: {fd} vs {}",
                    g[i]
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{kind}: {checked} entries checked");
    }
}
