//! Rough timings of a training step of the Fashion-MNIST config (ignored; run with
//! `cargo test -p roformer --lib vision::tests::timing -- --ignored --nocapture`): the blocks'
//! halves chained into one op against each half its own op (`chain::links_apart`), and the
//! classifier's features as one op against candle's ops. Both run alternately in one process,
//! so that the load of a shared machine falls on both alike; each line gives the median and
//! the fastest of the rounds, in wall time, CPU time of the process (all threads) and CPU time
//! of the calling thread, which runs candle's graph and its serial ops while the pool's workers
//! wait (the time the step leaves one of two CPUs idle, at most).

use std::time::Instant;

use candle_core::{DType, Tensor, Var};

use super::{classifier, random, tiny};
use crate::autograd::chain::links_apart;
use crate::autograd::class_features::{class_features, class_features_slow};
use crate::mode::{Dropout, Mode};
use crate::vision::config::PositionKind;
use crate::Precision;

/// CPU seconds of the process and of the calling thread (`/proc`: ticks of 10 ms, and ns).
fn cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let process = (ticks(11) + ticks(12)) / 100.0;
    let thread = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1e9;
    (process, thread)
}

/// `(wall, process CPU, thread CPU)` seconds of `f`.
fn measure(f: impl FnOnce()) -> [f64; 3] {
    let (p0, t0) = cpu();
    let start = Instant::now();
    f();
    let wall = start.elapsed().as_secs_f64();
    let (p1, t1) = cpu();
    [wall, p1 - p0, t1 - t0]
}

/// Prints the median and the fastest of each column of `rows`, in milliseconds.
fn report(what: &str, rows: &mut [[f64; 3]]) {
    let mut line = format!("{what:28}");
    for (c, name) in ["wall", "cpu", "thread cpu"].iter().enumerate() {
        let mut col: Vec<f64> = rows.iter().map(|r| r[c] * 1e3).collect();
        col.sort_by(f64::total_cmp);
        line += &format!("  {name} {:7.1} (min {:7.1})", col[col.len() / 2], col[0]);
    }
    eprintln!("{line} ms, {} rounds", rows.len());
}

#[test]
#[ignore]
fn vision_timing_of_a_training_step_chained_and_apart() {
    let cfg = tiny(
        PositionKind::RopeAxial,
        r#""hidden_size": 192, "num_hidden_layers": 6, "num_attention_heads": 3,
            "intermediate_size": 768, "num_channels": 1, "image_size": 28,
            "num_register_tokens": 4, "num_labels": 10, "layerscale_value": 0.1,
            "key_bias": false, "drop_path_rate": 0.1"#,
    );
    let (model, _vars) = classifier(&cfg, DType::F32, 1);
    let x = random(&[128, 1, 28, 28], 3);
    let w = random(&[128, 10], 4);
    let precision = Precision::Bf16.effective();
    let step = |seed: u64| {
        let d = Dropout::seeded(seed);
        let mode = Mode::Train {
            dropout: &d,
            precision,
        };
        let logits = model.forward(&x, model.plan(mode)).unwrap();
        let loss = (&logits * &w).unwrap().sum_all().unwrap();
        drop(loss.backward().unwrap());
    };
    step(0);
    let (mut chained, mut apart) = (Vec::new(), Vec::new());
    for round in 0..10 {
        chained.push(measure(|| step(round)));
        apart.push(measure(|| links_apart(|| step(round))));
    }
    eprintln!("{precision:?} products, batch 128:");
    report("step, halves chained", &mut chained);
    report("step, each half its own op", &mut apart);

    // The classifier's features of the normed states [128, 54, 192], forward and backward.
    let last = Var::from_tensor(&random(&[128, 54, 192], 5)).unwrap();
    let g = random(&[128, 384], 6);
    let features = |op: &dyn Fn(&Tensor) -> Tensor| {
        let f = op(last.as_tensor());
        drop((&f * &g).unwrap().sum_all().unwrap().backward().unwrap());
    };
    let fast = |t: &Tensor| class_features(t, 5).unwrap();
    let slow = |t: &Tensor| class_features_slow(t, 5).unwrap();
    features(&fast);
    let (mut one_op, mut ops) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        one_op.push(measure(|| features(&fast)));
        ops.push(measure(|| features(&slow)));
    }
    report("features, one op", &mut one_op);
    report("features, candle's ops", &mut ops);
}
