//! AdamW against an `f64` scalar reference, bias correction, the decay rule, validation.

use candle_core::{DType, Device, Tensor, Var};

use super::{flat, tensor, var};
use crate::optim::{decays, AdamW, AdamWConfig, Gradients, OptimError};

/// torch.optim.AdamW on one parameter, written out in `f64` scalars.
struct Reference {
    p: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
    weight_decay: f64,
}

impl Reference {
    fn new(p: &[f32], weight_decay: f64) -> Self {
        Self {
            p: p.iter().map(|&x| f64::from(x)).collect(),
            m: vec![0.0; p.len()],
            v: vec![0.0; p.len()],
            t: 0,
            weight_decay,
        }
    }

    fn step(&mut self, c: &AdamWConfig, g: &[f32], lr: f64) {
        self.t += 1;
        let (bc1, bc2) = (1.0 - c.beta1.powi(self.t), 1.0 - c.beta2.powi(self.t));
        for i in 0..self.p.len() {
            let g = f64::from(g[i]);
            self.p[i] *= 1.0 - lr * self.weight_decay;
            self.m[i] = c.beta1 * self.m[i] + (1.0 - c.beta1) * g;
            self.v[i] = c.beta2 * self.v[i] + (1.0 - c.beta2) * g * g;
            self.p[i] -= lr / bc1 * self.m[i] / (self.v[i].sqrt() / bc2.sqrt() + c.eps);
        }
    }
}

/// Tolerance of the `f32` optimiser against the `f64` reference: `1e-6 · max(1, |p|)`, i.e.
/// 1e-6 absolute for parameters of magnitude up to 1 and 1e-6 relative beyond (a handful of
/// `f32` roundings per step over a few steps).
fn close(got: f32, want: f64) -> bool {
    (f64::from(got) - want).abs() <= 1e-6 * want.abs().max(1.0)
}

#[test]
fn matches_the_f64_reference_over_several_steps_with_and_without_decay() -> crate::optim::Result<()>
{
    let names = [
        "roformer.encoder.layer.0.attention.self.query.weight", // decays; parallel path
        "roformer.encoder.layer.0.attention.self.query.bias",   // no decay
        "roformer.embeddings.LayerNorm.weight",                 // no decay
        "cls.predictions.decoder.weight",                       // decays
    ];
    let dims: [&[usize]; 4] = [&[200, 200], &[200], &[16], &[4, 8]];
    let params: Vec<(String, Var)> = names
        .iter()
        .zip(dims)
        .enumerate()
        .map(|(i, (n, d))| (n.to_string(), var(i as u64, d)))
        .collect();
    let config = AdamWConfig {
        weight_decay: 0.1,
        ..AdamWConfig::default()
    };
    let mut refs: Vec<Reference> = params
        .iter()
        .map(|(n, v)| Reference::new(&flat(v), if decays(n) { 0.1 } else { 0.0 }))
        .collect();
    let mut opt = AdamW::new(params.clone(), config)?;
    let lrs = [1e-2, 5e-3, 2e-2, 1e-3, 3e-2, 1e-2];
    // Gradient magnitudes from 1e-3 to 1e2, changing signs from step to step.
    let scales = [1.0, 1e-3, 1e2, 0.3];
    for (step, lr) in lrs.iter().enumerate() {
        let gs: Vec<Tensor> = dims
            .iter()
            .zip(scales)
            .enumerate()
            .map(|(i, (d, s))| tensor(100 + 10 * step as u64 + i as u64, d, s))
            .collect();
        let grads = Gradients::from_tensors(names.iter().copied().zip(&gs))?;
        opt.step(&grads, *lr)?;
        for (((name, v), r), g) in params.iter().zip(&mut refs).zip(&gs) {
            r.step(&config, &flat(g), *lr);
            for (got, want) in flat(v).iter().zip(&r.p) {
                assert!(close(*got, *want), "{name} step {step}: {got} vs {want}");
            }
        }
    }
    assert_eq!(opt.steps(), 6);
    Ok(())
}

