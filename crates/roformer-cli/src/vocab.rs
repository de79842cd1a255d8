//! `roformer vocab build`: a BERT `vocab.txt` from a corpus: the special tokens, then the
//! corpus's characters (CJK characters and punctuation as tokens of their own; for other
//! scripts every character with its `##` continuation, and frequent whole words) by
//! descending frequency, optionally with frequent jieba words. It writes `--out` and, only
//! when `--tokenizer-config` names a path, the tokenizer config: nothing else.

use std::path::PathBuf;

use anyhow::bail;
use roformer::data::vocab_builder::tokenizer_config_json;
use roformer::data::{build_vocab, read_corpus, VocabOptions};
use serde_json::json;

use crate::inputs::{refuse_output_among_inputs, InputPath};
use crate::output;
use crate::output::outln;
use crate::output::OutputArgs;

/// The vocabulary commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Build `vocab.txt` from a corpus.
    Build(BuildArgs),
}

/// Arguments of `roformer vocab build`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help("One JSON object with the coverage figures")))]
pub struct BuildArgs {
    /// Corpus files or directories (format by extension: `.jsonl` JSON lines with `text`,
    /// `.json` the chinese-poetry layout, else a document per line).
    #[arg(long, num_args = 1.., required = true)]
    corpus: Vec<PathBuf>,
    /// Tokens in the vocabulary, special tokens included.
    #[arg(long, default_value_t = 8000)]
    size: usize,
    /// Fewest occurrences of a word to be considered.
    #[arg(long, default_value_t = 2)]
    min_count: u64,
    /// Largest share of the vocabulary given to multi-character jieba words (0: characters
    /// only).
    #[arg(long, default_value_t = 0.0)]
    jieba_words: f64,
    /// Add a simplified copy of every document with traditional characters (`fast2s`), so
    /// that the vocabulary covers both scripts.
    #[arg(long)]
    also_simplified: bool,
    /// The `vocab.txt` to write (`-`: standard output). Nothing else is written unless
    /// --tokenizer-config names it. It may not be a --corpus file.
    #[arg(long)]
    out: PathBuf,
    /// Also write the tokenizer's `tokenizer_config.json` (lowercasing and accent stripping
    /// off, as the vocabulary was built) to this path, e.g. beside --out in a checkpoint
    /// directory.
    #[arg(long, value_name = "FILE")]
    tokenizer_config: Option<PathBuf>,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
}

/// Runs `roformer vocab ...`.
///
/// # Errors
/// Unreadable or empty corpora, a size below the special tokens, file errors.
pub fn run(command: Command) -> anyhow::Result<()> {
    let Command::Build(args) = command;
    if !(0.0..=1.0).contains(&args.jieba_words) {
        bail!(
            "--jieba-words {} is not a share of the vocabulary: give a number in [0, 1]",
            args.jieba_words
        );
    }
    check_outputs(&args)?;
    let mut documents = Vec::new();
    for path in &args.corpus {
        documents.extend(read_corpus(path, None)?);
    }
    if args.also_simplified {
        documents = roformer::data::with_simplified(documents);
    }
    let options = VocabOptions {
        min_count: args.min_count,
        jieba_word_share: args.jieba_words,
        ..VocabOptions::new(args.size)
    };
    let built = build_vocab(&documents, &options)?;
    let mut text = built.tokens.join("\n");
    text.push('\n');
    output::write(&args.out, text.as_bytes())?;
    if let Some(path) = &args.tokenizer_config {
        output::write(path, tokenizer_config_json(&options.config).as_bytes())?;
    }
    let s = &built.stats;
    // A count over a count of at least 1: always finite, so `json!` cannot write it as null.
    let unk_share = s.unk_tokens as f64 / (s.tokens.max(1)) as f64;
    // With the vocabulary on standard output, the report goes to standard error.
    let report = |line: String| -> std::io::Result<()> {
        if output::is_stdout(&args.out) {
            eprintln!("{line}");
            Ok(())
        } else {
            outln!("{line}")
        }
    };
    if args.stdout.json {
        report(
            json!({
                "vocab": args.out,
                "tokenizer_config": args.tokenizer_config,
                "documents": documents.len(),
                "size": s.size,
                "distinct_chars": s.distinct_chars,
                "chars_in_vocab": s.chars_in_vocab,
                "words": s.words,
                "tokens": s.tokens,
                "unk_tokens": s.unk_tokens,
                "unk_share": unk_share,
            })
            .to_string(),
        )?;
    } else {
        report(format!(
            "{} tokens from {} documents: {} of {} distinct characters, {} words; [UNK] is {:.3}% \
             of the corpus's {} tokens",
            s.size,
            documents.len(),
            s.chars_in_vocab,
            s.distinct_chars,
            s.words,
            100.0 * unk_share,
            s.tokens
        ))?;
        let config = args
            .tokenizer_config
            .as_ref()
            .map(|p| format!(" and {}", p.display()))
            .unwrap_or_default();
        report(format!("wrote {}{config}", args.out.display()))?;
    }
    Ok(())
}

/// Refuses outputs that are inputs (a --corpus file, or a file under a --corpus directory) and
/// --tokenizer-config naming the --out file.
fn check_outputs(args: &BuildArgs) -> anyhow::Result<()> {
    let corpus: Vec<InputPath> = args
        .corpus
        .iter()
        .map(|p| InputPath::Tree("--corpus", p.clone()))
        .collect();
    refuse_output_among_inputs("--out", &args.out, &corpus)?;
    if let Some(config) = &args.tokenizer_config {
        refuse_output_among_inputs("--tokenizer-config", config, &corpus)?;
        if output::is_stdout(config) && output::is_stdout(&args.out) {
            bail!("--out - and --tokenizer-config -: only one of them can go to standard output");
        }
        let same = config == &args.out
            || std::fs::canonicalize(config)
                .is_ok_and(|c| std::fs::canonicalize(&args.out).is_ok_and(|o| o == c));
        if same && !output::is_stdout(config) {
            bail!(
                "--tokenizer-config {} is the --out file: give the tokenizer config its own \
                 path (e.g. tokenizer_config.json beside vocab.txt)",
                config.display()
            );
        }
    }
    Ok(())
}
