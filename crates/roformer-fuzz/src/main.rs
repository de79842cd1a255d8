//! `roformer-fuzz TARGET --minutes M [--seed S]`: fuzz one target; exit code 1 when an input
//! panicked, crashed or hung (each saved under `--findings`), 0 otherwise.
//!
//! Also `--replay FILE` (run one input in this process, with the default panic output: use
//! it under a debugger or with `RUST_BACKTRACE=1`) and `--minimize FILE` (shrink a finding's
//! input to `FILE.min`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use roformer_fuzz::run::campaign::{self, Settings, Summary};
use roformer_fuzz::run::worker;
use roformer_fuzz::Target;

/// Fuzz RoFormer's loaders and inputs with seeded mutations.
#[derive(Debug, Parser)]
#[command(name = "roformer-fuzz")]
struct Cli {
    /// What to fuzz.
    #[arg(value_enum)]
    target: Target,
    /// Fuzz for this long (default 1 minute when --runs is not given either).
    #[arg(long)]
    minutes: Option<f64>,
    /// Stop after this many inputs.
    #[arg(long)]
    runs: Option<u64>,
    /// Seed of the mutations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory of findings (a TARGET directory is made in it).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/findings"))]
    findings: PathBuf,
    /// Seconds one input may take before it counts as a hang.
    #[arg(long, default_value_t = 5.0)]
    timeout_s: f64,
    /// Address-space limit of the process running the inputs, in MiB.
    #[arg(long, default_value_t = 4096)]
    mem_mb: u64,
    /// Stop at the first panic, crash or hang.
    #[arg(long)]
    stop_on_finding: bool,
    /// Run this one input in this process and print the outcome.
    #[arg(long, value_name = "FILE", conflicts_with = "minimize")]
    replay: Option<PathBuf>,
    /// Shrink this finding's input; the result goes to FILE.min.
    #[arg(long, value_name = "FILE")]
    minimize: Option<PathBuf>,
    /// Write the target's seeds to this directory (a corpus for libFuzzer) and exit.
    #[arg(long, value_name = "DIR")]
    write_seeds: Option<PathBuf>,
    /// Serve inputs on stdin (how the fuzzer runs its worker process).
    #[arg(long, hide = true)]
    worker: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roformer-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> std::io::Result<ExitCode> {
    if cli.worker {
        worker::serve(cli.target, cli.mem_mb)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = &cli.write_seeds {
        std::fs::create_dir_all(dir)?;
        for (i, seed) in cli.target.seeds().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(file) = &cli.replay {
        worker::limit_memory(cli.mem_mb)?;
        let outcome = cli.target.run(&std::fs::read(file)?);
        println!("{outcome:?}");
        return Ok(ExitCode::SUCCESS);
    }
    let minutes = match (cli.minutes, cli.runs) {
        (None, None) => Some(1.0),
        (m, _) => m,
    };
    let settings = Settings {
        target: cli.target,
        seed: cli.seed,
        runs: cli.runs,
        duration: minutes.map(|m| Duration::from_secs_f64(m.max(0.0) * 60.0)),
        timeout: Duration::from_secs_f64(cli.timeout_s.max(0.001)),
        mem_mb: cli.mem_mb,
        findings: cli.findings.clone(),
        stop_on_finding: cli.stop_on_finding,
    };
    if let Some(file) = &cli.minimize {
        let small = campaign::minimize(&settings, std::fs::read(file)?, 5000)?;
        let mut out = file.clone().into_os_string();
        out.push(".min");
        std::fs::write(&out, small)?;
        println!("{}", PathBuf::from(out).display());
        return Ok(ExitCode::SUCCESS);
    }
    let summary = campaign::run(&settings)?;
    report(cli.target, cli.seed, &summary);
    Ok(if summary.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn report(target: Target, seed: u64, summary: &Summary) {
    let s = &summary.stats;
    println!(
        "{} (seed {seed}): {} executions in {:.1} s ({:.0}/s): accepted {}, rejected {}, \
         non-finite {}, panics {}, crashes {}, hangs {}; {} distinct outcomes, corpus {}",
        target.name(),
        s.executions,
        s.elapsed.as_secs_f64(),
        s.rate(),
        s.accepted,
        s.rejected,
        s.non_finite,
        s.panics,
        s.crashes,
        s.hangs,
        s.outcomes,
        s.corpus
    );
    for f in &summary.findings {
        println!(
            "  {} x{}: {} ({})",
            f.kind.name(),
            f.count,
            f.key,
            f.file.display()
        );
    }
}
