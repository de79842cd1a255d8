//! ALiBi and T5 relative positions in the model: which path runs them, the two against each
//! other, gradients by finite differences, and checkpoints.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use roformer::train::build_trainable;
use roformer::{
    Dropout, HeadModel, Mode, ModelDir, ModelError, Precision, RawConfig, RoFormerConfig,
    RoFormerForMaskedLM, RoFormerModel,
};
use test_support::{max_abs_diff, Scratch};

const HEADS: usize = 4;

/// A small config of `position` positions (`extra` fields on top).
fn config(position: &str, extra: RawConfig) -> RoFormerConfig {
    RoFormerConfig::try_from(RawConfig {
        vocab_size: 30,
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: HEADS,
        intermediate_size: 24,
        position_embedding_type: Some(roformer::PositionEmbeddingType::parse(position).unwrap()),
        hidden_act: roformer::Activation::Gelu,
        ..extra
    })
    .unwrap()
}

fn ids(rows: &[&[u32]]) -> Tensor {
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), rows[0].len()), &Device::Cpu).unwrap()
}

/// The encoder of `cfg` on the variables of `vars` (created with candle-nn's initialisers on
/// first use, then shared), in `dtype`.
fn encoder(cfg: &RoFormerConfig, vars: &VarMap, dtype: DType) -> RoFormerModel {
    RoFormerModel::load(VarBuilder::from_varmap(vars, dtype, &Device::Cpu), cfg).unwrap()
}

/// A copy of `vars` in `dtype`, each tensor a fresh variable.
fn converted(vars: &VarMap, dtype: DType) -> VarMap {
    let copy = VarMap::new();
    {
        let mut data = copy.data().lock().unwrap();
        for (name, var) in vars.data().lock().unwrap().iter() {
            let t = var.as_tensor().to_dtype(dtype).unwrap();
            data.insert(name.clone(), Var::from_tensor(&t).unwrap());
        }
    }
    copy
}

/// `sum(h * w)` over the training forward's hidden states `h`, for fixed weights `w`: a scalar
/// whose gradient reaches every use of every weight.
fn loss(model: &RoFormerModel, w: &Tensor) -> Tensor {
    let x = ids(&[&[2, 7, 9, 11, 3], &[2, 5, 4, 3, 0]]);
    let mask = ids(&[&[1, 1, 1, 1, 1], &[1, 1, 1, 1, 0]]);
    let h = model
        .forward_train(&x, None, Some(&mask), None, &Dropout::disabled())
        .unwrap();
    let w = w.to_dtype(h.dtype()).unwrap();
    (h * w).unwrap().sum_all().unwrap()
}

fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}

/// `n` values uniform in [-0.4, 0.4) from a linear congruential generator seeded `seed`.
fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.8
        })
        .collect()
}

/// Random values for every variable (T5's table included), so that no gradient vanishes by
/// symmetry, with weights large enough for attention far from uniform; the same for the same
/// names and seed.
fn randomise(vars: &VarMap, seed: u64) {
    for (name, var) in vars.data().lock().unwrap().iter() {
        let key = name
            .bytes()
            .fold(seed, |h, c| h.wrapping_mul(31).wrapping_add(u64::from(c)));
        let values = uniform(var.elem_count(), key);
        let t = Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap();
        var.set(&t.to_dtype(var.dtype()).unwrap()).unwrap();
    }
}

/// The fixed weights of [`loss`], `[2, 5, 16]`.
fn loss_weights() -> Tensor {
    Tensor::from_vec(uniform(160, 99), (2, 5, 16), &Device::Cpu).unwrap()
}

/// The f64 model of `position`, its variables randomised.
fn f64_model(position: &str) -> (RoFormerModel, VarMap) {
    let cfg = config(position, RawConfig::default());
    let vars = VarMap::new();
    let model = encoder(&cfg, &vars, DType::F64);
    randomise(&vars, 7);
    (model, vars)
}

