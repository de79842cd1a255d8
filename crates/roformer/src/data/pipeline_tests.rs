//! The whole pipeline on the full chinese-poetry package (ignored tests: they need
//! `scripts/fetch_chinese_poetry.sh`).

use std::path::Path;

use super::*;
use crate::tokenizer::RoFormerTokenizer;

/// The whole pipeline on the full package: split, vocabulary, tokens, blocks, a batch
/// (ignored: needs the download; prints sizes and times, asserts no timing).
#[test]
#[ignore = "needs scripts/fetch_chinese_poetry.sh"]
fn the_full_package_goes_through_the_pipeline() {
    let poems = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/chinese-poetry/poems");
    let clock = std::time::Instant::now();
    let (train, valid) = split_documents(read_corpus(&poems, None).unwrap(), 0.01);
    eprintln!(
        "{} train, {} valid, {:?}",
        train.len(),
        valid.len(),
        clock.elapsed()
    );
    let options = VocabOptions::new(12_000);
    let built = build_vocab(&train, &options).unwrap();
    eprintln!("{:?}, {:?}", built.stats, clock.elapsed());
    let tokenizer = RoFormerTokenizer::new(built.vocab(), options.config.clone()).unwrap();
    let docs = tokenize_documents(&tokenizer, &train);
    let tokens: usize = docs.iter().map(TokenizedDoc::len).sum();
    eprintln!("{tokens} tokens, {:?}", clock.elapsed());
    let blocks = pack_blocks(&docs, 128, tokenizer.special_tokens()).unwrap();
    let masker = Masker::new(MaskingOptions::default(), &tokenizer).unwrap();
    let batches = MlmBatches::new(blocks, 32, 0, masker).unwrap();
    let batch = batches.batch(123_456);
    assert_eq!(batch.input_ids.len(), 32 * 128);
    eprintln!("{} blocks, {:?}", batches.num_blocks(), clock.elapsed());
}
