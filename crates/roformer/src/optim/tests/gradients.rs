//! Gradients: collection from a `GradStore`, accumulation, scaling, norm, clipping, NaN checks.

use candle_core::{Device, Tensor, Var};

use super::{flat, tensor, var};
use crate::optim::{Gradients, OptimError};

/// Mean squared error of the linear model `x·Wᵀ + b` against `target`.
fn mse(w: &Var, b: &Var, x: &Tensor, target: &Tensor) -> candle_core::Result<Tensor> {
    let y = x.matmul(&w.t()?)?.broadcast_add(b)?;
    (y - target)?.sqr()?.mean_all()
}

/// `(name, var)` pairs for the linear model plus a parameter the loss never touches.
fn linear_params() -> Vec<(String, Var)> {
    vec![
        ("dense.weight".to_string(), var(1, &[3, 4])),
        ("dense.bias".to_string(), var(2, &[3])),
        ("pooler.dense.weight".to_string(), var(3, &[2, 2])),
    ]
}

#[test]
fn accumulated_micro_batches_equal_the_full_batch_gradient() -> crate::optim::Result<()> {
    let params = linear_params();
    let (w, b) = (&params[0].1, &params[1].1);
    let x = tensor(10, &[8, 4], 1.0);
    let target = tensor(11, &[8, 3], 1.0);

    let full = Gradients::from_store(&mse(w, b, &x, &target)?.backward()?, &params)?;

    let mut acc = Gradients::new();
    for half in 0..2 {
        let (xs, ts) = (x.narrow(0, 4 * half, 4)?, target.narrow(0, 4 * half, 4)?);
        let store = mse(w, b, &xs, &ts)?.backward()?;
        acc.accumulate(&Gradients::from_store(&store, &params)?)?;
    }
    acc.scale(0.5);

    // The unused parameter has no entry (not a zero entry), in both.
    assert!(!full.contains("pooler.dense.weight") && !acc.contains("pooler.dense.weight"));
    assert_eq!(
        acc.names().collect::<Vec<_>>(),
        ["dense.weight", "dense.bias"]
    );
    for name in ["dense.weight", "dense.bias"] {
        let ((s1, a), (s2, f)) = (acc.get(name).expect("acc"), full.get(name).expect("full"));
        assert_eq!(s1, s2);
        for (a, f) in a.iter().zip(f) {
            assert!(
                (a - f).abs() <= 1e-6 * (1.0 + f.abs()),
                "{name}: {a} vs {f}"
            );
        }
    }
    // And the full-batch gradient is the analytic one: dL/db = 2/(N·K) Σ_n (y − t).
    let y = x.matmul(&w.t()?)?.broadcast_add(b)?;
    let db = flat(&((y - &target)?.sum(0)? * (2.0 / 24.0))?);
    for (g, e) in full.get("dense.bias").expect("bias").1.iter().zip(db) {
        assert!((g - e).abs() <= 1e-6, "{g} vs {e}");
    }
    Ok(())
}

#[test]
fn accumulate_rejects_a_shape_mismatch_and_changes_nothing() -> crate::optim::Result<()> {
    let a = tensor(1, &[2, 3], 1.0);
    let mut g = Gradients::from_tensors([("w", &a)])?;
    let other = Gradients::from_tensors([("v", &a), ("w", &tensor(2, &[3, 2], 1.0))])?;
    let err = g.accumulate(&other).expect_err("shape mismatch");
    assert!(
        matches!(err, OptimError::ShapeMismatch { ref name, .. } if name == "w"),
        "{err}"
    );
    assert_eq!(g.len(), 1);
    assert_eq!(g.get("w").expect("w").1, &flat(&a)[..]);
    Ok(())
}

#[test]
fn global_norm_scale_and_clipping() -> crate::optim::Result<()> {
    // Large enough for the parallel chunked path.
    let a = tensor(5, &[300, 200], 1.0);
    let b = tensor(6, &[7], 3.0);
    let mut g = Gradients::from_tensors([("a", &a), ("b", &b)])?;
    let expect: f64 = flat(&a)
        .iter()
        .chain(&flat(&b))
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    let norm = g.global_norm();
    assert!(
        (norm - expect).abs() <= 1e-12 * expect,
        "{norm} vs {expect}"
    );

    // Below the maximum: a no-op, bit for bit.
    let before = g.clone();
    assert_eq!(g.clip_global_norm(norm * 1.5)?, norm);
    assert_eq!(g.get("a").expect("a").1, before.get("a").expect("a").1);

    // Above: scaled by max/(norm + 1e-6), so the new norm is max·norm/(norm + 1e-6) ≈ max.
    let max = norm / 4.0;
    assert_eq!(g.clip_global_norm(max)?, norm);
    let after = g.global_norm();
    let want = max * norm / (norm + 1e-6);
    assert!((after - want).abs() <= 1e-6 * want, "{after} vs {want}");
    let coef = (max / (norm + 1e-6)) as f32;
    assert_eq!(g.get("b").expect("b").1[3], flat(&b)[3] * coef);

    // Scaling by 2 doubles the norm exactly (a power of two).
    let n = g.global_norm();
    g.scale(2.0);
    assert_eq!(g.global_norm(), 2.0 * n);

    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            g.clip_global_norm(bad),
            Err(OptimError::InvalidSetting {
                field: "max_norm",
                ..
            })
        ));
    }
    Ok(())
}

#[test]
fn non_finite_gradients_are_found_by_name() -> crate::optim::Result<()> {
    let ok = tensor(1, &[4], 1.0);
    let mut big = vec![0.5f32; 100_000];
    big[77_777] = f32::NAN;
    let nan = Tensor::from_vec(big, (100_000,), &Device::Cpu)?;
    let inf = Tensor::new(&[1.0f32, f32::NEG_INFINITY], &Device::Cpu)?;

    let clean = Gradients::from_tensors([("ok", &ok)])?;
    assert!(clean.is_finite() && clean.first_non_finite().is_none());
    clean.check_finite()?;

    let g = Gradients::from_tensors([("ok", &ok), ("embeddings", &nan), ("bias", &inf)])?;
    assert!(!g.is_finite());
    assert_eq!(g.first_non_finite(), Some("embeddings"));
    assert!(matches!(g.check_finite(), Err(OptimError::NonFinite(n)) if n == "embeddings"));
    assert!(g.global_norm().is_nan());

    // Clipping leaves non-finite gradients alone (no spreading NaN over the finite ones).
    let mut h = Gradients::from_tensors([("ok", &ok), ("bias", &inf)])?;
    assert!(h.clip_global_norm(1.0)?.is_infinite());
    assert_eq!(h.get("ok").expect("ok").1, &flat(&ok)[..]);
    Ok(())
}

#[test]
fn gradients_of_other_dtypes_become_f32_and_round_trip_to_tensors() -> crate::optim::Result<()> {
    let t = Tensor::new(&[[1.5f64, -2.0], [0.25, 4.0]], &Device::Cpu)?;
    let g = Gradients::from_tensors([("w", &t)])?;
    let back = g.to_tensor("w", &Device::Cpu)?.expect("w");
    assert_eq!(back.dims(), [2, 2]);
    assert_eq!(flat(&back), [1.5, -2.0, 0.25, 4.0]);
    assert!(g.to_tensor("nope", &Device::Cpu)?.is_none());
    Ok(())
}
