//! Learning-rate schedules: values at the warm-up boundaries and at the end, validation.

use crate::optim::{Decay, LrSchedule, OptimError};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-15 * b.abs().max(1e-3)
}

#[test]
fn linear_warmup_then_linear_decay() -> crate::optim::Result<()> {
    // Hugging Face: lambda(s) = s/10 for s < 10, then max(0, (100 − s)/90).
    let s = LrSchedule::new(1e-3, 10, 100, Decay::Linear)?;
    assert_eq!(s.lr_at(0), 0.0);
    assert!(close(s.lr_at(1), 1e-4));
    assert!(close(s.lr_at(9), 9e-4));
    assert_eq!(s.lr_at(10), 1e-3);
    assert!(close(s.lr_at(11), 1e-3 * 89.0 / 90.0));
    assert!(close(s.lr_at(55), 0.5e-3));
    assert!(close(s.lr_at(99), 1e-3 / 90.0));
    assert_eq!(s.lr_at(100), 0.0);
    assert_eq!(s.lr_at(1000), 0.0);
    Ok(())
}

#[test]
fn linear_warmup_then_half_cosine() -> crate::optim::Result<()> {
    let s = LrSchedule::new(2.0, 4, 12, Decay::Cosine)?;
    assert_eq!(s.lr_at(0), 0.0);
    assert_eq!(s.lr_at(2), 1.0);
    assert_eq!(s.lr_at(4), 2.0);
    // progress = (s − 4)/8: 1/4, 1/2, 7/8.
    let want = |p: f64| 2.0 * 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
    assert!(close(s.lr_at(6), want(0.25)));
    assert!(close(s.lr_at(8), 1.0));
    assert!(close(s.lr_at(11), want(0.875)));
    assert_eq!(s.lr_at(12), 0.0);
    assert_eq!(s.lr_at(20), 0.0); // never rises again
    Ok(())
}

#[test]
fn constant_after_warmup_and_no_warmup() -> crate::optim::Result<()> {
    let s = LrSchedule::new(0.5, 2, 5, Decay::Constant)?;
    assert_eq!(
        [0, 1, 2, 4, 5, 9].map(|k| s.lr_at(k)),
        [0.0, 0.25, 0.5, 0.5, 0.5, 0.5]
    );
    // Without warm-up the first update already uses the peak.
    let s = LrSchedule::new(1.0, 0, 4, Decay::Linear)?;
    assert_eq!([0, 1, 3, 4].map(|k| s.lr_at(k)), [1.0, 0.75, 0.25, 0.0]);
    // Warm-up over the whole run: linear warm-up, then nothing left.
    let s = LrSchedule::new(1.0, 4, 4, Decay::Cosine)?;
    assert_eq!([0, 2, 3, 4].map(|k| s.lr_at(k)), [0.0, 0.5, 0.75, 0.0]);
    Ok(())
}

#[test]
fn schedule_validation() {
    let bad = [
        (1e-3, 10, 5),     // warm-up longer than the run
        (1e-3, 0, 0),      // no steps
        (-1e-3, 0, 10),    // negative peak
        (f64::NAN, 0, 10), // NaN peak
    ];
    for (peak, warmup, total) in bad {
        assert!(matches!(
            LrSchedule::new(peak, warmup, total, Decay::Linear),
            Err(OptimError::InvalidSchedule(_))
        ));
    }
    // An unvalidated schedule still evaluates without dividing by zero.
    let s = LrSchedule {
        peak_lr: 1.0,
        warmup_steps: 0,
        total_steps: 0,
        decay: Decay::Cosine,
    };
    assert_eq!(s.lr_at(0), 0.0);
}
