use super::*;
use crate::data::rng::{stream, Purpose};
use crate::tokenizer::{TokenizerConfig, Vocab};

const PAD: u32 = 0;
const UNK: u32 = 1;
const CLS: u32 = 2;
const SEP: u32 = 3;
const MASK: u32 = 4;
const VOCAB: u32 = 1000;

fn masker(whole_word: bool) -> Masker {
    let options = MaskingOptions {
        whole_word,
        ..MaskingOptions::default()
    };
    Masker::from_ids(options, MASK, &[PAD, UNK, CLS, SEP], VOCAB).unwrap()
}

/// `[CLS]`, 126 ordinary tokens (words of 1 to 4 tokens), `[SEP]`.
fn block(variant: u64) -> Block {
    let mut input_ids = vec![CLS];
    let mut word_ids = vec![0];
    let mut word = 1;
    while input_ids.len() < 127 {
        let len = 1 + ((variant + u64::from(word)) % 4) as usize;
        for _ in 0..len.min(127 - input_ids.len()) {
            input_ids.push(5 + (input_ids.len() as u32 * 7 + word) % (VOCAB - 5));
            word_ids.push(word);
        }
        word += 1;
    }
    input_ids.push(SEP);
    word_ids.push(word);
    Block {
        len: input_ids.len(),
        input_ids,
        word_ids,
    }
}

fn rng(i: u64) -> ChaCha8Rng {
    stream(42, Purpose::TrainMask, 0, i)
}

#[test]
fn token_masking_proportions() {
    // 2000 blocks of 126 candidates: exactly k = round(0.15 * 126) = 19 chosen per block, so
    // the chosen share is 19/126 = 15.08% (rounding moves it by at most 0.5/126 = 0.4%).
    // The 80/10/10 split over the 38000 chosen tokens is multinomial: standard deviations
    // sqrt(0.8 * 0.2 / 38000) = 0.2% and sqrt(0.1 * 0.9 / 38000) = 0.15%; a tolerance of 1%
    // is five sigma or more. A random replacement equal to the original (1 in 995) counts as
    // unchanged, a 0.01% shift.
    let masker = masker(false);
    let (mut candidates, mut chosen, mut masked, mut random, mut kept) = (0, 0, 0, 0, 0);
    for i in 0..2000 {
        let block = block(i);
        let out = masker.mask(&block, &mut rng(i));
        candidates += block.len - 2;
        let picked: Vec<usize> = (0..block.len)
            .filter(|&p| out.labels[p] != IGNORE_LABEL)
            .collect();
        assert_eq!(picked.len(), 19);
        chosen += picked.len();
        for p in picked {
            assert_eq!(out.labels[p], i64::from(block.input_ids[p]));
            match out.input_ids[p] {
                MASK => masked += 1,
                id if id == block.input_ids[p] => kept += 1,
                id => {
                    assert!(
                        (5..VOCAB).contains(&id),
                        "random replacement {id} is special"
                    );
                    random += 1;
                }
            }
        }
        for p in (0..block.len).filter(|&p| out.labels[p] == IGNORE_LABEL) {
            assert_eq!(out.input_ids[p], block.input_ids[p]);
        }
    }
    let share = |count: usize, of: usize| count as f64 / of as f64;
    assert!((share(chosen, candidates) - 0.15).abs() < 0.005);
    assert!(
        (share(masked, chosen) - 0.8).abs() < 0.01,
        "{masked}/{chosen}"
    );
    assert!(
        (share(random, chosen) - 0.1).abs() < 0.01,
        "{random}/{chosen}"
    );
    assert!((share(kept, chosen) - 0.1).abs() < 0.01, "{kept}/{chosen}");
}

