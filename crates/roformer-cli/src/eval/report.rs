//! The report: a table, or one JSON object with `--json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use roformer::RoFormerTokenizer;
use serde::Serialize;

use super::agreement::AgreementSummary;
use super::score::Rates;
use super::{MlmArgs, Scores};
use crate::{default_model, json};

/// The `--json` object. The fields up to `simplified_copies` are those of the first version;
/// with `--famous` the rows count couplets, `original` in the file's script.
#[derive(Serialize)]
struct Summary<'a> {
    model: &'a str,
    corpus: &'a [PathBuf],
    also_simplified: bool,
    validation: f64,
    mask_prob: f64,
    seq_len: usize,
    seed: u64,
    baseline_top5_chars: &'a [&'a str],
    all: &'a Rates,
    original: &'a Rates,
    simplified_copies: &'a Rates,
    /// What was masked: `"held-out"` documents or `"famous"` couplets.
    set: &'a str,
    /// The anthology read with `--famous`, else `null`.
    famous_file: Option<&'a Path>,
    /// The neighbour baseline's add-k.
    baseline_k: f64,
    /// The precision of the model's matrix products: `"f32"` or `"bf16"` (as asked; bf16
    /// falls back to f32 where the CPU lacks it, said on stderr).
    precision: &'static str,
    /// With `--against-f32`: the model against itself in f32, else `null`.
    against_f32: Option<AgreementSummary>,
}

/// What one report shows, worked out once for both forms.
struct Report<'a> {
    args: &'a MlmArgs,
    model_name: String,
    /// The unigram baseline's five characters.
    unigram_chars: Vec<&'a str>,
    /// `all`, `original` and `simplified copies`.
    rows: [(&'static str, Rates); 3],
    against_f32: Option<AgreementSummary>,
}

/// Prints the scores of the originals, their simplified copies and both together.
///
/// # Errors
/// A failed write, or a rate that JSON cannot hold.
pub(super) fn print(
    args: &MlmArgs,
    tokenizer: &RoFormerTokenizer,
    unigram: &[u32],
    scores: &Scores,
) -> anyhow::Result<()> {
    let (original, copies) = (&scores.original, &scores.copies);
    let report = Report {
        args,
        model_name: default_model::describe(args.model.as_deref()),
        unigram_chars: unigram
            .iter()
            .take(5)
            .filter_map(|&id| tokenizer.id_to_token(id))
            .collect(),
        rows: [
            ("all", Rates::from(&original.plus(*copies))),
            ("original", Rates::from(original)),
            ("simplified copies", Rates::from(copies)),
        ],
        against_f32: scores.against_f32.as_ref().map(|a| a.summary()),
    };
    let mut out = std::io::stdout().lock();
    if args.stdout.json {
        write_json(&mut out, report)?;
    } else {
        write_table(&mut out, &report)?;
    }
    out.flush()?;
    Ok(())
}

/// The `--json` object, on one line.
fn write_json(out: &mut impl Write, report: Report) -> anyhow::Result<()> {
    let Report {
        args,
        model_name,
        unigram_chars,
        rows,
        against_f32,
    } = report;
    let summary = Summary {
        model: &model_name,
        corpus: &args.corpus,
        also_simplified: args.also_simplified,
        validation: args.validation,
        mask_prob: args.mask_prob,
        seq_len: args.seq_len,
        seed: args.seed,
        baseline_top5_chars: &unigram_chars,
        all: &rows[0].1,
        original: &rows[1].1,
        simplified_copies: &rows[2].1,
        set: if args.famous { "famous" } else { "held-out" },
        famous_file: args.famous.then_some(args.famous_file.as_path()),
        baseline_k: args.baseline_k,
        precision: args.precision.name(),
        against_f32,
    };
    writeln!(out, "{}", json::to_string(&summary)?)?;
    Ok(())
}

/// The human table: one row per part, then the agreement with f32 when asked.
fn write_table(out: &mut impl Write, report: &Report) -> anyhow::Result<()> {
    let args = report.args;
    if args.famous {
        writeln!(
            out,
            "couplets of {}, one character masked in each",
            args.famous_file.display()
        )?;
    }
    writeln!(
        out,
        "model {}; unigram baseline predicts {}; neighbour baseline: bigrams with add-{} \
         smoothing",
        report.model_name,
        report.unigram_chars.join(" "),
        args.baseline_k
    )?;
    let texts = if args.famous { "couplets" } else { "documents" };
    writeln!(
        out,
        "{texts:<18} {:>6} {:>8} {:>8} {:>8} {:>10} {:>10} {:>12} {:>12} {:>11} {:>11}",
        "texts",
        "masked",
        "model@1",
        "model@5",
        "unigram@1",
        "unigram@5",
        "neighbour@1",
        "neighbour@5",
        "model/nb@1",
        "model/nb@5"
    )?;
    let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"));
    for (name, r) in &report.rows {
        writeln!(
            out,
            "{name:<18} {:>6} {:>8} {:>8.4} {:>8.4} {:>10.4} {:>10.4} {:>12.4} {:>12.4} \
             {:>11} {:>11}",
            r.documents,
            r.masked,
            r.model_top1,
            r.model_top5,
            r.baseline_top1,
            r.baseline_top5,
            r.neighbour_top1,
            r.neighbour_top5,
            ratio(r.model_over_neighbour_top1),
            ratio(r.model_over_neighbour_top5)
        )?;
    }
    if let Some(a) = &report.against_f32 {
        writeln!(
            out,
            "{} against f32: the same top-1 at {} of {} masks ({:.2} %); largest |logit \
             difference| {:.3e}",
            args.precision.name(),
            a.same_top1,
            a.masks,
            100.0 * a.same_top1_share,
            a.max_abs_logit_diff
        )?;
    }
    Ok(())
}
