use super::*;
use crate::data::masking::{MaskingOptions, IGNORE_LABEL};

const SEQ: usize = 22;

/// Block `b`: `[CLS]`, 20 distinct ids `1000 b + 5 ..`, `[SEP]`; odd blocks carry only 10
/// real ids and padding, so that attention masks differ.
fn blocks(n: usize) -> Vec<Block> {
    (0..n)
        .map(|b| {
            let real = if b % 2 == 0 { 20 } else { 10 };
            let mut input_ids = vec![2];
            input_ids.extend((0..real).map(|i| (1000 * b + 5 + i) as u32));
            input_ids.push(3);
            let len = input_ids.len();
            input_ids.resize(SEQ, 0);
            Block {
                input_ids,
                word_ids: (0..SEQ as u32).collect(),
                len,
            }
        })
        .collect()
}

fn batches(n: usize, batch_size: usize, seed: u64) -> MlmBatches {
    let masker = Masker::from_ids(MaskingOptions::default(), 4, &[0, 1, 2, 3], 100_000).unwrap();
    MlmBatches::new(blocks(n), batch_size, seed, masker).unwrap()
}

/// The block of each row, read back from an unmasked position or a label.
fn rows(batch: &MlmBatch) -> Vec<usize> {
    (0..batch.batch)
        .map(|r| {
            let original = |i: usize| match batch.labels[r * batch.seq + i] {
                IGNORE_LABEL => i64::from(batch.input_ids[r * batch.seq + i]),
                label => label,
            };
            (original(1) / 1000) as usize
        })
        .collect()
}

#[test]
fn a_batch_is_a_pure_function_of_seed_and_step() {
    let a = batches(10, 4, 7);
    let b = batches(10, 4, 7);
    let fifth = a.batch(5);
    // Other steps asked for first, in another order, on another instance: same batch.
    for step in [9, 0, 3] {
        b.batch(step);
    }
    assert_eq!(b.batch(5), fifth);
    assert_eq!(a.batch(5), fifth);
    assert_ne!(batches(10, 4, 8).batch(5), fifth);
}

#[test]
fn each_epoch_visits_every_block_once_in_a_new_order() {
    let data = batches(10, 4, 1);
    // Five steps of 4 rows: samples 0..20, i.e. epochs 0 and 1 (step 2 straddles them).
    let seen: Vec<usize> = (0..5).flat_map(|step| rows(&data.batch(step))).collect();
    let (first, second) = seen.split_at(10);
    let sorted = |part: &[usize]| {
        let mut part = part.to_vec();
        part.sort_unstable();
        part
    };
    assert_eq!(sorted(first), (0..10).collect::<Vec<_>>());
    assert_eq!(sorted(second), (0..10).collect::<Vec<_>>());
    assert_ne!(first, second);
    assert_eq!(first, data.order(0).as_slice());
    assert_eq!(data.epoch_of(2), 0);
    assert_eq!(data.epoch_of(3), 1);
}

#[test]
fn masks_change_from_epoch_to_epoch() {
    // One block per batch: step e is block 0 in epoch e.
    let data = batches(1, 1, 3);
    let labels: Vec<Vec<i64>> = (0..4).map(|step| data.batch(step).labels).collect();
    assert!(labels.windows(2).all(|pair| pair[0] != pair[1]));
    assert_eq!(data.batch(2).labels, labels[2]);
}

#[test]
fn rows_are_laid_out_with_masks_and_types() {
    let data = batches(6, 3, 11);
    let batch = data.batch(0);
    assert_eq!((batch.batch, batch.seq), (3, SEQ));
    for v in [
        &batch.input_ids,
        &batch.attention_mask,
        &batch.token_type_ids,
    ] {
        assert_eq!(v.len(), 3 * SEQ);
    }
    assert_eq!(batch.labels.len(), 3 * SEQ);
    assert!(batch.token_type_ids.iter().all(|&t| t == 0));
    for (r, block) in rows(&batch).into_iter().enumerate() {
        let real = if block % 2 == 0 { 22 } else { 12 };
        let mask = &batch.attention_mask[r * SEQ..(r + 1) * SEQ];
        assert!(mask[..real].iter().all(|&m| m == 1));
        assert!(mask[real..].iter().all(|&m| m == 0));
        let labels = &batch.labels[r * SEQ..(r + 1) * SEQ];
        let chosen = labels.iter().filter(|&&l| l != IGNORE_LABEL).count();
        // round(0.15 * 20) = 3, round(0.15 * 10) = 2 (1.5 rounds away from zero).
        assert_eq!(chosen, if block % 2 == 0 { 3 } else { 2 });
    }
}

#[test]
fn evaluation_batches_cover_all_blocks_in_order_with_fixed_masks() {
    let data = batches(7, 3, 5);
    let eval = data.eval_batches();
    assert_eq!(eval.len(), 3);
    let first: Vec<MlmBatch> = eval.collect();
    assert_eq!(first.iter().map(|b| b.batch).collect::<Vec<_>>(), [3, 3, 1]);
    let order: Vec<usize> = first.iter().flat_map(rows).collect();
    assert_eq!(order, (0..7).collect::<Vec<_>>());
    let again: Vec<MlmBatch> = data.eval_batches().collect();
    assert_eq!(first, again);
}

#[test]
fn bad_arguments() {
    let masker = Masker::from_ids(MaskingOptions::default(), 4, &[0, 1, 2, 3], 100).unwrap();
    let err = MlmBatches::new(blocks(2), 0, 0, masker.clone()).unwrap_err();
    assert!(matches!(err, DataError::ZeroBatchSize), "{err:?}");
    let err = MlmBatches::new(Vec::new(), 2, 0, masker.clone()).unwrap_err();
    assert!(err.to_string().contains("no block"), "{err}");
    let mut ragged = blocks(3);
    ragged[2].input_ids.pop();
    let err = MlmBatches::new(ragged, 2, 0, masker).unwrap_err();
    assert!(err.to_string().contains("block 2"), "{err}");
}