#[test]
fn specials_and_padding_are_never_chosen() {
    // Short real parts full of specials, then padding.
    let input_ids = vec![CLS, 7, UNK, 8, MASK, SEP, 9, SEP, PAD, PAD, PAD, PAD];
    let block = Block {
        word_ids: (0..12).collect(),
        input_ids,
        len: 8,
    };
    for whole_word in [false, true] {
        let masker = masker(whole_word);
        for i in 0..500 {
            let out = masker.mask(&block, &mut rng(i));
            for p in [0, 2, 4, 5, 7, 8, 9, 10, 11] {
                assert_eq!(out.labels[p], IGNORE_LABEL);
                assert_eq!(out.input_ids[p], block.input_ids[p]);
            }
            // Three candidates: k = max(1, round(0.45)) = 1.
            let chosen = out.labels.iter().filter(|&&l| l != IGNORE_LABEL).count();
            assert_eq!(chosen, 1);
        }
    }
    let only_specials = Block {
        input_ids: vec![CLS, SEP, PAD],
        word_ids: vec![0, 1, 2],
        len: 2,
    };
    let out = masker(false).mask(&only_specials, &mut rng(0));
    assert!(out.labels.iter().all(|&l| l == IGNORE_LABEL));
}

#[test]
fn whole_word_masking_takes_every_token_of_a_chosen_word() {
    let masker = masker(true);
    let mut chosen_total = 0;
    for i in 0..500 {
        let block = block(i);
        let out = masker.mask(&block, &mut rng(i));
        let chosen: Vec<bool> = out.labels.iter().map(|&l| l != IGNORE_LABEL).collect();
        for a in 0..block.len {
            for b in a + 1..block.len {
                if block.word_ids[a] == block.word_ids[b] {
                    assert_eq!(chosen[a], chosen[b], "block {i}: word split at {a}, {b}");
                }
            }
        }
        let count = chosen.iter().filter(|&&c| c).count();
        assert!(count <= 19, "{count}");
        chosen_total += count;
    }
    // Words of 1..=4 tokens nearly always fill k = 19 exactly; allow a little undershoot.
    let share = chosen_total as f64 / (500.0 * 126.0);
    assert!((0.14..=0.151).contains(&share), "{share}");
}

#[test]
fn the_same_stream_gives_the_same_masks() {
    let masker = masker(false);
    let block = block(3);
    assert_eq!(
        masker.mask(&block, &mut rng(1)),
        masker.mask(&block, &mut rng(1))
    );
    assert_ne!(
        masker.mask(&block, &mut rng(1)),
        masker.mask(&block, &mut rng(2))
    );
}

#[test]
fn options_are_checked() {
    let bad = |options| Masker::from_ids(options, MASK, &[PAD], VOCAB).unwrap_err();
    let d = MaskingOptions::default();
    for probability in [0.0, -0.1, 1.5, f64::NAN] {
        let err = bad(MaskingOptions { probability, ..d });
        assert!(matches!(err, DataError::BadMasking(_)), "{err:?}");
    }
    let err = bad(MaskingOptions {
        mask_share: 0.95,
        random_share: 0.1,
        ..d
    });
    assert!(err.to_string().contains("sum <= 1"), "{err}");
    let err = Masker::from_ids(d, 1, &[0], 2).unwrap_err();
    assert!(matches!(err, DataError::NoRandomTokens), "{err:?}");
}

#[test]
fn a_tokenizer_masker_excludes_its_specials_and_shadowed_ids() {
    // "a" appears twice: id 5 is shadowed by id 7.
    let vocab = Vocab::from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a"]);
    let tokenizer = RoFormerTokenizer::new(vocab, TokenizerConfig::default()).unwrap();
    let masker = Masker::new(MaskingOptions::default(), &tokenizer).unwrap();
    assert_eq!(masker.random_ids, [6, 7]);
    assert!((0..5).all(|id| !masker.is_maskable(id)));
    assert!(masker.is_maskable(6));

    let no_mask = Vocab::from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"]);
    let tokenizer = RoFormerTokenizer::new(no_mask, TokenizerConfig::default()).unwrap();
    let err = Masker::new(MaskingOptions::default(), &tokenizer).unwrap_err();
    assert!(matches!(err, DataError::Tokenizer(_)), "{err:?}");
}
