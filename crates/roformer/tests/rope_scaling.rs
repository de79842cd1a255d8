//! Inference-time RoPE scaling of a rotary model: s = 1 is no scaling, position interpolation
//! at `m s` is the unscaled model at `m`, YaRN's attention factor, dynamic NTK against the
//! static NTK-aware schedule, and the fused CPU path against the op-by-op reference.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use proptest::prelude::*;
use roformer::rope_scaling::RopeScaling;
use roformer::{Dropout, Mode, ModelError, RawConfig, RoFormerConfig, RoFormerModel};
use test_support::{max_abs, max_abs_diff};

/// The training length the tests pretend the model saw.
const TRAINED: usize = 8;

/// A small rotary config (head dim 8) of `position` positions.
fn config(position: &str) -> RoFormerConfig {
    RoFormerConfig::try_from(RawConfig {
        vocab_size: 30,
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 24,
        position_embedding_type: Some(roformer::PositionEmbeddingType::parse(position).unwrap()),
        hidden_act: roformer::Activation::Gelu,
        ..RawConfig::default()
    })
    .unwrap()
}

/// A rotary encoder on `vars` (randomised on first use by candle-nn, then shared) in `dtype`.
fn model(vars: &VarMap, dtype: DType) -> RoFormerModel {
    RoFormerModel::load(
        VarBuilder::from_varmap(vars, dtype, &Device::Cpu),
        &config("rotary"),
    )
    .unwrap()
}

/// The schemes by their place in [`RopeScaling::schemes`].
const PI: usize = 0;
const NTK: usize = 1;
const DYNAMIC: usize = 2;
const YARN: usize = 3;
const ALL: [usize; 4] = [PI, NTK, DYNAMIC, YARN];

/// Scheme `kind` at `factor` for a model trained on [`TRAINED`] positions.
fn scaling(kind: usize, factor: f64) -> RopeScaling {
    RopeScaling::schemes(factor, TRAINED)[kind].clone()
}

/// Two sequences of `t` token ids.
fn ids(t: usize) -> Tensor {
    let v: Vec<u32> = (0..2 * t).map(|i| (i * 7 % 27 + 2) as u32).collect();
    Tensor::from_vec(v, (2, t), &Device::Cpu).unwrap()
}

/// The hidden states of `m` on [`ids`] of `t` tokens at `positions` (default `0..t`), as f64.
fn hidden(m: &RoFormerModel, t: usize, positions: Option<&[u32]>) -> Tensor {
    let p = positions.map(|p| Tensor::from_vec(p.to_vec(), (1, t), &Device::Cpu).unwrap());
    let p = p.map(|p| p.broadcast_as((2, t)).unwrap().contiguous().unwrap());
    m.forward(&ids(t), None, None, p.as_ref())
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
}

fn scaled(vars: &VarMap, dtype: DType, s: Option<RopeScaling>) -> RoFormerModel {
    let mut m = model(vars, dtype);
    m.encoder_mut().set_rope_scaling(s).unwrap();
    m
}

/// With `s = 1`, PI, NTK-aware and YaRN are the model's own table, bit for bit, at any length;
/// dynamic NTK with `s = 1` is unscaled up to the training length. The formula path itself
/// (`rotary::scaling` at `s = 1`) gives the paper's frequencies within 1e-15 relative.
#[test]
fn a_factor_of_one_is_no_scaling() {
    let vars = VarMap::new();
    let plain = model(&vars, DType::F32);
    for kind in ALL {
        let m = scaled(&vars, DType::F32, Some(scaling(kind, 1.0)));
        let t = if kind == DYNAMIC {
            TRAINED
        } else {
            3 * TRAINED
        };
        assert_eq!(
            max_abs_diff(&hidden(&m, t, None), &hidden(&plain, t, None)),
            0.0,
            "{}",
            scaling(kind, 1.0).name()
        );
        let paper = plain.encoder().rope().unwrap().inv_freq().to_vec();
        let formula = scaling(kind, 1.0)
            .spec(8, rotary::DEFAULT_BASE)
            .freqs(Some(TRAINED))
            .unwrap();
        for (a, b) in formula.inv_freq.iter().zip(&paper) {
            assert!(
                (a - b).abs() <= 1e-15 * b,
                "{}: {a} against {b}",
                scaling(kind, 1.0).name()
            );
        }
        assert_eq!(formula.attention_factor, 1.0);
    }
}

/// Position interpolation by `s` at positions `m s` is the unscaled model at `m`: the angles
/// `(m s)(theta / s)` and `m theta` agree to the last bit or two, the outputs within 1e-5.
#[test]
fn interpolation_at_m_s_is_the_unscaled_model_at_m() {
    let vars = VarMap::new();
    let plain = model(&vars, DType::F32);
    let t = 6;
    let at_m: Vec<u32> = (0..t as u32).collect();
    for s in [2u32, 3, 16] {
        let pi = scaled(&vars, DType::F32, Some(scaling(PI, f64::from(s))));
        let at_ms: Vec<u32> = at_m.iter().map(|m| m * s).collect();
        let d = max_abs_diff(
            &hidden(&pi, t, Some(&at_ms)),
            &hidden(&plain, t, Some(&at_m)),
        );
        assert!(d <= 1e-5, "s = {s}: {d}");
    }
}

