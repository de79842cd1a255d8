//! `roformer bench rope`: the rotary kernels against memcpy (the physical limit) and candle-nn,
//! timed round-robin in one run.
//!
//! For every case (rotation x shape `[batch, heads, seq, head_dim]` x dtype x layout), q and k
//! have the same head-major shape and each implementation rotates both:
//! - `rotary` / `fused_inplace`: [`Rope::apply_qk_inplace`] (one call, q and k in place);
//! - `rotary` / `out_of_place`: [`Rope::apply`] on q and on k into preallocated outputs;
//! - `memcpy` / `copy`: q and k copied into preallocated buffers (on the same threads);
//! - `candle` / `rope` or `rope_i`: candle-nn's `rope` (half layout) or `rope_i`
//!   (interleaved) on the same data, cos/sin `[seq, head_dim / 2]` built once, called from the
//!   main thread.
//!
//! Rotations other than 1D RoPE (axial 2D over a patch grid, YaRN) run through the same kernels
//! on tables made from their angles; each default one shares its shape with a 1D case, so the
//! GB/s compare directly, and candle-nn is handed the same cos/sin.
//!
//! Every implementation is credited with the same bytes, q and k read and written plus the
//! cos/sin table read, `2 * (bytes(q) + bytes(k)) + seq * head_dim * elem_size`, the formula of
//! the peer benchmarks in `shared/peers`, so GB/s compare across implementations and with them.
//! Reported times are medians per call. The benchmark re-executes itself with glibc's mmap and
//! trim thresholds raised (see [`super::alloc`]), so freed buffers are reused instead of being
//! page-faulted in again on every call.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor, WithDType};
use rayon::prelude::*;
use rotary::{
    rotate, rotate_qk_inplace, CosSin, DType, Direction, Element, Isa, Layout, NdPositions, NdRope,
    Positions, Rope, RopeSpec, Shape, DEFAULT_BASE,
};
use serde_json::json;

use super::alloc;
use super::timing::{round_robin, Budget, Stats};

/// The shapes of the issue: three prefill shapes and one decode step.
const DEFAULT_SHAPES: [[usize; 4]; 4] = [
    [1, 32, 4096, 128],
    [4, 16, 2048, 64],
    [1, 8, 16384, 128],
    [1, 32, 1, 128],
];

/// `--quick`: small shapes that still exercise threads and the decode path.
const QUICK_SHAPES: [[usize; 4]; 2] = [[1, 8, 512, 64], [1, 8, 1, 64]];

/// Default cases besides 1D RoPE on [`DEFAULT_SHAPES`], each on a shape that 1D RoPE also runs
/// on (same bytes): a 64 x 64 patch grid (16 heads, dim 64) with axial 2D RoPE, and YaRN.
const VARIANT_CASES: [(Rotation, [usize; 4]); 4] = [
    (Rotation::Rope1d, [1, 16, 4096, 64]),
    (Rotation::Axial2d, [1, 16, 4096, 64]),
    (Rotation::Yarn, [1, 16, 4096, 64]),
    (Rotation::Yarn, [1, 32, 4096, 128]),
];

/// `--quick`: the variants on the first quick shape (a 16 x 32 grid).
const QUICK_VARIANT_CASES: [(Rotation, [usize; 4]); 2] = [
    (Rotation::Axial2d, [1, 8, 512, 64]),
    (Rotation::Yarn, [1, 8, 512, 64]),
];

