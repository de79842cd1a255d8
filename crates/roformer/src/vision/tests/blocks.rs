//! The blocks' fused halves (`autograd::attention_branch`, `autograd::mlp_branch`: links with
//! their own backward, in a training pass on the CPU kernels, chained into one op by
//! `autograd::chain`, which is held to the halves run apart bit for bit) against the candle-op
//! path (f64, the same weights, the same seeded dropout and stochastic-depth masks): logits
//! and every gradient, over configs with and without registers, biases, a layer scale of 1,
//! each MLP kind (the gated one falls back to the dense ops), each rotation training uses;
//! bf16 products within bf16's rounding; a few optimiser steps through both paths.

use candle_core::{DType, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};

use super::{classifier, converted, max_abs, max_diff, random, tiny};
use crate::cpu::reference_path::{self, ReferencePath};
use crate::mode::{Dropout, Mode};
use crate::vision::config::{PositionKind, VisionConfig};
use crate::vision::model::VisionForImageClassification;
use crate::{ParamGrads, Precision};

/// Pixels `[3, 2, 13, 10]`: a 3x2 grid, three samples (so that stochastic depth at 0.5 drops
/// some and keeps others).
fn pixels() -> Tensor {
    random(&[3, 2, 13, 10], 31)
}

/// The configs: each rotation and MLP kind, registers or none, biases on or off, stochastic
/// depth and attention dropout on.
fn configs() -> Vec<(&'static str, VisionConfig)> {
    let drops = r#""drop_path_rate": 0.5, "attention_dropout": 0.2"#;
    vec![
        ("axial", tiny(PositionKind::RopeAxial, drops)),
        (
            "axial, integer coordinates",
            tiny(
                PositionKind::RopeAxial,
                &format!(r#"{drops}, "rope_coordinates": "indices""#),
            ),
        ),
        (
            "flat, no registers, no biases, scale 1",
            tiny(
                PositionKind::RopeFlat,
                &format!(
                    r#"{drops}, "num_register_tokens": 0, "mlp_bias": false,
                    "query_bias": false, "key_bias": false, "value_bias": false,
                    "proj_bias": false, "layerscale_value": 1.0"#
                ),
            ),
        ),
        (
            "mixed (attention half on the dense ops)",
            tiny(PositionKind::RopeMixed, drops),
        ),
        (
            "absolute, gated MLP (MLP half on the dense ops)",
            tiny(
                PositionKind::Absolute,
                &format!(r#"{drops}, "use_gated_mlp": true"#),
            ),
        ),
        ("none", tiny(PositionKind::None, r#""drop_path_rate": 0.3"#)),
    ]
}

/// `sum(logits * w)` and its gradients, in a training pass of `model` in `precision` with
/// the dropout stream of seed 5.
fn loss(
    model: &VisionForImageClassification,
    precision: Precision,
    w: &Tensor,
) -> (Tensor, candle_core::backprop::GradStore) {
    loss_delivering(model, precision, w, None)
}

/// [`loss`], the fused ops handing their parameters' gradients to `sink` where given (the
/// backward run through it, as the training loop does).
fn loss_delivering(
    model: &VisionForImageClassification,
    precision: Precision,
    w: &Tensor,
    sink: Option<&ParamGrads>,
) -> (Tensor, candle_core::backprop::GradStore) {
    let d = Dropout::seeded(5);
    let mode = Mode::Train {
        dropout: &d,
        precision,
    };
    let plan = match sink {
        Some(sink) => model.plan(mode).with_param_grads(sink),
        None => model.plan(mode),
    };
    let x = pixels().to_dtype(w.dtype()).unwrap();
    let logits = model.forward(&x, plan).unwrap();
    let l = (&logits * w).unwrap().sum_all().unwrap();
    let grads = match sink {
        Some(sink) => sink.backward(&l),
        None => l.backward(),
    };
    (l, grads.unwrap())
}

/// Checks every variable's gradient of `fast` (f32 vars) against `slow` (f64 vars) within
/// `tol` of the reference's largest magnitude (at least `floor`); returns the largest
/// relative difference.
fn check_gradients(
    what: &str,
    (ga, vars32): (&candle_core::backprop::GradStore, &VarMap),
    (gb, vars64): (&candle_core::backprop::GradStore, &VarMap),
    (tol, floor): (f64, f64),
) -> f64 {
    let (m32, m64) = (vars32.data().lock().unwrap(), vars64.data().lock().unwrap());
    let mut worst = 0f64;
    for (name, v) in m32.iter() {
        let g32 = ga
            .get(v.as_tensor())
            .unwrap_or_else(|| panic!("{what}: no gradient for {name}"));
        let g64 = gb.get(m64[name].as_tensor()).unwrap();
        let scale = max_abs(g64).max(floor);
        let diff = max_diff(g32, g64);
        assert!(diff < tol * scale, "{what} {name}: {diff} of {scale}");
        worst = worst.max(diff / scale);
    }
    worst
}

#[test]
fn vision_fused_blocks_match_the_candle_ops_with_masks_in_f32_and_bf16() {
    for (what, cfg) in configs() {
        let (fast, vars32) = classifier(&cfg, DType::F32, 4);
        let (slow, vars64) = converted(&cfg, &vars32, DType::F64);
        let w = random(&[3, 3], 6);
        let (lb, gb) = loss(&slow, Precision::F32, &w.to_dtype(DType::F64).unwrap());
        let (la, ga) = loss(&fast, Precision::F32, &w);
        let lb = lb.to_scalar::<f64>().unwrap();
        // f32 against f64 through two blocks of O(1) values: 1e-5 of rounding (the whole
        // model's test uses the same bounds).
        let la32 = f64::from(la.to_scalar::<f32>().unwrap());
        assert!(
            (la32 - lb).abs() < 1e-4 * lb.abs().max(1.0),
            "{what}: {la32} vs {lb}"
        );
        check_gradients(what, (&ga, &vars32), (&gb, &vars64), (2e-3, 1e-3));

        let Precision::Bf16 = Precision::Bf16.effective() else {
            continue;
        };
        // bf16 operands (8 bits, 2^-9 relative rounding) in every product of two blocks and
        // their backward: a few percent of the largest value at most (2-3 % measured); a
        // wrong term moves values by far more. The key bias's true gradient is 0 (softmax
        // does not change when every key moves by one vector), so there bf16's rounding is an
        // absolute error: the floor of the scale is 1e-2 (gradients elsewhere are O(0.1-1)).
        let (lc, gc) = loss(&fast, Precision::Bf16, &w);
        let lc = f64::from(lc.to_scalar::<f32>().unwrap());
        assert!(
            (lc - lb).abs() < 5e-2 * lb.abs().max(1.0),
            "{what} bf16: {lc} vs {lb}"
        );
        let worst = check_gradients(
            &format!("{what} bf16"),
            (&gc, &vars32),
            (&gb, &vars64),
            (1e-1, 1e-2),
        );
        eprintln!("{what}: bf16 gradients within {worst:.4} of the largest");
    }
}

#[test]
fn vision_training_steps_give_the_same_losses_on_both_paths() {
    let cfg = tiny(
        PositionKind::RopeAxial,
        r#""drop_path_rate": 0.5, "attention_dropout": 0.2"#,
    );
    let (fast, vars32) = classifier(&cfg, DType::F32, 8);
    let (slow, vars64) = converted(&cfg, &vars32, DType::F64);
    let w = random(&[3, 3], 9);
    let w64 = w.to_dtype(DType::F64).unwrap();
    let mut sgd32 = SGD::new(vars32.all_vars(), 0.05).unwrap();
    let mut sgd64 = SGD::new(vars64.all_vars(), 0.05).unwrap();
    let mut losses = Vec::new();
    for step in 0..4 {
        let (la, ga) = loss(&fast, Precision::F32, &w);
        let (lb, gb) = loss(&slow, Precision::F32, &w64);
        let (la, lb) = (
            f64::from(la.to_scalar::<f32>().unwrap()),
            lb.to_scalar::<f64>().unwrap(),
        );
        // The f32 rounding of each step (1e-5 relative) carried through a few small steps.
        assert!(
            (la - lb).abs() < 1e-4 * lb.abs().max(1.0),
            "step {step}: {la} vs {lb}"
        );
        losses.push(lb);
        sgd32.step(&ga).unwrap();
        sgd64.step(&gb).unwrap();
    }
    // The steps moved the loss: the comparison is of a trajectory, not of one point.
    assert!((losses[3] - losses[0]).abs() > 1e-3, "{losses:?}");
}

#[test]
fn vision_fused_blocks_read_nothing_recycled_and_pack_weights_once_to_the_same_bits() {
    // The fused halves take their kept activations and scratch rows from `cpu::recycle`,
    // whose buffers hold the last user's values. A second pass after every held buffer is
    // overwritten with NaN must give the same loss and gradients to the bit (the passes are
    // deterministic: fixed-order sums, seeded masks); an element read before it is written
    // would be NaN.
    let cfg = tiny(
        PositionKind::RopeAxial,
        r#""drop_path_rate": 0.5, "attention_dropout": 0.2"#,
    );
    let (fast, vars) = classifier(&cfg, DType::F32, 4);
    let w = random(&[3, 3], 6);
    for precision in [Precision::F32, Precision::Bf16.effective()] {
        let (la, ga) = loss(&fast, precision, &w);
        crate::cpu::recycle::poison();
        let (lb, gb) = loss(&fast, precision, &w);
        // Each weight packed by every product that reads it (the reference of the weights
        // packed once for the step): the same words, so the same bits.
        let (lc, gc) = reference_path::with(ReferencePath::WeightsPerProduct, || {
            loss(&fast, precision, &w)
        });
        // And the attention's q, k and v packed once per head, against each product packing
        // its own.
        let (ld, gd) = reference_path::with(ReferencePath::OperandsPerProduct, || {
            loss(&fast, precision, &w)
        });
        let (la, lb, lc, ld) = (
            la.to_scalar::<f32>().unwrap(),
            lb.to_scalar::<f32>().unwrap(),
            lc.to_scalar::<f32>().unwrap(),
            ld.to_scalar::<f32>().unwrap(),
        );
        assert!(
            la.is_finite()
                && la.to_bits() == lb.to_bits()
                && la.to_bits() == lc.to_bits()
                && la.to_bits() == ld.to_bits(),
            "{precision:?}: {la} vs {lb} vs {lc} vs {ld}"
        );
        let bits = grad_bits;
        for (name, v) in vars.data().lock().unwrap().iter() {
            let (a, b) = (bits(&ga, v), bits(&gb, v));
            assert!(
                a.iter().all(|&x| f32::from_bits(x).is_finite()),
                "{precision:?} {name}"
            );
            assert_eq!(a, b, "{precision:?} {name}");
            assert_eq!(a, bits(&gc, v), "{precision:?} {name} packed once");
            assert_eq!(
                a,
                bits(&gd, v),
                "{precision:?} {name} attention packed once"
            );
        }
    }
}

/// The bits of `v`'s gradient in `g`.
fn grad_bits(g: &candle_core::backprop::GradStore, v: &candle_core::Var) -> Vec<u32> {
    let g = g.get(v.as_tensor()).unwrap().flatten_all().unwrap();
    g.to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[test]
fn vision_blocks_chained_as_one_op_give_the_bits_of_the_halves_apart() {
    // Chaining the halves changes candle's graph (one node and one `cat` for a run of
    // consecutive halves instead of one each), not the arithmetic: the same forward and
    // backward calls on the same slices, the masks drawn in the same order. So the loss and
    // every gradient are the same bits as with each half its own op (the path before the
    // chain), with stochastic depth and attention dropout on, in f32 and bf16. The graph's
    // size shows that the chain ran: two blocks of two chained halves have 2 x 3 fewer nodes;
    // where a half is not a link (RoPE-Mixed's attention, the gated MLP) the links between
    // are runs of one, and the graphs are the same size. With a sink for the parameters'
    // gradients (`ParamGrads`, as the training loop gives) the chains' parameters leave
    // candle's graph (fewer nodes still) and their gradients, merged into the store after the
    // backward, are the same bits again.
    let fewer_nodes = [6, 6, 6, 0, 0, 6];
    let w = random(&[3, 3], 6);
    for ((what, cfg), fewer) in configs().into_iter().zip(fewer_nodes) {
        let (model, vars) = classifier(&cfg, DType::F32, 4);
        for precision in [Precision::F32, Precision::Bf16.effective()] {
            let (la, ga) = loss(&model, precision, &w);
            let (lb, gb) =
                reference_path::with(ReferencePath::LinksApart, || loss(&model, precision, &w));
            let sink = ParamGrads::new();
            let (lc, gc) = loss_delivering(&model, precision, &w, Some(&sink));
            let nodes = |l: &Tensor| l.sorted_nodes().len();
            assert_eq!(nodes(&la) + fewer, nodes(&lb), "{what} {precision:?}");
            assert!(nodes(&lc) < nodes(&la), "{what} {precision:?}: delivered");
            let [la, lb, lc] = [la, lb, lc].map(|l| l.to_scalar::<f32>().unwrap());
            assert!(
                la.is_finite() && la.to_bits() == lb.to_bits() && lc.to_bits() == lb.to_bits(),
                "{what} {precision:?}: {la} vs {lb} vs {lc}"
            );
            for (name, v) in vars.data().lock().unwrap().iter() {
                let apart = grad_bits(&gb, v);
                assert_eq!(grad_bits(&ga, v), apart, "{what} {precision:?} {name}");
                assert_eq!(
                    grad_bits(&gc, v),
                    apart,
                    "{what} {precision:?} {name} delivered"
                );
            }
        }
    }
}
