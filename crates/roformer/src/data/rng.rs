//! Seeded random streams for shuffling and masking, reproducible bit for bit.
//!
//! Every random decision comes from a ChaCha8 stream keyed by `(seed, purpose, a, b)` and
//! is drawn with [`below`] and [`unit`], which use nothing but `next_u64`: the values depend
//! on ChaCha8 alone (a fixed algorithm), not on how a version of `rand` maps bits to ranges.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a stream is for; part of its key, so that streams of different purposes never
/// coincide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Purpose {
    /// The block order of an epoch: key `(seed, Order, epoch, 0)`.
    Order = 1,
    /// The masks of a training block: key `(seed, TrainMask, epoch, block)`.
    TrainMask = 2,
    /// The masks of an evaluation block: key `(seed, EvalMask, 0, block)`.
    EvalMask = 3,
    /// The validation cut of an image training set of `n` examples (`images::fashion_mnist`):
    /// key `(seed, ValidationCut, n, 0)`.
    ValidationCut = 4,
    /// The image side of a training batch (`images::batch`): key `(seed, ImageSize, step, 0)`.
    ImageSize = 5,
    /// The augmentation of one image of a training batch (`images::batch`): key
    /// `(seed, ImageAugment, step, position in the batch)`.
    ImageAugment = 6,
    /// The example order of an image training epoch (`images::batch`): key
    /// `(seed, ImageOrder, epoch, 0)`.
    ImageOrder = 7,
}

/// The ChaCha8 stream of key `(seed, purpose, a, b)`: its 32-byte seed is the four numbers'
/// little-endian bytes, in that order.
pub(crate) fn stream(seed: u64, purpose: Purpose, a: u64, b: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    for (chunk, word) in key.chunks_exact_mut(8).zip([seed, purpose as u64, a, b]) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

/// A number in `0..n` (0 when `n` is 0): `floor(next_u64 * n / 2^64)`. Its bias is below
/// `n / 2^64`, nothing for the sizes used here.
pub(crate) fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    ((u128::from(rng.next_u64()) * n as u128) >> 64) as usize
}

/// A number in `[0, 1)`: the top 53 bits of `next_u64` divided by `2^53`.
pub(crate) fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Fisher-Yates shuffle from the back: for `i` from `len - 1` down to 1, swap `items[i]` with
/// `items[below(i + 1)]`.
pub(crate) fn shuffle<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i + 1);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_keyed_by_all_four_numbers() {
        let first = |seed, purpose, a, b| stream(seed, purpose, a, b).next_u64();
        let base = first(7, Purpose::Order, 1, 2);
        assert_eq!(base, first(7, Purpose::Order, 1, 2));
        assert_ne!(base, first(8, Purpose::Order, 1, 2));
        assert_ne!(base, first(7, Purpose::TrainMask, 1, 2));
        assert_ne!(base, first(7, Purpose::Order, 2, 2));
        assert_ne!(base, first(7, Purpose::Order, 1, 3));
        assert_ne!(
            first(0, Purpose::Order, 1, 2),
            first(0, Purpose::Order, 2, 1)
        );
    }

    #[test]
    fn draws_are_in_range_and_shuffles_are_permutations() {
        let mut rng = stream(1, Purpose::Order, 0, 0);
        for n in [1, 2, 3, 10, 1000] {
            for _ in 0..100 {
                assert!(below(&mut rng, n) < n);
            }
        }
        assert_eq!(below(&mut rng, 0), 0);
        let u = unit(&mut rng);
        assert!((0.0..1.0).contains(&u));
        let mut items: Vec<usize> = (0..100).collect();
        shuffle(&mut items, &mut rng);
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }
}