/// Arguments of `roformer bench rope`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One JSON object per line: impl, variant, rotation, shape, dtype, layout, seconds (median
    /// per call), gbps, bytes, p10/p90 seconds, samples, threads, isa.
    #[arg(long)]
    json: bool,
    /// Shapes as BATCHxHEADSxSEQxHEAD_DIM, comma-separated [default: the four shapes]
    #[arg(long, value_delimiter = ',', value_parser = parse_shape)]
    shapes: Vec<[usize; 4]>,
    /// Rotations (rope1d, axial2d, yarn), comma-separated [default: rope1d on --shapes; without
    /// --shapes, rope1d on the default shapes plus the axial2d and yarn cases]
    #[arg(long, value_delimiter = ',', value_parser = parse_rotation)]
    rotations: Vec<Rotation>,
    /// Storage types (f32, f16, bf16), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16", value_parser = parse_dtype)]
    dtypes: Vec<DType>,
    /// Pair layouts (interleaved, half), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "interleaved,half", value_parser = parse_layout)]
    layouts: Vec<Layout>,
    /// Seconds of timed rounds per case, all implementations together, once the minimum rounds
    /// are done.
    #[arg(long, default_value_t = 0.6)]
    seconds: f64,
    /// Fewest timed rounds per case.
    #[arg(long, default_value_t = 5)]
    min_rounds: usize,
    /// Small shapes and a short budget: a smoke test of a few seconds.
    #[arg(long)]
    quick: bool,
    /// Worker threads for every implementation [default: one per core]
    #[arg(long)]
    threads: Option<usize>,
}

fn parse_shape(s: &str) -> Result<[usize; 4], String> {
    let dims: Vec<usize> = s
        .split('x')
        .map(|d| d.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?}: {e}"))?;
    match dims[..] {
        [b, h, t, d] if b * h * t * d > 0 && d % 2 == 0 => Ok([b, h, t, d]),
        _ => Err(format!(
            "{s:?}: expected BATCHxHEADSxSEQxHEAD_DIM, all non-zero, HEAD_DIM even"
        )),
    }
}

fn parse_rotation(s: &str) -> Result<Rotation, String> {
    Rotation::ALL
        .into_iter()
        .find(|r| r.name() == s)
        .ok_or_else(|| format!("{s:?}: expected rope1d, axial2d or yarn"))
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .find(|d| d.name() == s)
        .ok_or_else(|| format!("{s:?}: expected f32, f16 or bf16"))
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    [Layout::Interleaved, Layout::Half]
        .into_iter()
        .find(|l| l.name() == s)
        .ok_or_else(|| format!("{s:?}: expected interleaved or half"))
}

/// Which rotation our side computes. Every rotation is compared with the same memcpy and
/// candle-nn's `rope`/`rope_i` given the same cos/sin (its cost does not depend on the angles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rotation {
    /// The paper's 1D RoPE, base 10000, all dims rotated.
    Rope1d,
    /// Seed 003's axial 2D RoPE over a `rows x cols` patch grid (`rows * cols = seq`, as square
    /// as `seq` allows), base 10000, all dims rotated; its table is made once, as a vision model
    /// makes it once per resolution.
    Axial2d,
    /// YaRN (factor 4 over 4096 pre-training positions, base 10000) read from a config, with
    /// its attention factor as the amplitude.
    Yarn,
}

impl Rotation {
    const ALL: [Rotation; 3] = [Rotation::Rope1d, Rotation::Axial2d, Rotation::Yarn];

    fn name(self) -> &'static str {
        match self {
            Rotation::Rope1d => "rope1d",
            Rotation::Axial2d => "axial2d",
            Rotation::Yarn => "yarn",
        }
    }
}

/// The most square `rows x cols` grid of `seq` cells (`rows <= cols`).
fn grid(seq: usize) -> (usize, usize) {
    let rows = (1..=seq)
        .take_while(|r| r * r <= seq)
        .filter(|r| seq.is_multiple_of(*r))
        .last()
        .unwrap_or(1);
    (rows, seq / rows)
}

/// One benchmark case.
#[derive(Debug, Clone, Copy)]
struct Case {
    rotation: Rotation,
    /// `[batch, heads, seq, head_dim]` of q and of k.
    dims: [usize; 4],
    dtype: DType,
    layout: Layout,
}

impl Case {
    fn shape(&self) -> Shape {
        let [b, h, t, d] = self.dims;
        Shape::head_major(b, h, t, d)
    }

