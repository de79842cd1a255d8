//! `roformer eval mlm`: masked-character accuracy of a masked LM against two count-based
//! baselines, on the held-out documents of a corpus or on the couplets of the Three Hundred
//! Tang Poems.
//!
//! # What is masked
//! By default, held-out documents ([`held_out`]): the corpus is split as `train mlm` splits it
//! (by a hash of each document's text, the same `--validation` share; with `--also-simplified`
//! each simplified copy on its original's side). From the validation documents, `--max-docs`
//! are drawn (seeded); each is encoded as `[CLS] text [SEP]` (cut to `--seq-len` tokens), and
//! every *character* token (a single alphabetic character: a Chinese character, not
//! punctuation, not `[UNK]`) is masked with probability `--mask-prob` (at least one per
//! document), all replaced by `[MASK]`.
//!
//! With `--famous`, instead, the couplets of the Three Hundred Tang Poems (`--famous-file`,
//! see [`famous`]): each couplet is encoded alone as `[CLS] couplet [SEP]` with exactly one
//! character token masked (seeded), once in the file's script (traditional) and once in
//! simplified characters. `--max-docs` and `--mask-prob` do not apply. These poems are also in
//! the corpus, so this measures whether the model knows the famous poems, not how it
//! generalises.
//!
//! A masked character counts as a top-k hit when it is among the k best-ranked tokens there.
//!
//! # The baselines
//! Both are counted from the training documents of `--corpus` (never the evaluated text), as
//! token ids of `[CLS] text [SEP]`, and rank only the vocabulary's character tokens.
//!
//! *Unigram*: ignores context; it predicts the k most frequent characters at every mask.
//!
//! *Neighbour* ([`neighbour`]): a bigram model of the masked character given the tokens left
//! (`l`) and right (`r`) of the mask as the model sees them (`[CLS]`/`[SEP]` at the edges).
//! With `c(a, b)` the number of times token `b` directly follows token `a`,
//! `c(a.) = sum_b c(a, b)`, `c(x)` the count of token `x`, `N` the number of tokens, `V` the
//! vocabulary size and `k` = `--baseline-k` (add-k smoothing, default 0.1):
//!
//! ```text
//! score(x) = log P(x | l) + log P(r | x)
//! P(x | l) = (c(l, x) + k) / (c(l.) + k V)
//! P(r | x) = (c(x, r) + k) / (c(x.) + k V)
//! ```
//!
//! that is `log P(x, r | l)` of a first-order Markov chain, so the ranking is by
//! `P(x | l, r)`. A neighbour that is itself masked is unknown and backs off: a masked left
//! neighbour replaces `log P(x | l)` by the unigram `log P(x) = log((c(x) + k) / (N + k V))`;
//! a masked right neighbour drops `log P(r | x)` (summed over every `r` it is 1). With both
//! masked the score is the unigram's. Ties go to the lower id, as for the model.
//!
//! Logits that are not finite at a mask (weights that overflow f32) are an error naming the
//! document and the token: a NaN would otherwise rank as a plain miss.

mod agreement;
mod famous;
mod held_out;
mod masked;
mod model;
mod neighbour;
mod report;
mod score;

use std::path::PathBuf;

use anyhow::{bail, ensure};
use candle_core::Device;
use roformer::data::{read_corpus, split_documents, with_simplified, Document};
use roformer::{RoFormerForMaskedLM, RoFormerTokenizer};

use crate::default_model;
use crate::output::OutputArgs;
use crate::precision::PrecisionArg;
use agreement::Agreement;
use masked::{is_character, Masked};
use neighbour::{Counts, NeighbourModel};
use score::Part;

/// The evaluation commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Masked-character top-1 / top-5 accuracy on held-out documents (or, with --famous, on
    /// the Three Hundred Tang Poems), beside a unigram and a neighbour-bigram baseline.
    Mlm(MlmArgs),
}

