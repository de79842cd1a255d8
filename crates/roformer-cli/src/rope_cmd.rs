//! `roformer rope ...`: inspect rotary schedules.

use std::f64::consts::PI;
use std::path::PathBuf;

use anyhow::Context;
use rotary::RopeSpec;
use serde::Serialize;

use crate::output::outln;
use crate::output::OutputArgs;

/// Which inspection to run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Inverse frequencies and attention factor a model's config.json implies.
    Freqs(FreqsArgs),
}

/// Arguments of `rope freqs`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help(
    "Print {\"inv_freq\": [...], \"attention_factor\": x} instead of a table"
)))]
pub struct FreqsArgs {
    /// A transformers config.json (legacy `rope_scaling` or `rope_parameters` form).
    #[arg(long)]
    config: PathBuf,
    /// Current sequence length, for schemes that depend on it (dynamic NTK, LongRoPE).
    /// Without it: the values transformers computes when the model is built.
    #[arg(long)]
    seq_len: Option<usize>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
}

/// The JSON output of `rope freqs`.
#[derive(Debug, Serialize)]
struct FreqsJson<'a> {
    inv_freq: &'a [f64],
    attention_factor: f64,
}

/// Runs the chosen inspection.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Freqs(args) => freqs(&args),
    }
}

fn freqs(args: &FreqsArgs) -> anyhow::Result<()> {
    let path = args.config.display();
    let text = std::fs::read_to_string(&args.config).with_context(|| format!("reading {path}"))?;
    let config: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{path} is not valid JSON"))?;
    let spec = RopeSpec::from_hf_config(&config).with_context(|| format!("interpreting {path}"))?;
    let f = spec.freqs(args.seq_len)?;
    if args.stdout.json {
        let out = FreqsJson {
            inv_freq: &f.inv_freq,
            attention_factor: f.attention_factor,
        };
        outln!("{}", crate::json::to_string(&out)?)?;
        return Ok(());
    }
    let seq = args
        .seq_len
        .map_or_else(|| "initial".to_string(), |n| n.to_string());
    outln!(
        "rope_type {}, head_dim {}, rotated dims {}, base {}, seq_len {seq}",
        spec.scaling.name(),
        spec.head_dim,
        2 * spec.pairs(),
        spec.base,
    )?;
    outln!("attention_factor {}", f.attention_factor)?;
    outln!("{:>5}  {:>24}  {:>14}", "i", "inv_freq", "wavelength")?;
    for (i, w) in f.inv_freq.iter().enumerate() {
        outln!("{i:>5}  {w:>24.17e}  {:>14.2}", 2.0 * PI / w)?;
    }
    Ok(())
}
