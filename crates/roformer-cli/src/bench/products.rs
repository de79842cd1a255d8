//! `roformer bench products`: the matrix products of a training step, f32 (gemm) against bf16
//! (our kernel, or oneDNN where it is the default), each beside the ceiling of the instruction
//! it runs on; bf16 on operands packed ahead ("bf16 kept": the kernel alone, as the training
//! ops run it on their kept activations, where the other bf16 columns pack both operands on
//! every call); and, where oneDNN is installed, bf16 through oneDNN beside them.
//!
//! First the ceilings of one core ([`roformer::measure::ceilings`]), then, per product, the
//! median seconds of f32 and bf16 timed round-robin, as GFLOP/s (`2 m n k / seconds`) and as a
//! share of `ceiling x threads` (f32 against the best f32 FMA, bf16 against `vdpbf16ps`). The
//! last line sums a step: each product's time times its count (see one-thread products below).
//! Its bf16 / f32 ratio bounds what bf16 can gain on a whole step (Amdahl):
//!
//! ```text
//! step ratio = (P + R) / (P / r + R)   <   r        P: products' share of an f32 step,
//!                                                   R = 1 - P, r: the products' ratio
//! ```
//!
//! By default the products are those of one step of `--config` on `--batch` sequences of
//! `--seq` tokens: for each dense layer `y = x W^T` (W stored `[out, in]`) the forward
//! `(tokens, out, in)`, the input gradient `dx = dy W` `(tokens, in, out)` and the weight
//! gradient `dW = dy^T x` `(out, in, tokens)`, for the stacked q/k/v projection, the attention
//! output, the intermediate and the output layer of a sub-layer, and for the tied output layer
//! of the masked-LM head on the labelled 15 % of the tokens; then attention's own products per
//! sequence and head (`d` = hidden / heads), as the fused attention runs them, one task per
//! thread: `q k^T` forward, recomputed in the backward and as `dP = dO v^T` `(seq, seq, d)`;
//! `P v` and `dQ = dS k` `(seq, d, seq)`; `dV = P^T dO` and `dK = dS^T q` `(seq, d, seq)` with
//! the left operand transposed. A product marked one-thread is timed on the calling thread and
//! counts `1 / threads` of its time in the step's sum (its tasks share the threads).

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use roformer::measure::{bf16_kernels, ceilings, onednn_version, Ceiling, ProductCase, Storage};
use roformer::Precision;
use serde_json::json;

use super::model::ConfigName;
use super::timing::{round_robin, Budget, Stats};
use crate::output::OutputArgs;

/// Arguments of `roformer bench products`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "One JSON object per line: {\"ceiling\": instruction, flop_per_instruction, gflops}, then \
     per product {\"product\": name, m, n, k, a, b, count, threads, f32, bf16, bf16_kept and \
     onednn: {seconds, gflops, share}, bf16_over_f32, bf16_over_onednn}, then {\"step\": \
     f32_seconds, bf16_seconds, bf16_over_f32, bf16_kept_seconds, onednn_seconds, \
     bf16_over_onednn}; onednn is null where oneDNN is not installed"
)))]
pub struct Args {
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// The model sizes whose step's products are timed (ignored with --shapes).
    #[arg(long, value_enum, default_value = "poetry")]
    config: ConfigName,
    /// Sequences of the step.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1 << 16))]
    batch: u64,
    /// Tokens of each sequence.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1 << 14))]
    seq: u64,
    /// Products to time instead, as MxNxK with the storage of A and B after a colon (`n`: as
    /// its own rows, `t`: transposed), e.g. 4096x1024x256:nt; comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_product)]
    shapes: Vec<Shape>,
    /// Keep timing a product until this many seconds have passed (after 3 rounds).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Instructions per ceiling loop.
    #[arg(long, default_value_t = 1_000_000_000, value_parser = clap::value_parser!(u64).range(12..))]
    instructions: u64,
    /// Worker threads [default: one per core, or RAYON_NUM_THREADS]; 1 runs each product on
    /// the calling thread.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
}

