//! The whole model: the fused CPU path (f32) against the candle-op path (f64, the same
//! weights), outputs and gradients, for every position kind; bf16 products; bad pixels.

use candle_core::{DType, Device, Tensor, Var};

use super::{classifier, converted, max_abs, max_diff, random, tiny, KINDS};
use crate::mode::{Dropout, Mode};
use crate::plan::Kernels;
use crate::vision::config::PositionKind;
use crate::vision::error::VisionError;
use crate::Precision;

/// Pixels `[2, 2, 13, 10]`: a 3x2 grid (the config's is 2x3), leftover pixels on both axes.
fn pixels() -> Tensor {
    random(&[2, 2, 13, 10], 21)
}

#[test]
fn vision_fused_path_matches_the_candle_ops_in_values_and_gradients() {
    for kind in KINDS {
        let cfg = tiny(kind, "");
        let (fast, vars32) = classifier(&cfg, DType::F32, 1);
        let (slow, vars64) = converted(&cfg, &vars32, DType::F64);
        let x = pixels();
        let inference = fast.plan(Mode::Inference);
        assert!(matches!(inference.kernels(), Kernels::Cpu(_)));
        assert_eq!(slow.plan(Mode::Inference).kernels(), Kernels::Candle);

        let a = fast.model().forward(&x, inference).unwrap();
        let b = slow
            .model()
            .forward(&x, slow.plan(Mode::Inference))
            .unwrap();
        let t = cfg.prefix_tokens() + 6;
        assert_eq!(a.last_hidden_state.dims(), &[2, t, 16]);
        assert_eq!(a.pooler_output.dims(), &[2, 16]);
        // f32 against f64 through two layers of O(1) values: 1e-5 of rounding.
        assert!(
            max_diff(&a.last_hidden_state, &b.last_hidden_state) < 1e-4,
            "{kind}"
        );
        assert!(
            max_diff(&a.pooler_output, &b.pooler_output) < 1e-4,
            "{kind}"
        );
        let cls = a
            .last_hidden_state
            .narrow(1, 0, 1)
            .unwrap()
            .squeeze(1)
            .unwrap();
        assert_eq!(max_diff(&cls, &a.pooler_output), 0.0);

        let d = Dropout::disabled();
        let train = |p| Mode::Train {
            dropout: &d,
            precision: p,
        };
        let la = fast.forward(&x, fast.plan(train(Precision::F32))).unwrap();
        let lb = slow.forward(&x, slow.plan(train(Precision::F32))).unwrap();
        assert!(max_diff(&la, &lb) < 1e-4, "{kind} logits");
        let weights = random(la.dims(), 5);
        let ga = (&la * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gb = (&lb * weights.to_dtype(DType::F64).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (m32, m64) = (vars32.data().lock().unwrap(), vars64.data().lock().unwrap());
        for (name, v) in m32.iter() {
            let g32 = ga
                .get(v.as_tensor())
                .unwrap_or_else(|| panic!("{kind}: no gradient for {name}"));
            let g64 = gb.get(m64[name].as_tensor()).unwrap();
            let scale = max_abs(g64).max(1e-3);
            let diff = max_diff(g32, g64);
            assert!(diff < 2e-3 * scale, "{kind} {name}: {diff} of {scale}");
        }
    }
}

#[test]
fn vision_bf16_products_stay_near_f32() {
    for kind in [PositionKind::RopeAxial, PositionKind::RopeMixed] {
        let cfg = tiny(kind, "");
        let (model, _) = classifier(&cfg, DType::F32, 2);
        let d = Dropout::disabled();
        let run = |precision| {
            let mode = Mode::Train {
                dropout: &d,
                precision,
            };
            model.forward(&pixels(), model.plan(mode)).unwrap()
        };
        let (f32_logits, bf16_logits) = (run(Precision::F32), run(Precision::Bf16));
        // bf16 operands (8 bits of mantissa) through two layers: a few percent at most.
        let scale = max_abs(&f32_logits);
        assert!(
            max_diff(&f32_logits, &bf16_logits) < 0.05 * scale.max(1.0),
            "{kind}"
        );
        // Inference with bf16 products (`bench vision --precision bf16`): the same bound.
        let inference = model.plan(Mode::Inference);
        let bf16_inference = inference.with_precision(Precision::Bf16.effective());
        let plain = model.forward(&pixels(), inference).unwrap();
        let bf16 = model.forward(&pixels(), bf16_inference).unwrap();
        assert!(
            max_diff(&plain, &f32_logits) < 1e-5 * scale.max(1.0),
            "{kind}"
        );
        assert!(max_diff(&plain, &bf16) < 0.05 * scale.max(1.0), "{kind}");
    }
}

/// A model whose weights are no variables (one loaded for inference) packs each weight once
/// for its bf16 products and keeps it: its forwards, the first (which packs) and the next
/// (which read the kept words), give the bits of the same model on variables, which packs
/// every call. Nothing is kept for variables, so a training step's new weights are read.
#[test]
fn vision_weights_packed_once_give_the_same_bits() {
    let Precision::Bf16 = Precision::Bf16.effective() else {
        eprintln!("no native bf16 kernel: nothing is packed ahead on this CPU");
        return;
    };
    for kind in [PositionKind::RopeAxial, PositionKind::Absolute] {
        let cfg = tiny(kind, "");
        let (on_vars, varmap) = classifier(&cfg, DType::F32, 4);
        let tensors: std::collections::HashMap<String, Tensor> = varmap
            .data()
            .lock()
            .unwrap()
            .iter()
            .map(|(name, v)| (name.clone(), v.as_tensor().detach()))
            .collect();
        let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let fixed = crate::vision::VisionForImageClassification::load(vb, &cfg).unwrap();
        let bf16 = |m: &crate::vision::VisionForImageClassification| {
            let plan = m.plan(Mode::Inference).with_precision(Precision::Bf16);
            m.forward(&pixels(), plan).unwrap()
        };
        let reference = bf16(&on_vars);
        assert_eq!(max_diff(&bf16(&fixed), &reference), 0.0, "{kind}: first");
        assert_eq!(max_diff(&bf16(&fixed), &reference), 0.0, "{kind}: kept");
        // A variable changed in place is read anew (nothing of it was kept).
        let (name, var) = varmap
            .data()
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n.ends_with("up_proj.weight"))
            .map(|(n, v)| (n.clone(), v.clone()))
            .unwrap();
        var.set(&(var.as_tensor() * 2.0).unwrap()).unwrap();
        assert!(
            max_diff(&bf16(&on_vars), &reference) > 0.0,
            "{kind}: {name}"
        );
    }
}

#[test]
fn vision_dropout_and_drop_path_change_training_passes_only() {
    let cfg = tiny(
        PositionKind::RopeAxial,
        r#""attention_dropout": 0.3, "drop_path_rate": 0.5"#,
    );
    let (model, _) = classifier(&cfg, DType::F32, 3);
    let x = pixels();
    let infer = |m: &crate::vision::VisionForImageClassification| {
        m.forward(&x, m.plan(Mode::Inference)).unwrap()
    };
    assert_eq!(max_diff(&infer(&model), &infer(&model)), 0.0);
    let d = Dropout::seeded(9);
    let train = Mode::Train {
        dropout: &d,
        precision: Precision::F32,
    };
    let dropped = model.forward(&x, model.plan(train)).unwrap();
    assert!(max_diff(&dropped, &infer(&model)) > 1e-3);
}

#[test]
fn vision_bad_pixels_are_clear_errors() {
    let cfg = tiny(PositionKind::RopeAxial, "");
    let (model, _) = classifier(&cfg, DType::F32, 4);
    let vit = model.model();
    let run = |x: Tensor| vit.forward(&x, vit.plan(Mode::Inference)).unwrap_err();
    let says = |err: VisionError, what: &str| {
        assert!(matches!(err, VisionError::Input(_)), "{err}");
        assert!(err.to_string().contains(what), "{err} lacks {what}");
    };
    says(
        run(random(&[2, 8, 8], 1)),
        "[batch, channels, height, width]",
    );
    says(run(random(&[1, 3, 8, 8], 1)), "3 channels");
    says(run(random(&[0, 2, 8, 8], 1)), "empty");
    let ints = Tensor::zeros((1, 2, 8, 8), DType::U32, &Device::Cpu).unwrap();
    says(run(ints), "dtype");
    let mut v = vec![0f32; 2 * 8 * 8];
    v[64 + 8 * 3 + 5] = f32::NAN;
    says(
        run(Tensor::from_vec(v, (1, 2, 8, 8), &Device::Cpu).unwrap()),
        "[0, 1, 3, 5]",
    );
    let small = run(random(&[1, 2, 3, 9], 1));
    assert!(
        matches!(
            small,
            VisionError::ImageTooSmall {
                height: 3,
                width: 9,
                patch: 4
            }
        ),
        "{small}"
    );
    // A single patch and a large image both run.
    for (h, w) in [(4, 7), (30, 41)] {
        let out = vit
            .forward(&random(&[1, 2, h, w], 2), vit.plan(Mode::Inference))
            .unwrap();
        assert_eq!(out.last_hidden_state.dim(1).unwrap(), 3 + (h / 4) * (w / 4));
    }
    // f64 pixels are converted.
    let f64_pixels = random(&[1, 2, 8, 8], 3).to_dtype(DType::F64).unwrap();
    assert!(vit.forward(&f64_pixels, vit.plan(Mode::Inference)).is_ok());
}

/// RoPE-Mixed's frequencies and the absolute table learn: a training step's gradient reaches
/// them, on a grid other than the config's.
#[test]
fn vision_learned_positions_get_gradients() {
    for (kind, leaf) in [
        (PositionKind::RopeMixed, "rope_freqs"),
        (PositionKind::Absolute, "position_embeddings"),
    ] {
        let cfg = tiny(kind, "");
        let (model, vars) = classifier(&cfg, DType::F32, 6);
        let d = Dropout::disabled();
        let mode = Mode::Train {
            dropout: &d,
            precision: Precision::F32,
        };
        let logits = model.forward(&pixels(), model.plan(mode)).unwrap();
        let grads = logits.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let map = vars.data().lock().unwrap();
        let learned: Vec<(&String, &Var)> = map.iter().filter(|(n, _)| n.ends_with(leaf)).collect();
        assert!(!learned.is_empty(), "{kind}");
        for (name, var) in learned {
            let g = grads.get(var.as_tensor()).unwrap();
            assert!(max_abs(g) > 1e-6, "{name} gets no gradient");
        }
    }
}