    fn elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// `2 * (bytes(q) + bytes(k)) + seq * head_dim * elem_size`.
    fn bytes(&self) -> usize {
        let [_, _, t, d] = self.dims;
        let elem = self.dtype.size_in_bytes();
        2 * 2 * self.elements() * elem + t * d * elem
    }
}

/// Every case of the run: (rotation, shape) pairs x dtypes x layouts.
fn cases(args: &Args) -> Vec<Case> {
    let pairs: Vec<(Rotation, [usize; 4])> = match &args.shapes[..] {
        [] => {
            let (shapes, variants) = if args.quick {
                (&QUICK_SHAPES[..], &QUICK_VARIANT_CASES[..])
            } else {
                (&DEFAULT_SHAPES[..], &VARIANT_CASES[..])
            };
            let wanted = |r: &Rotation| args.rotations.is_empty() || args.rotations.contains(r);
            let ropes = shapes.iter().map(|&dims| (Rotation::Rope1d, dims));
            ropes
                .chain(variants.iter().copied())
                .filter(|(r, _)| wanted(r))
                .collect()
        }
        given => {
            let rotations = match &args.rotations[..] {
                [] => &[Rotation::Rope1d][..],
                chosen => chosen,
            };
            let with = |r: Rotation| given.iter().map(move |&dims| (r, dims));
            rotations.iter().flat_map(|&r| with(r)).collect()
        }
    };
    let mut out = Vec::new();
    for (rotation, dims) in pairs {
        for &dtype in &args.dtypes {
            for &layout in &args.layouts {
                out.push(Case {
                    rotation,
                    dims,
                    dtype,
                    layout,
                });
            }
        }
    }
    out
}

/// Our side of a case: a cached 1D rope, or a table made once from N-D angles.
enum Ours {
    Rope(Rope),
    Table(CosSin),
}

impl Ours {
    fn build(case: &Case) -> Result<Ours> {
        let [_, _, t, d] = case.dims;
        Ok(match case.rotation {
            Rotation::Rope1d => Ours::Rope(Rope::new(d, d, DEFAULT_BASE, case.layout)?),
            Rotation::Axial2d => {
                let (rows, cols) = grid(t);
                let rope = NdRope::axial_2d(d, d, DEFAULT_BASE, case.layout)?;
                Ours::Table(rope.table(&NdPositions::grid_2d(rows, cols)?)?)
            }
            Rotation::Yarn => {
                let config = json!({
                    "head_dim": d, "rope_theta": DEFAULT_BASE,
                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 4096},
                });
                Ours::Rope(RopeSpec::from_hf_config(&config)?.rope(case.layout, None)?)
            }
        })
    }

    /// The cos and sin per pair (`[seq, d / 2]` each, row-major) of this rotation's table, for
    /// candle-nn.
    fn pair_coefficients(&self, layout: Layout, seq: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let computed;
        let view = match self {
            Ours::Rope(rope) => {
                computed = rope.coefficients(Positions::START, 1, seq)?;
                computed.view()
            }
            Ours::Table(table) => table.view(),
        };
        let r = view.rotary_dim();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for row in 0..seq {
            for i in 0..r / 2 {
                // The second coordinate of a pair holds +sin.
                let (a, b) = layout.pair(i, r);
                cos.push(view.cos()[row * r + a]);
                sin.push(view.sin()[row * r + b]);
            }
        }
        Ok((cos, sin))
    }

    /// q and k in place, one fused call.
    fn fused<T: Element>(&self, q: &mut [T], k: &mut [T], shape: Shape) -> Result<()> {
        match self {
            Ours::Rope(rope) => {
                rope.apply_qk_inplace(q, shape, k, shape, Positions::START, Direction::Forward)?
            }
            Ours::Table(table) => {
                rotate_qk_inplace(q, shape, k, shape, table.view(), Direction::Forward)?
            }
        }
        Ok(())
    }

    /// q and k out of place, one call each.
    fn out_of_place<T: Element>(
        &self,
        (q, k): (&[T], &[T]),
        (q_out, k_out): (&mut [T], &mut [T]),
        shape: Shape,
    ) -> Result<()> {
        match self {
            Ours::Rope(rope) => {
                rope.apply(q, q_out, shape, Positions::START, Direction::Forward)?;
                rope.apply(k, k_out, shape, Positions::START, Direction::Forward)?;
            }
            Ours::Table(table) => {
                rotate(q, q_out, shape, table.view(), Direction::Forward)?;
                rotate(k, k_out, shape, table.view(), Direction::Forward)?;
            }
        }
        Ok(())
    }
}