/// One product of the list: its size, its operands' storage, how often a step runs it, and
/// whether it runs on one thread (a task among others on the threads) or on all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    name: String,
    mnk: (usize, usize, usize),
    storage: (Storage, Storage),
    count: usize,
    one_thread: bool,
}

/// Parses `MxNxK[:ab]` (`a`, `b` each `n` or `t`; `nn` when left out).
fn parse_product(s: &str) -> Result<Shape, String> {
    let (dims, storage) = s.split_once(':').unwrap_or((s, "nn"));
    let parsed: Result<Vec<usize>, _> = dims.split('x').map(|d| d.trim().parse()).collect();
    let Ok(&[m, n, k]) = parsed.as_deref() else {
        return Err(format!("{s:?}: expected MxNxK with three whole numbers"));
    };
    if m == 0 || n == 0 || k == 0 {
        return Err(format!("{s:?}: sizes must be at least 1"));
    }
    let side = |c: char| match c {
        'n' => Ok(Storage::Rows),
        't' => Ok(Storage::Transposed),
        _ => Err(format!(
            "{s:?}: storage is two letters of n (rows) or t (transposed)"
        )),
    };
    let chars: Vec<char> = storage.chars().collect();
    let [a, b] = chars[..] else {
        return Err(format!("{s:?}: storage is two letters, as in :nt"));
    };
    Ok(Shape {
        name: s.to_string(),
        mnk: (m, n, k),
        storage: (side(a)?, side(b)?),
        count: 1,
        one_thread: false,
    })
}

/// The products of one masked-LM training step of `config` on `batch` sequences of `seq`
/// tokens.
fn step_products(config: ConfigName, batch: usize, seq: usize) -> Result<Vec<Shape>> {
    let c = config.config()?;
    let (h, i, layers) = (c.hidden_size, c.intermediate_size, c.num_hidden_layers);
    let (tokens, heads) = (batch * seq, c.num_attention_heads);
    let labelled = (tokens * 15).div_ceil(100);
    let dense = [
        ("q/k/v", 3 * h, h, tokens, layers),
        ("attention output", h, h, tokens, layers),
        ("intermediate", i, h, tokens, layers),
        ("output", h, i, tokens, layers),
        ("MLM decoder", c.vocab_size, c.embedding_size, labelled, 1),
    ];
    use Storage::{Rows, Transposed};
    let mut shapes = Vec::new();
    for (layer, out, inp, rows, count) in dense {
        for (pass, mnk, storage) in [
            ("forward", (rows, out, inp), (Rows, Transposed)),
            ("input grad", (rows, inp, out), (Rows, Rows)),
            ("weight grad", (out, inp, rows), (Transposed, Rows)),
        ] {
            shapes.push(Shape {
                name: format!("{layer} {pass}"),
                mnk,
                storage,
                count,
                one_thread: false,
            });
        }
    }
    let (d, tasks) = (h / heads, batch * heads * layers);
    for (name, mnk, storage, per_task) in [
        (
            "attention q k^T, dO v^T",
            (seq, seq, d),
            (Rows, Transposed),
            3,
        ),
        ("attention P v, dS k", (seq, d, seq), (Rows, Rows), 2),
        (
            "attention P^T dO, dS^T q",
            (seq, d, seq),
            (Transposed, Rows),
            2,
        ),
    ] {
        shapes.push(Shape {
            name: name.to_string(),
            mnk,
            storage,
            count: per_task * tasks,
            one_thread: true,
        });
    }
    Ok(shapes)
}

/// One precision's figures for a product.
#[derive(Debug, Clone, Copy)]
struct Rate {
    seconds: f64,
    gflops: f64,
    share: Option<f64>,
}

impl Rate {
    fn of(stats: Stats, flop: f64, ceiling: Option<f64>) -> Rate {
        let gflops = flop / stats.median.max(f64::MIN_POSITIVE) / 1e9;
        Rate {
            seconds: stats.median,
            gflops,
            share: ceiling.map(|c| gflops / c),
        }
    }