/// Dynamic NTK: unscaled up to the training length; past it, at `n` positions, the static
/// NTK-aware schedule at `s' = s n / L - (s - 1)` (frequencies within 1e-12 relative, model
/// outputs within 1e-5).
#[test]
fn dynamic_ntk_is_ntk_aware_at_the_pass_length() {
    let vars = VarMap::new();
    let plain = model(&vars, DType::F32);
    for s in [1.0, 2.0, 4.0] {
        let dynamic = scaled(&vars, DType::F32, Some(scaling(DYNAMIC, s)));
        assert_eq!(
            max_abs_diff(
                &hidden(&dynamic, TRAINED, None),
                &hidden(&plain, TRAINED, None)
            ),
            0.0
        );
        for n in [TRAINED + 1, 2 * TRAINED, 5 * TRAINED] {
            let effective = s * n as f64 / TRAINED as f64 - (s - 1.0);
            let ntk = scaled(&vars, DType::F32, Some(scaling(NTK, effective)));
            let table = dynamic.encoder().rotary().unwrap();
            let want = ntk.encoder().rope().unwrap().inv_freq();
            for (a, b) in table.at_length(n).unwrap().inv_freq().iter().zip(want) {
                assert!((a - b).abs() <= 1e-12 * b, "s {s}, n {n}: {a} against {b}");
            }
            let d = max_abs_diff(&hidden(&dynamic, n, None), &hidden(&ntk, n, None));
            assert!(d <= 1e-5, "s {s}, n {n}: {d}");
        }
    }
}

/// Scaling changes the output past the training length (the tests above do not pass by
/// ignoring it).
#[test]
fn each_scaling_changes_long_inputs() {
    let vars = VarMap::new();
    let plain = hidden(&model(&vars, DType::F32), 4 * TRAINED, None);
    for kind in ALL {
        let m = scaled(&vars, DType::F32, Some(scaling(kind, 4.0)));
        let d = max_abs_diff(&hidden(&m, 4 * TRAINED, None), &plain);
        assert!(d > 1e-3, "{}: {d}", scaling(kind, 1.0).name());
    }
}

/// Under every scaling the fused CPU f32 inference encoder gives the hidden states of the
/// op-by-op path (the training path without dropout: layer by layer, each op carrying
/// gradients) within 1e-5 of their largest, at 4 times the training length.
#[test]
fn the_fused_path_matches_the_op_by_op_path_under_every_scaling() {
    let vars = VarMap::new();
    let t = 4 * TRAINED;
    for kind in ALL {
        let m = scaled(&vars, DType::F32, Some(scaling(kind, 4.0)));
        assert!(m.encoder().runs_fused(m.plan(Mode::Inference)));
        let ops = m
            .forward_train(&ids(t), None, None, None, &Dropout::disabled())
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap();
        let d = max_abs_diff(&hidden(&m, t, None), &ops);
        assert!(
            d <= 1e-5 * max_abs(&ops),
            "{}: {d}",
            scaling(kind, 1.0).name()
        );
    }
}

/// A factor below 1 or not finite, a training length of 0, or a model without rotary
/// positions are refused with the field named.
#[test]
fn bad_scalings_are_refused() {
    let vars = VarMap::new();
    let mut m = model(&vars, DType::F32);
    for factor in [0.5, f64::NAN, f64::INFINITY] {
        let e = m
            .encoder_mut()
            .set_rope_scaling(Some(scaling(YARN, factor)))
            .unwrap_err();
        assert!(
            matches!(e, ModelError::InvalidConfig { field, .. } if field == "rope_scaling.factor"),
            "{e}"
        );
    }
    let zero = RopeScaling::schemes(2.0, 0)[DYNAMIC].clone();
    assert!(m.encoder_mut().set_rope_scaling(Some(zero)).is_err());
    let mut alibi = RoFormerModel::load(
        VarBuilder::from_varmap(&VarMap::new(), DType::F32, &Device::Cpu),
        &config("alibi"),
    )
    .unwrap();
    let e = alibi
        .encoder_mut()
        .set_rope_scaling(Some(scaling(PI, 2.0)))
        .unwrap_err();
    assert!(e.to_string().contains("position_embedding_type"), "{e}");
}

proptest! {
    /// YaRN's attention factor is `0.1 ln s + 1` (within 1e-12) for any `s >= 1`, as the
    /// amplitude of every cos and sin.
    #[test]
    fn yarn_attention_factor_is_the_formula(s in 1.0f64..64.0) {
        let vars = VarMap::new();
        let m = scaled(&vars, DType::F32, Some(scaling(YARN, s)));
        let amplitude = m.encoder().rope().unwrap().amplitude();
        prop_assert!((amplitude - (0.1 * s.ln() + 1.0)).abs() <= 1e-12, "{amplitude}");
    }

    /// Position interpolation's frequencies are the paper's divided by `s`, NTK-aware's those
    /// of the base `10000 s^(d / (d - 2))` (within 1e-12 relative), for any `s >= 1`.
    #[test]
    fn static_schedules_are_their_formulas(s in 1.0f64..64.0) {
        let vars = VarMap::new();
        let paper = model(&vars, DType::F32).encoder().rope().unwrap().inv_freq().to_vec();
        let pi = scaled(&vars, DType::F32, Some(scaling(PI, s)));
        let ntk = scaled(&vars, DType::F32, Some(scaling(NTK, s)));
        let base = rotary::DEFAULT_BASE * s.powf(8.0 / 6.0);
        let pi = pi.encoder().rope().unwrap().inv_freq();
        let ntk = ntk.encoder().rope().unwrap().inv_freq();
        for i in 0..4 {
            let want_pi = paper[i] / s;
            let want_ntk = base.powf(-(2.0 * i as f64) / 8.0);
            prop_assert!((pi[i] - want_pi).abs() <= 1e-12 * want_pi);
            prop_assert!((ntk[i] - want_ntk).abs() <= 1e-12 * want_ntk);
        }
    }
}