/// The implementations timed, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Fused,
    OutOfPlace,
    Memcpy,
    Candle,
}

impl Impl {
    const ALL: [Impl; 4] = [Impl::Fused, Impl::OutOfPlace, Impl::Memcpy, Impl::Candle];

    /// The `impl` field of the JSON output.
    fn family(self) -> &'static str {
        match self {
            Impl::Fused | Impl::OutOfPlace => "rotary",
            Impl::Memcpy => "memcpy",
            Impl::Candle => "candle",
        }
    }

    /// The `variant` field: how the implementation was called.
    fn variant(self, layout: Layout) -> &'static str {
        match (self, layout) {
            (Impl::Fused, _) => "fused_inplace",
            (Impl::OutOfPlace, _) => "out_of_place",
            (Impl::Memcpy, _) => "copy",
            (Impl::Candle, Layout::Interleaved) => "rope_i",
            (Impl::Candle, Layout::Half) => "rope",
        }
    }
}

/// Copies `src` into `dst` in chunks of about 1 MiB spread over the worker threads (one plain
/// copy below that).
fn par_copy<T: Copy + Send + Sync>(src: &[T], dst: &mut [T]) {
    let chunk = ((1 << 20) / std::mem::size_of::<T>()).max(1);
    if src.len() <= chunk {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Uniform values in [-1, 1) from a fixed xorshift stream.
fn random_data<T: Element>(n: usize, seed: u64) -> Vec<T> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            T::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// The data of one case and the candle inputs made from it.
struct Bench<'a, T> {
    case: Case,
    ours: &'a Ours,
    /// Rotated in place by the fused call, round after round.
    fused: (Vec<T>, Vec<T>),
    /// Read by the out-of-place call and by memcpy.
    src: (Vec<T>, Vec<T>),
    out: (Vec<T>, Vec<T>),
    copy: (Vec<T>, Vec<T>),
    candle_qk: (Tensor, Tensor),
    candle_cs: (Tensor, Tensor),
}

impl<'a, T: Element + WithDType> Bench<'a, T> {
    fn new(case: Case, ours: &'a Ours) -> Result<Self> {
        let [b, h, t, d] = case.dims;
        let n = case.elements();
        let src = (random_data::<T>(n, 1), random_data::<T>(n, 2));
        let cpu = &Device::Cpu;
        let candle_qk = (
            Tensor::from_slice(&src.0, (b, h, t, d), cpu)?,
            Tensor::from_slice(&src.1, (b, h, t, d), cpu)?,
        );
        // cos/sin [seq, d/2]: our rotation's, from f64 angles rounded once to f32.
        let (cos, sin) = ours.pair_coefficients(case.layout, t)?;
        let to_t = |v: Vec<f32>| -> Vec<T> {
            v.into_iter()
                .map(|c| <T as WithDType>::from_f64(f64::from(c)))
                .collect()
        };
        let candle_cs = (
            Tensor::from_vec(to_t(cos), (t, d / 2), cpu)?,
            Tensor::from_vec(to_t(sin), (t, d / 2), cpu)?,
        );
        Ok(Bench {
            case,
            ours,
            fused: src.clone(),
            out: (vec![T::default(); n], vec![T::default(); n]),
            copy: (vec![T::default(); n], vec![T::default(); n]),
            src,
            candle_qk,
            candle_cs,
        })
    }

    fn candle(&self) -> Result<(Tensor, Tensor)> {
        let (q, k) = &self.candle_qk;
        let (cos, sin) = &self.candle_cs;
        let f = match self.case.layout {
            Layout::Interleaved => candle_nn::rotary_emb::rope_i,
            Layout::Half => candle_nn::rotary_emb::rope,
        };
        Ok((f(q, cos, sin)?, f(k, cos, sin)?))
    }

    fn call(&mut self, which: Impl) -> Result<()> {
        let shape = self.case.shape();
        match which {
            Impl::Fused => self.ours.fused(&mut self.fused.0, &mut self.fused.1, shape),
            Impl::OutOfPlace => self.ours.out_of_place(
                (&self.src.0, &self.src.1),
                (&mut self.out.0, &mut self.out.1),
                shape,
            ),
            Impl::Memcpy => {
                par_copy(&self.src.0, &mut self.copy.0);
                par_copy(&self.src.1, &mut self.copy.1);
                Ok(())
            }
            Impl::Candle => self.candle().map(drop),
        }
    }

    /// Checks that our out-of-place result and candle's agree, so that both sides compute the
    /// same rotation: within 1e-5 for f32 (both round f64 cos/sin once), 1/16 for 16-bit types
    /// (candle rounds every intermediate to the storage type; values are below 1.5).
    fn check_agreement(&mut self) -> Result<()> {
        self.call(Impl::OutOfPlace)?;
        let (cq, ck) = self.candle()?;
        let tolerance = match self.case.dtype {
            DType::F32 => 1e-5,
            DType::F16 | DType::BF16 => 1.0 / 16.0,
        };
        for (ours, theirs) in [(&self.out.0, cq), (&self.out.1, ck)] {
            let theirs: Vec<T> = theirs.flatten_all()?.to_vec1()?;
            let worst = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a.to_f32() - Element::to_f32(*b)).abs())
                .fold(0f32, f32::max);
            if worst.is_nan() || worst > tolerance {
                bail!(
                    "rotary and candle disagree by {worst} on {:?} (tolerance {tolerance})",
                    self.case
                );
            }
        }
        Ok(())
    }
}