#[test]
fn first_step_is_bias_corrected_to_minus_lr_times_sign() -> crate::optim::Result<()> {
    // t = 1: m̂ = g, v̂ = g², so p ← p − lr·g/(|g| + ε) ≈ p − lr·sign(g), whatever |g|.
    let g = [1e-4f32, -3.0, 250.0, -0.02];
    let w = Var::from_vec(vec![0.5f32; 4], 4, &Device::Cpu)?;
    let config = AdamWConfig {
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(vec![("dense.weight".into(), w.clone())], config)?;
    let gt = Tensor::new(&g, &Device::Cpu)?;
    opt.step(&Gradients::from_tensors([("dense.weight", &gt)])?, 0.1)?;
    for (got, g) in flat(&w).iter().zip(g) {
        let want = 0.5 - 0.1 * f64::from(g) / (f64::from(g.abs()) + 1e-8);
        assert!(close(*got, want), "{got} vs {want}");
        assert!((f64::from(*got) - (0.5 - 0.1 * f64::from(g.signum()))).abs() < 1e-5);
    }
    Ok(())
}

#[test]
fn weight_decay_alone_shrinks_decayed_parameters_only() -> crate::optim::Result<()> {
    // Zero gradient: m = v = 0, so only p ← p·(1 − lr·λ) acts.
    let w = Var::from_vec(vec![2.0f32, -4.0], 2, &Device::Cpu)?;
    let b = Var::from_vec(vec![2.0f32, -4.0], 2, &Device::Cpu)?;
    let params = vec![("a.weight".into(), w.clone()), ("a.bias".into(), b.clone())];
    let mut opt = AdamW::new(params, AdamWConfig::with_lr(0.5))?;
    let zero = Tensor::zeros(2, DType::F32, &Device::Cpu)?;
    opt.step_with_config_lr(&Gradients::from_tensors([
        ("a.weight", &zero),
        ("a.bias", &zero),
    ])?)?;
    let f = (1.0 - 0.5 * 0.01) as f32;
    assert_eq!(flat(&w), [2.0 * f, -4.0 * f]);
    assert_eq!(flat(&b), [2.0, -4.0]);
    Ok(())
}

#[test]
fn decay_rule_on_roformer_names() {
    let decayed = [
        "roformer.embeddings.word_embeddings.weight",
        "roformer.embeddings.token_type_embeddings.weight",
        "roformer.embeddings_project.weight",
        "roformer.encoder.layer.0.attention.self.query.weight",
        "roformer.encoder.layer.11.attention.output.dense.weight",
        "roformer.encoder.layer.3.intermediate.dense.weight",
        "roformer.encoder.layer.3.output.dense.weight",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.decoder.weight",
        "classifier.out_proj.weight",
    ];
    let not_decayed = [
        "roformer.embeddings.LayerNorm.weight",
        "roformer.embeddings.LayerNorm.bias",
        "roformer.encoder.layer.0.attention.self.query.bias",
        "roformer.encoder.layer.0.attention.output.LayerNorm.weight",
        "roformer.encoder.layer.5.output.LayerNorm.weight",
        "roformer.encoder.layer.5.output.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.bias",
        "cls.predictions.decoder.bias",
        "encoder.layer_norm.weight",
        "final_norm.weight",
        "bias",
    ];
    for n in decayed {
        assert!(decays(n), "{n} should decay");
    }
    for n in not_decayed {
        assert!(!decays(n), "{n} should not decay");
    }
}

#[test]
fn config_validation() {
    AdamWConfig::default()
        .validate()
        .expect("defaults are valid");
    let cases = [
        (
            "lr",
            AdamWConfig {
                lr: -1e-3,
                ..Default::default()
            },
        ),
        (
            "lr",
            AdamWConfig {
                lr: f64::NAN,
                ..Default::default()
            },
        ),
        (
            "beta1",
            AdamWConfig {
                beta1: 1.0,
                ..Default::default()
            },
        ),
        (
            "beta1",
            AdamWConfig {
                beta1: -0.1,
                ..Default::default()
            },
        ),
        (
            "beta2",
            AdamWConfig {
                beta2: 1.5,
                ..Default::default()
            },
        ),
        (
            "eps",
            AdamWConfig {
                eps: -1e-8,
                ..Default::default()
            },
        ),
        (
            "weight_decay",
            AdamWConfig {
                weight_decay: f64::INFINITY,
                ..Default::default()
            },
        ),
    ];
    for (field, c) in cases {
        match AdamW::new(vec![], c) {
            Err(OptimError::InvalidSetting { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn bad_steps_and_parameters_are_refused_before_anything_changes() -> crate::optim::Result<()> {
    let w = var(1, &[2, 3]);
    let before = flat(&w);
    let mut opt = AdamW::new(vec![("w".into(), w.clone())], AdamWConfig::default())?;
    let right = tensor(2, &[2, 3], 1.0);
    let wrong = tensor(2, &[3, 2], 1.0);
    let cases = [
        (
            Gradients::from_tensors([("w", &right), ("x", &right)])?,
            1e-3,
        ),
        (Gradients::from_tensors([("w", &wrong)])?, 1e-3),
        (Gradients::from_tensors([("w", &right)])?, -1.0),
    ];
    assert!(
        matches!(opt.step(&cases[0].0, cases[0].1), Err(OptimError::UnknownGradient(n)) if n == "x")
    );
    assert!(matches!(
        opt.step(&cases[1].0, cases[1].1),
        Err(OptimError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        opt.step(&cases[2].0, cases[2].1),
        Err(OptimError::InvalidSetting { field: "lr", .. })
    ));
    assert_eq!(flat(&w), before);
    assert_eq!((opt.steps(), opt.param_steps("w")), (0, Some(0)));

    let dup = AdamW::new(
        vec![("w".into(), w.clone()), ("w".into(), var(3, &[1]))],
        AdamWConfig::default(),
    );
    assert!(matches!(dup, Err(OptimError::DuplicateParameter(n)) if n == "w"));
    let tied = AdamW::new(
        vec![("a".into(), w.clone()), ("b".into(), w)],
        AdamWConfig::default(),
    );
    assert!(matches!(tied, Err(OptimError::DuplicateParameter(n)) if n == "b"));
    Ok(())
}

#[test]
fn parameters_without_gradient_are_skipped_and_other_dtypes_fall_back() -> crate::optim::Result<()>
{
    let w = var(1, &[4]);
    let frozen = var(2, &[3]);
    let w64 = Var::from_vec(vec![1.0f64, -1.0], 2, &Device::Cpu)?;
    let frozen_before = flat(&frozen);
    let params = vec![
        ("w".to_string(), w.clone()),
        ("pooler.dense.weight".to_string(), frozen.clone()),
        ("w64".to_string(), w64.clone()),
    ];
    let mut opt = AdamW::new(params, AdamWConfig::default())?;
    let g = tensor(5, &[4], 1.0);
    let g64 = Tensor::new(&[0.5f64, -0.5], &Device::Cpu)?;
    for _ in 0..2 {
        opt.step(&Gradients::from_tensors([("w", &g), ("w64", &g64)])?, 0.1)?;
    }
    assert_eq!(flat(&frozen), frozen_before);
    assert_eq!(opt.param_steps("pooler.dense.weight"), Some(0));
    assert_eq!((opt.param_steps("w"), opt.steps()), (Some(2), 2));
    // The f64 variable stays f64; with a constant gradient m̂/sqrt(v̂) = sign(g), so each step
    // is p ← p·(1 − lr·λ) − lr·sign(g).
    assert_eq!(w64.dtype(), DType::F64);
    let want = (1.0 * 0.999 - 0.1) * 0.999 - 0.1;
    let v = w64.to_vec1::<f64>()?;
    assert!(
        (v[0] - want).abs() < 1e-6 && (v[1] + want).abs() < 1e-6,
        "{v:?}"
    );
    Ok(())
}
