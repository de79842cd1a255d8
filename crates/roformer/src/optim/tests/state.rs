//! Saving and restoring the AdamW state: bit-identical resumption, typed errors.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use test_support::Scratch;

use super::{flat, tensor, var};
use crate::optim::{AdamW, AdamWConfig, Gradients, OptimError};

const NAMES: [&str; 3] = [
    "roformer.encoder.layer.0.intermediate.dense.weight",
    "roformer.encoder.layer.0.output.LayerNorm.weight",
    "cls.predictions.bias",
];
const DIMS: [&[usize]; 3] = [&[64, 600], &[64], &[600]];

fn fresh() -> Vec<(String, Var)> {
    NAMES
        .iter()
        .zip(DIMS)
        .enumerate()
        .map(|(i, (n, d))| (n.to_string(), var(i as u64 + 1, d)))
        .collect()
}

/// The gradients of step `k`; `cls.predictions.bias` gets none at step 1 (its own step count
/// then lags the global one, which the state must carry too).
fn grads(k: u64) -> Gradients {
    let gs: Vec<Tensor> = DIMS
        .iter()
        .enumerate()
        .map(|(i, d)| tensor(50 + 7 * k + i as u64, d, 0.1))
        .collect();
    let n = if k == 1 { 2 } else { 3 };
    Gradients::from_tensors(NAMES.iter().copied().zip(&gs).take(n)).expect("grads")
}

fn run(opt: &mut AdamW, steps: std::ops::Range<u64>) {
    for k in steps {
        opt.step(&grads(k), 1e-2 * (1.0 + k as f64)).expect("step");
    }
}

/// Copies of the parameter values into new variables (a restarted process reloading them).
fn copy_params(params: &[(String, Var)]) -> Vec<(String, Var)> {
    params
        .iter()
        .map(|(n, v)| {
            let t = Tensor::from_vec(flat(v), v.shape(), &Device::Cpu).expect("copy");
            (n.clone(), Var::from_tensor(&t).expect("var"))
        })
        .collect()
}

#[test]
fn resuming_from_saved_state_continues_bit_for_bit() -> crate::optim::Result<()> {
    let config = AdamWConfig::with_lr(1e-2);
    let straight = fresh();
    run(&mut AdamW::new(straight.clone(), config)?, 0..6);

    let first = fresh();
    let mut opt = AdamW::new(first.clone(), config)?;
    run(&mut opt, 0..3);
    assert_eq!(opt.param_steps("cls.predictions.bias"), Some(2));
    // Through a safetensors file, as a training run would.
    let dir = Scratch::new("roformer-optim", "state");
    let path = dir.join("optimizer.safetensors");
    let state: HashMap<String, Tensor> = opt.state_tensors()?.into_iter().collect();
    assert!(state.contains_key("exp_avg.cls.predictions.bias") && state.contains_key("step"));
    candle_core::safetensors::save(&state, &path)?;
    let loaded = candle_core::safetensors::load(&path, &Device::Cpu)?;

    let resumed = copy_params(&first);
    let mut opt2 = AdamW::new(resumed.clone(), config)?;
    opt2.load_state(&loaded)?;
    assert_eq!(
        (opt2.steps(), opt2.param_steps("cls.predictions.bias")),
        (3, Some(2))
    );
    run(&mut opt2, 3..6);

    for ((name, a), (_, b)) in straight.iter().zip(&resumed) {
        let (a, b) = (flat(a), flat(b));
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} differs"
        );
    }
    Ok(())
}

#[test]
fn load_state_reports_missing_unknown_misshaped_and_invalid_tensors() -> crate::optim::Result<()> {
    let mut opt = AdamW::new(fresh(), AdamWConfig::default())?;
    run(&mut opt, 0..1);
    let good: HashMap<String, Tensor> = opt.state_tensors()?.into_iter().collect();
    let mut target = AdamW::new(fresh(), AdamWConfig::default())?;

    let edit = |f: &dyn Fn(&mut HashMap<String, Tensor>)| {
        let mut s = good.clone();
        f(&mut s);
        s
    };
    let bias = "cls.predictions.bias";
    let missing = edit(&|s| {
        s.remove(&format!("exp_avg_sq.{bias}"));
    });
    let no_step = edit(&|s| {
        s.remove("step");
    });
    let unknown = edit(&|s| {
        s.insert(
            "exp_avg.nope".into(),
            Tensor::zeros(1, DType::F32, &Device::Cpu).expect("t"),
        );
    });
    let shape = edit(&|s| {
        s.insert(
            format!("exp_avg.{bias}"),
            Tensor::zeros((2, 300), DType::F32, &Device::Cpu).expect("t"),
        );
    });
    let zero_step = edit(&|s| {
        s.insert(
            format!("step.{bias}"),
            Tensor::new(&[0i64], &Device::Cpu).expect("t"),
        );
    });
    let ahead = edit(&|s| {
        s.insert(
            format!("step.{bias}"),
            Tensor::new(&[5i64], &Device::Cpu).expect("t"),
        );
    });

    let e = target.load_state(&missing).expect_err("missing");
    assert!(
        matches!(&e, OptimError::MissingState(n) if *n == format!("exp_avg_sq.{bias}")),
        "{e}"
    );
    assert!(matches!(target.load_state(&no_step), Err(OptimError::MissingState(n)) if n == "step"));
    assert!(
        matches!(target.load_state(&unknown), Err(OptimError::UnknownState(n)) if n == "exp_avg.nope")
    );
    let e = target.load_state(&shape).expect_err("shape");
    assert!(
        matches!(&e, OptimError::StateShape { expected, found, .. } if expected == &[600] && found == &[2, 300]),
        "{e}"
    );
    assert!(matches!(
        target.load_state(&zero_step),
        Err(OptimError::InvalidState { .. })
    ));
    assert!(matches!(
        target.load_state(&ahead),
        Err(OptimError::InvalidState { .. })
    ));
    // Nothing was restored by the failed loads.
    assert_eq!((target.steps(), target.param_steps(bias)), (0, Some(0)));

    // A parameter with no state at all is fine (never updated), and so is an empty optimiser.
    let partial = edit(&|s| {
        for prefix in ["exp_avg.", "exp_avg_sq.", "step."] {
            s.remove(&format!("{prefix}{bias}"));
        }
    });
    target.load_state(&partial)?;
    assert_eq!((target.steps(), target.param_steps(bias)), (1, Some(0)));
    assert_eq!(target.param_steps(NAMES[0]), Some(1));
    Ok(())
}