/// One measured implementation of one case.
struct Record {
    case: Case,
    which: Impl,
    stats: Stats,
}

impl Record {
    fn gbps(&self) -> f64 {
        self.case.bytes() as f64 / self.stats.median / 1e9
    }

    fn json(&self, context: &RunInfo) -> serde_json::Value {
        json!({
            "impl": self.which.family(),
            "variant": self.which.variant(self.case.layout),
            "rotation": self.case.rotation.name(),
            "shape": self.case.dims,
            "dtype": self.case.dtype.name(),
            "layout": self.case.layout.name(),
            "seconds": self.stats.median,
            "gbps": self.gbps(),
            "bytes": self.case.bytes(),
            "p10_seconds": self.stats.p10,
            "p90_seconds": self.stats.p90,
            "samples": self.stats.samples,
            "calls_per_sample": self.stats.calls_per_sample,
            "threads": context.threads,
            "isa": context.isa.name(),
            "malloc_warm": context.malloc_warm,
        })
    }
}

/// Facts about the run that every record carries.
struct RunInfo {
    threads: usize,
    isa: Isa,
    malloc_warm: bool,
}

/// Runs one case with element type `T`.
fn run_case<T: Element + WithDType>(case: Case, budget: &Budget) -> Result<Vec<Record>> {
    let ours = Ours::build(&case)?;
    let mut bench = Bench::<T>::new(case, &ours)?;
    bench.check_agreement()?;
    let stats = round_robin(Impl::ALL.len(), budget, |i| bench.call(Impl::ALL[i]))?;
    Ok(Impl::ALL
        .into_iter()
        .zip(stats)
        .map(|(which, stats)| Record { case, which, stats })
        .collect())
}

fn run_any(case: Case, budget: &Budget) -> Result<Vec<Record>> {
    match case.dtype {
        DType::F32 => run_case::<f32>(case, budget),
        DType::F16 => run_case::<half::f16>(case, budget),
        DType::BF16 => run_case::<half::bf16>(case, budget),
    }
}