    fn json(self) -> serde_json::Value {
        json!({"seconds": self.seconds, "gflops": self.gflops, "share": self.share})
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a finite number >= 0");
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n as usize)
            .build_global()?;
    }
    let threads = rayon::current_num_threads();
    let paths: &[Path] = match (bf16_kernels(), onednn_version()) {
        (None, _) => {
            eprintln!("this CPU has no native bf16 dot product (AVX512-BF16): f32 alone is timed");
            &[Path::F32]
        }
        (Some(kernels), Some(_)) => {
            eprintln!("bf16 kernels: {kernels}");
            &[Path::F32, Path::Bf16, Path::Kept, Path::OneDnn]
        }
        (Some(kernels), None) => {
            eprintln!("bf16 kernels: {kernels}");
            &[Path::F32, Path::Bf16, Path::Kept]
        }
    };
    let shapes = if args.shapes.is_empty() {
        step_products(args.config, args.batch as usize, args.seq as usize)?
    } else {
        args.shapes.clone()
    };
    let found = ceilings(args.instructions);
    let best = |pick: fn(&Ceiling) -> bool| {
        found
            .iter()
            .filter(|c| pick(c))
            .map(|c| c.gflops * threads as f64)
            .reduce(f64::max)
    };
    let limits = (
        best(|c| c.instruction.contains("(f32)")),
        best(|c| c.instruction.contains("bf16")),
    );
    let json = args.stdout.json;
    let mut out = std::io::stdout().lock();
    write_ceilings(&mut out, &found, json)?;
    if !json {
        write_header(&mut out, threads)?;
    }
    let budget = Budget {
        warmup: 1,
        min_rounds: 3,
        max_rounds: 100_000,
        seconds: args.seconds,
        // Products shorter than this are timed in batches of calls.
        sample: Duration::from_millis(2),
    };
    let mut step = [0.0; 4];
    for shape in &shapes {
        let timed = time_product(shape, paths, (threads, limits), &budget)?;
        for (sum, rate) in step.iter_mut().zip(timed.rates()) {
            *sum += rate.map_or(0.0, |r| r.seconds) * timed.weight;
        }
        write_product(&mut out, &timed, json)?;
        out.flush()?;
    }
    let ran = |p: Path| paths.contains(&p);
    let step = (
        step[0],
        ran(Path::Bf16).then_some(step[1]),
        ran(Path::Kept).then_some(step[2]),
        ran(Path::OneDnn).then_some(step[3]),
    );
    write_step(&mut out, shapes.len(), step, json)
}

/// How a product is timed: f32 (gemm), bf16 on this machine's default kernel, bf16 on
/// operands packed ahead (the kernel alone), or bf16 through oneDNN where it is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    F32,
    Bf16,
    Kept,
    OneDnn,
}

/// One product timed in every precision.
struct Timed<'a> {
    shape: &'a Shape,
    /// Threads it ran on.
    on: usize,
    f32: Rate,
    bf16: Option<Rate>,
    kept: Option<Rate>,
    onednn: Option<Rate>,
    /// Its weight in the step's sum: its count, times `on / threads`.
    weight: f64,
}

impl Timed<'_> {
    /// f32 seconds over bf16 seconds.
    fn ratio(&self) -> Option<f64> {
        self.bf16.map(|r| self.f32.seconds / r.seconds)
    }

    /// The default bf16 kernel's seconds over oneDNN's.
    fn onednn_ratio(&self) -> Option<f64> {
        Some(self.bf16?.seconds / self.onednn?.seconds)
    }

    /// The rates in the order of [`Path`].
    fn rates(&self) -> [Option<Rate>; 4] {
        [Some(self.f32), self.bf16, self.kept, self.onednn]
    }
}

