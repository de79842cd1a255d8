//! Measurement in a child process per case: the layer under test, its time and peak memory.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use roformer::measure::softmax_attention;
use roformer::measure::{LinearAttention, Masking};
use roformer::Mode;
use rotary::{rotate_tensor, Coefficients, Direction, Layout, Order, Positions, Rope};
use serde::{Deserialize, Serialize};

use super::args::Args;
use super::cases::{Case, Kind};
use crate::alloc::WARM_ENV;
use crate::bench::memory::{proc_status, reset_peak};
use crate::bench::timing::{round_robin, Budget};
use crate::output::outln;

/// What a child process measures for one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Measurement {
    /// Median seconds per call.
    pub(super) median_s: f64,
    /// 10th and 90th percentiles of seconds per call.
    pub(super) p10_s: f64,
    pub(super) p90_s: f64,
    /// Timed samples.
    pub(super) samples: usize,
    /// Resident bytes the first call added at its peak (`VmHWM - VmRSS` before the call).
    pub(super) peak_bytes: u64,
}

/// A `[1, heads, len, head_dim]` tensor of N(0, 1/4) values, made straight from a vector so
/// that no freed temporaries are left in the heap for the measured call to reuse.
fn input(rng: &mut StdRng, heads: usize, len: usize, head_dim: usize) -> anyhow::Result<Tensor> {
    let values: Vec<f32> = (0..heads * len * head_dim)
        .map(|_| 0.5 * rng.sample::<f32, _>(StandardNormal))
        .collect();
    Ok(Tensor::from_vec(
        values,
        (1, heads, len, head_dim),
        &Device::Cpu,
    )?)
}

/// The layer under test, ready to call on fixed inputs.
struct Layer {
    case: Case,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    coefficients: Coefficients,
    linear: LinearAttention,
}

impl Layer {
    fn new(case: Case, args: &Args, rope: &Rope) -> anyhow::Result<Layer> {
        let mut rng = StdRng::seed_from_u64(case.len as u64);
        let (h, d) = (args.heads, args.head_dim);
        Ok(Layer {
            case,
            q: input(&mut rng, h, case.len, d)?,
            k: input(&mut rng, h, case.len, d)?,
            v: input(&mut rng, h, case.len, d)?,
            coefficients: rope.coefficients(Positions::START, 1, case.len)?,
            linear: LinearAttention::new(args.chunk)?,
        })
    }

    fn call(&self) -> candle_core::Result<Tensor> {
        let (q, k, v, c) = (&self.q, &self.k, &self.v, &self.coefficients);
        match self.case.kind {
            Kind::Linear => self
                .linear
                .forward(q, k, v, Some(c), None, self.case.masking),
            Kind::Softmax => {
                let rotate = |x| rotate_tensor(x, c.clone(), Order::HeadMajor, Direction::Forward);
                let t = self.case.len;
                let mask = match self.case.masking {
                    Masking::Bidirectional => Tensor::zeros((1, 1, 1, t), DType::F32, q.device())?,
                    // 0 on and below the diagonal, the lowest f32 above (as the model's mask).
                    Masking::Causal => (Tensor::tril2(t, DType::F32, q.device())? - 1.0)?
                        .affine(f64::from(f32::MAX), 0.0)?,
                };
                softmax_attention(
                    &rotate(q)?,
                    &rotate(k)?,
                    v,
                    Some(&mask),
                    Mode::Inference,
                    0.0,
                )
            }
        }
    }
}

/// The child's side: measures one case and prints it as one JSON line.
pub(super) fn run_child(spec: &str, args: &Args) -> anyhow::Result<()> {
    let case = Case::parse(spec)?;
    let rope = Rope::new(
        args.head_dim,
        args.head_dim,
        rotary::DEFAULT_BASE,
        Layout::Interleaved,
    )?;
    // Start thread pools and caches on a small problem, outside the measurement.
    let small = Case {
        len: case.len.min(64),
        ..case
    };
    Layer::new(small, args, &rope)?.call()?;
    let layer = Layer::new(case, args, &rope)?;
    let before = proc_status("VmRSS:")?;
    reset_peak()?;
    drop(layer.call()?);
    let peak = proc_status("VmHWM:")?.saturating_sub(before);
    let budget = Budget {
        warmup: 1,
        min_rounds: 3,
        max_rounds: 1000,
        seconds: args.seconds,
        sample: Duration::from_millis(10),
    };
    let stats = round_robin(1, &budget, |_| layer.call().map(drop))?;
    let m = Measurement {
        median_s: stats[0].median,
        p10_s: stats[0].p10,
        p90_s: stats[0].p90,
        samples: stats[0].samples,
        peak_bytes: peak,
    };
    outln!("{}", crate::json::to_string(&m)?)?;
    Ok(())
}

/// Runs one case in a child process.
pub(super) fn measure(case: Case, args: &Args) -> anyhow::Result<Result<Measurement, String>> {
    let exe = std::env::current_exe().context("locating the roformer executable")?;
    let output = Command::new(&exe)
        .args(["bench", "attention", "--case", &case.spec()])
        .args(["--heads", &args.heads.to_string()])
        .args(["--head-dim", &args.head_dim.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--chunk", &args.chunk.to_string()])
        .envs(WARM_ENV)
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
        return Ok(Err(format!("child exited with {}: {tail}", output.status)));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    Ok(Ok(serde_json::from_str(line.trim()).with_context(
        || format!("parsing the child's measurement {line:?}"),
    )?))
}