/// The analytic gradient of [`loss`] by `name` against central differences (step 1e-5, f64),
/// at a few entries: they agree within 1e-8 + 1e-6 relative (the differences' truncation and
/// rounding errors are ~1e-10).
fn check_gradient(position: &str, name: &str) {
    let (model, vars) = f64_model(position);
    let w = loss_weights();
    let var = vars.data().lock().unwrap()[name].clone();
    let grads = loss(&model, &w).backward().unwrap();
    let analytic: Vec<f64> = grads
        .get(var.as_tensor())
        .unwrap_or_else(|| panic!("{position}: no gradient for {name}"))
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    let eps = 1e-5;
    for i in (0..base.len()).step_by(base.len().div_ceil(7)) {
        let at = |delta: f64| {
            let mut v = base.clone();
            v[i] += delta;
            var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            scalar(&loss(&model, &w))
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        var.set(&Tensor::from_vec(base.clone(), var.shape(), &Device::Cpu).unwrap())
            .unwrap();
        let err = (numeric - analytic[i]).abs();
        assert!(
            err <= 1e-8 + 1e-6 * analytic[i].abs(),
            "{position} {name}[{i}]: analytic {} numeric {numeric}",
            analytic[i]
        );
    }
    let largest = analytic.iter().fold(0f64, |m, g| m.max(g.abs()));
    assert!(largest > 1e-5, "{position} {name}: a gradient ({largest})");
}

#[test]
fn t5_table_gradient_matches_finite_differences() {
    // The table is shared by both layers: its gradient sums their uses.
    check_gradient("t5_relative", "encoder.relative_attention_bias.weight");
    check_gradient("t5_relative", "encoder.layer.1.attention.self.key.weight");
}

#[test]
fn alibi_attention_gradient_matches_finite_differences() {
    check_gradient("alibi", "encoder.layer.0.attention.self.query.weight");
    check_gradient("alibi", "encoder.layer.1.attention.self.key.weight");
}

/// The CPU f32 training path (fused dense, embedding, dropout and attention ops; the bias and
/// padding enter the fused attention as one per-head mask, whose gradient reaches T5's table)
/// gives the gradients of the f64 op-by-op reference within 1e-4 relative to the largest.
#[test]
fn f32_training_gradients_match_the_f64_reference() {
    for position in ["alibi", "t5_relative"] {
        let (model64, vars64) = f64_model(position);
        let vars32 = converted(&vars64, DType::F32);
        let model32 = encoder(&config(position, RawConfig::default()), &vars32, DType::F32);
        assert!(matches!(
            model32
                .plan(Mode::Train {
                    dropout: &Dropout::disabled(),
                    precision: Precision::F32
                })
                .kernels(),
            roformer::Kernels::Cpu(_)
        ));
        let w = loss_weights();
        let (g64, g32) = (
            loss(&model64, &w).backward().unwrap(),
            loss(&model32, &w).backward().unwrap(),
        );
        let (d64, d32) = (vars64.data().lock().unwrap(), vars32.data().lock().unwrap());
        for (name, v64) in d64.iter() {
            let a = g64.get(v64.as_tensor()).unwrap();
            let b = g32
                .get(d32[name].as_tensor())
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap();
            let scale = test_support::max_abs(a);
            let d = max_abs_diff(a, &b);
            assert!(
                d <= 1e-4 * scale.max(1.0),
                "{position} {name}: {d} of {scale}"
            );
        }
    }
}

/// Inference in f32 on the CPU runs the fused encoder with a position bias too (the bias enters
/// as a per-head mask), as with rotary positions; in f64 it runs op by op. The fused f32 pass
/// and the f64 op-by-op reference agree within 1e-5 (rotary has no f64 kernel: its reference
/// is the f32 op-by-op pass).
#[test]
fn bias_positions_run_the_fused_inference_encoder_and_match_f64() {
    let x = ids(&[&[2, 7, 9, 11, 3], &[2, 5, 4, 3, 0]]);
    let mask = ids(&[&[1, 1, 1, 1, 1], &[1, 1, 1, 1, 0]]);
    // candle's inference layer norm has no f64 kernel: the training pass without dropout is
    // the same function, op by op.
    let reference = |model: &RoFormerModel| {
        model
            .forward_train(&x, None, Some(&mask), None, &Dropout::disabled())
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
    };
    for position in ["alibi", "t5_relative", "rotary"] {
        let (model64, vars64) = f64_model(position);
        let model32 = encoder(
            &config(position, RawConfig::default()),
            &converted(&vars64, DType::F32),
            DType::F32,
        );
        let fused = model32.encoder().runs_fused(model32.plan(Mode::Inference));
        assert!(fused, "{position}");
        assert!(!model64.encoder().runs_fused(model64.plan(Mode::Inference)));
        let a = model32.forward(&x, None, Some(&mask), None).unwrap();
        let b = match position {
            "rotary" => reference(&model32),
            _ => reference(&model64),
        };
        let d = max_abs_diff(&a.to_dtype(DType::F64).unwrap(), &b);
        assert!(d < 1e-5, "{position}: {d}");
    }
}

/// Saved through the training checkpoint writer and loaded by `ModelDir`, a model of each type
/// gives the same logits; a missing or mis-shaped T5 table is named in the error.
#[test]
fn checkpoints_round_trip_and_name_a_bad_table() {
    for position in ["alibi", "t5_relative"] {
        let cfg = config(position, RawConfig::default());
        let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 1, &Device::Cpu).unwrap();
        let scratch = Scratch::new("roformer-bias", position);
        let dir = scratch.join("model");
        let files =
            roformer::train::checkpoint::model_files(&cfg, "RoFormerForMaskedLM", &t.params)
                .unwrap();
        roformer::train::checkpoint::write_dir_atomically(&dir, &files).unwrap();
        let md = ModelDir::open(&dir).unwrap();
        assert_eq!(md.config, cfg);
        let loaded = md
            .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
            .unwrap();
        assert!(loaded.unused.is_empty(), "{:?}", loaded.unused);
        let x = ids(&[&[2, 7, 9, 11, 3]]);
        let a = t.model.forward(&x, None, None, None).unwrap().logits;
        let b = loaded.model.forward(&x, None, None, None).unwrap().logits;
        assert_eq!(max_abs_diff(&a, &b), 0.0, "{position}");
    }
    let cfg = config("t5_relative", RawConfig::default());
    let t = build_trainable::<RoFormerForMaskedLM>(&cfg, None, 1, &Device::Cpu).unwrap();
    let name = "roformer.encoder.relative_attention_bias.weight";
    let write = |table: Option<Tensor>| {
        let dir = Scratch::new("roformer-bias", "bad-table");
        let mut tensors: HashMap<String, Tensor> = t.params.tensors().into_iter().collect();
        match table {
            Some(table) => tensors.insert(name.into(), table),
            None => tensors.remove(name),
        };
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
        let config = serde_json::to_string(&cfg.to_raw("RoFormerForMaskedLM")).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        let err = ModelDir::open(&dir)
            .unwrap()
            .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
            .unwrap_err();
        assert!(matches!(err, ModelError::Weights { .. }), "{err}");
        err.to_string()
    };
    let missing = write(None);
    assert!(
        missing.contains(name) && missing.contains("[32, 4]"),
        "{missing}"
    );
    let bad = Tensor::zeros((16, HEADS), DType::F32, &Device::Cpu).unwrap();
    let misshaped = write(Some(bad));
    assert!(
        misshaped.contains(name) && misshaped.contains("[16, 4]"),
        "{misshaped}"
    );
}