/// Times `shape` in `precisions` round-robin, on all `threads` or on one (a one-thread
/// product), its rates set against the f32 and bf16 ceilings `limits` of all the threads.
fn time_product<'a>(
    shape: &'a Shape,
    paths: &[Path],
    (threads, limits): (usize, (Option<f64>, Option<f64>)),
    budget: &Budget,
) -> Result<Timed<'a>> {
    let mut case = ProductCase::new(shape.mnk, shape.storage)?;
    let on = if shape.one_thread { 1 } else { threads };
    let stats = round_robin(paths.len(), budget, |p| match paths[p] {
        Path::F32 => case.run(Precision::F32, on > 1),
        Path::Bf16 => case.run(Precision::Bf16, on > 1),
        Path::Kept => case.run_prepacked(on > 1),
        Path::OneDnn => case.run_onednn(on > 1),
    })?;
    let flop = case.flop();
    let share = on as f64 / threads as f64;
    let ceiling = |c: Option<f64>| c.map(|c| c * share);
    Ok(Timed {
        shape,
        on,
        f32: Rate::of(stats[0], flop, ceiling(limits.0)),
        bf16: stats.get(1).map(|&s| Rate::of(s, flop, ceiling(limits.1))),
        kept: stats.get(2).map(|&s| Rate::of(s, flop, ceiling(limits.1))),
        onednn: stats.get(3).map(|&s| Rate::of(s, flop, ceiling(limits.1))),
        // A one-thread product's tasks share the threads.
        weight: shape.count as f64 * share,
    })
}

/// The table's title and column names.
fn write_header(out: &mut impl Write, threads: usize) -> Result<()> {
    writeln!(
        out,
        "\nProducts on {threads} thread(s), median of round-robin runs: GFLOP/s (share of the \
         ceiling x threads)"
    )?;
    writeln!(
        out,
        "{:<30} {:>16} {:>3} {:>6} {:>3} {:>14} {:>14} {:>9} {:>14} {:>14} {:>12}",
        "product",
        "m x n x k",
        "a b",
        "count",
        "thr",
        "f32",
        "bf16",
        "bf16/f32",
        "bf16 kept",
        "bf16 oneDNN",
        "bf16/oneDNN"
    )?;
    Ok(())
}

/// One product's record: a JSON line or a row of the table.
fn write_product(out: &mut impl Write, timed: &Timed<'_>, json: bool) -> Result<()> {
    let shape = timed.shape;
    let (m, n, k) = shape.mnk;
    let (a, b) = (
        storage_letter(shape.storage.0),
        storage_letter(shape.storage.1),
    );
    if json {
        writeln!(
            out,
            "{}",
            json!({
                "product": shape.name, "m": m, "n": n, "k": k, "a": a, "b": b,
                "count": shape.count, "threads": timed.on,
                "f32": timed.f32.json(), "bf16": timed.bf16.map(Rate::json),
                "bf16_over_f32": timed.ratio(), "bf16_kept": timed.kept.map(Rate::json),
                "onednn": timed.onednn.map(Rate::json),
                "bf16_over_onednn": timed.onednn_ratio(),
            })
        )?;
        return Ok(());
    }
    let cell = |r: Option<Rate>| match r {
        None => "-".to_string(),
        Some(r) => match r.share {
            Some(s) => format!("{:.0} ({:.0}%)", r.gflops, 100.0 * s),
            None => format!("{:.0}", r.gflops),
        },
    };
    writeln!(
        out,
        "{:<30} {:>16} {:>1} {:>1} {:>6} {:>3} {:>14} {:>14} {:>9} {:>14} {:>14} {:>12}",
        shape.name,
        format!("{m}x{n}x{k}"),
        a,
        b,
        shape.count,
        timed.on,
        cell(Some(timed.f32)),
        cell(timed.bf16),
        timed.ratio().map_or("-".to_string(), |r| format!("{r:.2}")),
        cell(timed.kept),
        cell(timed.onednn),
        timed
            .onednn_ratio()
            .map_or("-".to_string(), |r| format!("{r:.2}"))
    )?;
    Ok(())
}

/// The step's sum of `products` products: f32 seconds, and bf16 seconds (per call, kept,
/// oneDNN) where they ran.
fn write_step(
    out: &mut impl Write,
    products: usize,
    (f32_seconds, bf16_seconds, kept_seconds, onednn_seconds): (
        f64,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    ),
    json: bool,
) -> Result<()> {
    let ratio = bf16_seconds.map(|b| f32_seconds / b);
    let onednn_ratio = bf16_seconds.zip(onednn_seconds).map(|(b, o)| b / o);
    let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.1} ms", s * 1e3));
    let times = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}"));
    if json {
        writeln!(
            out,
            "{}",
            json!({"step": products, "f32_seconds": f32_seconds,
                   "bf16_seconds": bf16_seconds, "bf16_over_f32": ratio,
                   "bf16_kept_seconds": kept_seconds,
                   "onednn_seconds": onednn_seconds, "bf16_over_onednn": onednn_ratio})
        )?;
    } else {
        writeln!(
            out,
            "all, times their counts: f32 {:.1} ms, bf16 {}, bf16/f32 {}, bf16 kept {}, \
             bf16 oneDNN {}, bf16/oneDNN {}",
            f32_seconds * 1e3,
            ms(bf16_seconds),
            times(ratio),
            ms(kept_seconds),
            ms(onednn_seconds),
            times(onednn_ratio)
        )?;
    }
    Ok(())
}