/// Arguments of `roformer eval mlm`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("json", |a| a.help("One JSON object instead of the table")))]
pub struct MlmArgs {
    /// Checkpoint directory with a masked-LM head [default: the built-in poetry model]
    #[arg(long)]
    model: Option<PathBuf>,
    /// Corpus files or directories (format by extension, as `train mlm --format auto`); the
    /// baselines are counted from its training split, also with --famous.
    #[arg(long, num_args = 1.., required = true)]
    corpus: Vec<PathBuf>,
    /// Add simplified copies of the documents (as `train mlm --also-simplified`).
    #[arg(long)]
    also_simplified: bool,
    /// The validation share, as given to `train mlm`.
    #[arg(long, default_value_t = 0.05)]
    validation: f64,
    /// Held-out documents evaluated (drawn with --seed; 0: all). Not used with --famous.
    #[arg(long, default_value_t = 2000)]
    max_docs: usize,
    /// Share of the character tokens masked. Not used with --famous (one per couplet).
    #[arg(long, default_value_t = 0.15)]
    mask_prob: f64,
    /// Longest input, `[CLS]` and `[SEP]` included.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Documents per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Seed of the document draw and the masks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Add-k smoothing of the neighbour baseline's bigram counts (k > 0): P(x | l) =
    /// (c(l, x) + k) / (c(l.) + k V).
    #[arg(long, default_value_t = 0.1)]
    baseline_k: f64,
    /// Evaluate on the couplets of the Three Hundred Tang Poems (--famous-file) instead of
    /// the held-out documents: one character masked per couplet, in the file's script and in
    /// simplified characters.
    #[arg(long)]
    famous: bool,
    /// The Three Hundred Tang Poems in chinese-poetry's JSON layout (for --famous); the
    /// default is relative to the working directory (the repository root).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "data/chinese-poetry-2.0.1/dist/mengxue/tangshisanbaishou.json"
    )]
    famous_file: PathBuf,
    // `--json` (the help says what it prints).
    #[command(flatten)]
    stdout: OutputArgs,
    /// The precision of the encoder's matrix products: bf16 converts the weights once at load
    /// (f32 where the CPU has no native bf16 dot product).
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// With --precision bf16: also run the model in f32 on the same batches and report how
    /// often both rank the same token first at a mask, and the largest |logit difference|.
    #[arg(long)]
    against_f32: bool,
}

/// The baselines, counted from the training documents.
struct Baselines {
    /// Character ids by descending count (ties: lower id first).
    unigram: Vec<u32>,
    neighbour: NeighbourModel,
}

impl Baselines {
    /// The rank of `target` in the unigram ranking, when below 5.
    fn unigram_rank(&self, target: u32) -> Option<usize> {
        self.unigram.iter().take(5).position(|&id| id == target)
    }
}

/// Runs `roformer eval ...`.
///
/// # Errors
/// Bad arguments, unreadable corpora, famous file or model, a model without masked-LM head,
/// non-finite logits.
pub fn run(command: Command) -> anyhow::Result<()> {
    let Command::Mlm(args) = command;
    check_args(&args)?;
    // Read first what is quick to read and may be wrong, before the corpus.
    let couplets = if args.famous {
        Some(famous::read_couplets(&args.famous_file)?)
    } else {
        None
    };
    let tokenizer = default_model::tokenizer(args.model.as_deref())?;
    let mask_id = tokenizer.mask_token_id()?;
    let model = load_model(&args, args.precision)?;
    let reference = if args.against_f32 {
        Some(load_model(&args, PrecisionArg::F32)?)
    } else {
        None
    };

    let (train, held_out, originals) = split_corpus(&args)?;
    let masked = match &couplets {
        Some(couplets) => famous::mask_couplets(&tokenizer, couplets, args.seq_len, args.seed)?,
        None => {
            if held_out.is_empty() {
                bail!("no document fell in the validation share");
            }
            held_out::mask_documents(&tokenizer, &held_out, originals, &args)?
        }
    };
    drop(held_out);
    let baselines = count_baselines(&tokenizer, &train, args.baseline_k)?;
    drop(train);

    let pad = tokenizer.special_tokens().pad;
    let models = Models {
        model: &model,
        reference: reference.as_ref(),
    };
    let scores = score_all(models, &masked, &baselines, pad, mask_id, &args)?;
    report::print(&args, &tokenizer, &baselines.unigram, &scores)
}

/// Checks the arguments that clap does not.
fn check_args(args: &MlmArgs) -> anyhow::Result<()> {
    ensure!(
        (0.0..1.0).contains(&args.validation) && args.validation > 0.0,
        "--validation must be in (0, 1)"
    );
    ensure!(
        args.mask_prob > 0.0 && args.mask_prob <= 1.0,
        "--mask-prob must be in (0, 1]"
    );
    ensure!(
        args.baseline_k > 0.0 && args.baseline_k.is_finite(),
        "--baseline-k must be a finite number above 0 (add-k smoothing), not {}",
        args.baseline_k
    );
    ensure!(args.seq_len >= 3, "--seq-len must be at least 3");
    ensure!(args.batch_size >= 1, "--batch-size must be at least 1");
    ensure!(
        !args.against_f32 || args.precision == PrecisionArg::Bf16,
        "--against-f32 compares --precision bf16 with f32: give --precision bf16 with it"
    );
    Ok(())
}

