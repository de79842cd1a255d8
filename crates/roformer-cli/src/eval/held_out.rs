//! The default evaluation set: held-out documents, drawn and masked with the seed.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use roformer::data::Document;
use roformer::RoFormerTokenizer;

use super::{is_character, Masked, MlmArgs};

/// Draws `--max-docs` of the held-out documents (all with 0) and masks each: every character
/// token with probability `--mask-prob`, at least one per document. Documents from index
/// `originals` on are simplified copies. A document with no character token is left out.
///
/// # Errors
/// A tokenizer without mask token, `--seq-len` below 2.
pub(super) fn mask_documents(
    tokenizer: &RoFormerTokenizer,
    held_out: &[Document],
    originals: usize,
    args: &MlmArgs,
) -> anyhow::Result<Vec<Masked>> {
    let mask_id = tokenizer.mask_token_id()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut order: Vec<usize> = (0..held_out.len()).collect();
    order.shuffle(&mut rng);
    if args.max_docs > 0 {
        order.truncate(args.max_docs);
    }
    let mut masked = Vec::with_capacity(order.len());
    for &i in &order {
        let encoding = tokenizer.encode_truncated(&held_out[i].text, None, args.seq_len)?;
        let eligible: Vec<usize> = (0..encoding.len())
            .filter(|&p| is_character(&encoding.tokens[p]))
            .collect();
        if eligible.is_empty() {
            continue;
        }
        let mut chosen: Vec<usize> = eligible
            .iter()
            .copied()
            .filter(|_| rng.random::<f64>() < args.mask_prob)
            .collect();
        if chosen.is_empty() {
            chosen.push(eligible[rng.random_range(0..eligible.len())]);
        }
        let mut ids = encoding.ids;
        let targets = chosen
            .iter()
            .map(|&p| (p, std::mem::replace(&mut ids[p], mask_id)))
            .collect();
        let start: String = held_out[i].text.chars().take(20).collect();
        masked.push(Masked {
            ids,
            targets,
            copy: i >= originals,
            name: format!("the held-out document starting {start:?}"),
        });
    }
    Ok(masked)
}