/// Formats seconds with a unit that keeps three significant digits readable.
fn human_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.2}us", s * 1e6)
    } else {
        format!("{:.2}ms", s * 1e3)
    }
}

fn print_header(out: &mut impl Write, context: &RunInfo, args: &Args) -> io::Result<()> {
    writeln!(
        out,
        "RoPE on q and k (head-major, same shape), {} thread(s), kernels: {}, warm allocator: {}",
        context.threads,
        context.isa.name(),
        if context.malloc_warm { "yes" } else { "no" },
    )?;
    writeln!(
        out,
        "median time per call / GB/s, bytes = 2*(q+k) + cos/sin table; {}+ rounds and {} s per case",
        args.min_rounds, args.seconds
    )?;
    writeln!(
        out,
        "{:<8} {:<16} {:<5} {:<11} {:>18} {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8}",
        "rotation",
        "shape",
        "dtype",
        "layout",
        "fused in-place",
        "out-of-place",
        "memcpy",
        "candle",
        "fus/mem",
        "fus/cnd",
        "oop/mem",
        "oop/cnd"
    )
}

fn print_row(out: &mut impl Write, records: &[Record]) -> io::Result<()> {
    let case = records[0].case;
    let find = |w: Impl| records.iter().find(|r| r.which == w);
    let cell = |w: Impl| {
        find(w).map_or_else(String::new, |r| {
            format!("{} {:>6.1}", human_time(r.stats.median), r.gbps())
        })
    };
    let ratio = |a: Impl, b: Impl| match (find(a), find(b)) {
        (Some(a), Some(b)) => format!("{:.2}", a.gbps() / b.gbps()),
        _ => String::new(),
    };
    let [b, h, t, d] = case.dims;
    writeln!(
        out,
        "{:<8} {:<16} {:<5} {:<11} {:>18} {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8}",
        case.rotation.name(),
        format!("{b}x{h}x{t}x{d}"),
        case.dtype.name(),
        case.layout.name(),
        cell(Impl::Fused),
        cell(Impl::OutOfPlace),
        cell(Impl::Memcpy),
        cell(Impl::Candle),
        ratio(Impl::Fused, Impl::Memcpy),
        ratio(Impl::Fused, Impl::Candle),
        ratio(Impl::OutOfPlace, Impl::Memcpy),
        ratio(Impl::OutOfPlace, Impl::Candle),
    )
}

/// Runs the benchmark.
///
/// # Errors
/// Bad options, a failing implementation, or our result disagreeing with candle's.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    if let Some(status) = alloc::reexec_warm()? {
        if status.success() {
            return Ok(());
        }
        bail!("the benchmark (re-run with a warm allocator) failed: {status}");
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("sizing the thread pool")?;
    }
    let context = RunInfo {
        threads: rayon::current_num_threads(),
        isa: Isa::detect(),
        malloc_warm: alloc::is_warm(),
    };
    let budget = Budget {
        // One untimed call each: the agreement check has already run the out-of-place and
        // candle calls once, so every buffer and candle's allocations are warm after it.
        warmup: 1,
        min_rounds: args.min_rounds.max(1),
        max_rounds: 100_000,
        seconds: if args.quick {
            args.seconds.min(0.05)
        } else {
            args.seconds
        },
        sample: Duration::from_micros(200),
    };
    let mut out = io::stdout().lock();
    let written = (|| -> Result<()> {
        if !args.json {
            print_header(&mut out, &context, &args)?;
        }
        for case in cases(&args) {
            let records = run_any(case, &budget)?;
            if args.json {
                for r in &records {
                    writeln!(out, "{}", r.json(&context))?;
                }
            } else {
                print_row(&mut out, &records)?;
            }
            out.flush()?;
        }
        Ok(())
    })();
    match written {
        // A reader that stops early (`| head`) is not a failure of the benchmark.
        Err(e)
            if e.downcast_ref::<io::Error>().map(io::Error::kind)
                == Some(io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}