/// The masked LM at `precision`, refused when the checkpoint has no masked-LM head.
fn load_model(args: &MlmArgs, precision: PrecisionArg) -> anyhow::Result<RoFormerForMaskedLM> {
    let dir = default_model::model_dir(args.model.as_deref())?;
    ensure!(
        dir.checkpoint.has_mlm_head(),
        "{} has no masked-LM head",
        default_model::describe(args.model.as_deref())
    );
    let precision = precision.resolve();
    Ok(dir
        .load::<RoFormerForMaskedLM>(&Device::Cpu, precision)?
        .model)
}

/// `(training documents, held-out documents, number of held-out originals)`: the held-out
/// originals come first, their simplified copies (with `--also-simplified`) after them.
fn split_corpus(args: &MlmArgs) -> anyhow::Result<(Vec<Document>, Vec<Document>, usize)> {
    let mut documents = Vec::new();
    for path in &args.corpus {
        documents.extend(read_corpus(path, None)?);
    }
    let (mut train, mut held_out) = split_documents(documents, args.validation);
    let originals = held_out.len();
    if args.also_simplified {
        train = with_simplified(train);
        held_out = with_simplified(held_out);
    }
    Ok((train, held_out, originals))
}

/// Counts both baselines from the training documents.
fn count_baselines(
    tokenizer: &RoFormerTokenizer,
    train: &[Document],
    k: f64,
) -> anyhow::Result<Baselines> {
    let counts = Counts::from_documents(tokenizer, train);
    let candidates: Vec<u32> = (0..tokenizer.vocab_size() as u32)
        .filter(|&id| tokenizer.id_to_token(id).is_some_and(is_character))
        .collect();
    let unigram = counts.ranking(&candidates);
    ensure!(
        !unigram.is_empty(),
        "the training documents have no character"
    );
    let neighbour = NeighbourModel::new(&counts, k, tokenizer.vocab_size(), candidates);
    Ok(Baselines { unigram, neighbour })
}

/// The model evaluated, and with `--against-f32` the same model in f32.
#[derive(Clone, Copy)]
struct Models<'a> {
    model: &'a RoFormerForMaskedLM,
    reference: Option<&'a RoFormerForMaskedLM>,
}

/// What `score_all` measured.
struct Scores {
    /// The texts as read.
    original: Part,
    /// Their simplified copies (`--also-simplified`).
    copies: Part,
    /// With `--against-f32`: the model against its f32 self.
    against_f32: Option<Agreement>,
}

/// Scores the model and both baselines at every mask, and with `--against-f32` compares the
/// model's logits there with f32's.
fn score_all(
    models: Models,
    masked: &[Masked],
    baselines: &Baselines,
    pad: u32,
    mask_id: u32,
    args: &MlmArgs,
) -> anyhow::Result<Scores> {
    let (mut original, mut copies) = (Part::default(), Part::default());
    let mut against_f32 = models.reference.map(|_| Agreement::default());
    for chunk in masked.chunks(args.batch_size) {
        let rows = model::mask_logits(models.model, chunk, pad)?;
        if let (Some(reference), Some(agreement)) = (models.reference, against_f32.as_mut()) {
            let reference_rows = model::mask_logits(reference, chunk, pad)?;
            for (a, b) in rows.iter().zip(&reference_rows) {
                agreement.add(a, b);
            }
        }
        let mut rows = rows.iter();
        for item in chunk {
            let part = if item.copy {
                &mut copies
            } else {
                &mut original
            };
            part.documents += 1;
            for &(position, target) in &item.targets {
                let row = rows.next().map_or(&[][..], Vec::as_slice);
                part.model.add(model::rank(row, target));
                part.unigram.add(baselines.unigram_rank(target));
                let context = item.context(position, mask_id);
                part.neighbour
                    .add(baselines.neighbour.rank(context, target));
            }
        }
    }
    Ok(Scores {
        original,
        copies,
        against_f32,
    })
}