fn storage_letter(s: Storage) -> &'static str {
    match s {
        Storage::Rows => "n",
        Storage::Transposed => "t",
    }
}

/// The ceilings, as a table or as JSON lines.
fn write_ceilings(out: &mut impl Write, found: &[Ceiling], json: bool) -> Result<()> {
    if json {
        for c in found {
            writeln!(
                out,
                "{}",
                json!({"ceiling": c.instruction, "flop_per_instruction": c.flop_per_instruction,
                       "gflops": c.gflops})
            )?;
        }
        return Ok(());
    }
    writeln!(out, "Instruction ceilings, one core:")?;
    if found.is_empty() {
        writeln!(out, "  (none measured on this architecture)")?;
    }
    for c in found {
        writeln!(
            out,
            "  {:<28} {:>3} FLOP each  {:>7.1} GFLOP/s",
            c.instruction, c.flop_per_instruction, c.gflops
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_shapes_parse_with_and_without_storage() {
        let s = parse_product("4096x1024x256:nt").unwrap();
        assert_eq!(s.mnk, (4096, 1024, 256));
        assert_eq!(s.storage, (Storage::Rows, Storage::Transposed));
        let s = parse_product("2x3x4").unwrap();
        assert_eq!(s.storage, (Storage::Rows, Storage::Rows));
        for bad in ["2x3", "2x3x0", "axbxc", "2x3x4:n", "2x3x4:nx", "2x3x4x5"] {
            assert!(parse_product(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_step_of_the_poetry_config_has_three_products_per_dense_layer_and_attentions() {
        let shapes = step_products(ConfigName::Poetry, 32, 128).unwrap();
        assert_eq!(shapes.len(), 18);
        // The stacked q/k/v forward: 4096 tokens by 768 outputs over 256 inputs, 4 layers.
        assert_eq!(shapes[0].mnk, (4096, 768, 256));
        assert_eq!(shapes[0].count, 4);
        // The output layer's weight gradient: [256, 1024] over the tokens.
        assert_eq!(shapes[11].mnk, (256, 1024, 4096));
        // The decoder on the 15 % labelled tokens (615 of 4096), once.
        assert_eq!(shapes[12].mnk, (615, 10000, 256));
        assert_eq!(shapes[12].count, 1);
        assert!(shapes[..15].iter().all(|s| !s.one_thread));
        let flop = |s: &[Shape]| -> f64 {
            s.iter()
                .map(|s| 2.0 * (s.mnk.0 * s.mnk.1 * s.mnk.2 * s.count) as f64)
                .sum()
        };
        // 3 passes x (4 layers x 4096 x 786432 + 615 x 10000 x 256) multiply-adds, x 2.
        let dense = 6.0 * (4.0 * 4096.0 * 786_432.0 + 615.0 * 10_000.0 * 256.0);
        assert_eq!(flop(&shapes[..15]), dense);
        // Attention: 7 products of 128 x 128 x 64 per sequence, head and layer, one thread each.
        assert!(shapes[15..].iter().all(|s| s.one_thread));
        assert_eq!(shapes[15].mnk, (128, 128, 64));
        assert_eq!(shapes[16].mnk, (128, 64, 128));
        assert_eq!(shapes[17].storage, (Storage::Transposed, Storage::Rows));
        assert_eq!(
            flop(&shapes[15..]),
            7.0 * 2.0 * 128.0 * 128.0 * 64.0 * (32 * 4 * 4) as f64
        );
    }
}
