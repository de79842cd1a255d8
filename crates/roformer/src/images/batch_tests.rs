//! Batches on the committed Fashion-MNIST subset.

use super::*;
use crate::images::fashion_mnist::{load_split, Part};

/// The subset's training part (250 images).
fn subset() -> Split {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/images/fashion-mnist");
    load_split(&dir, Part::Train).unwrap()
}

#[test]
fn evaluation_batches_are_normalised_images() {
    let split = subset();
    let builder = BatchBuilder::new(Augmentation::none(28), Channels::Grey, 0).unwrap();
    let batch = builder.eval_batch(&split, &[3, 1], 28).unwrap();
    assert_eq!((batch.batch, batch.channels, batch.side), (2, 1, 28));
    assert_eq!(
        batch.labels,
        vec![u32::from(split.labels()[3]), u32::from(split.labels()[1])]
    );
    let pixel = split.image(3).unwrap()[400];
    let want = (f32::from(pixel) / 255.0 - MEAN) / STD;
    assert!((batch.pixels[400] - want).abs() < 1e-6);
    let large = builder.eval_batch(&split, &[0, 1, 2], 56).unwrap();
    assert_eq!(large.pixels.len(), 3 * 56 * 56);
    assert!(matches!(
        builder.eval_batch(&split, &[0], 0),
        Err(DatasetError::Image(_))
    ));
}

#[test]
fn rgb_batches_repeat_the_grey_plane() {
    let split = subset();
    let builder = BatchBuilder::new(Augmentation::fashion_mnist(), Channels::Rgb, 4).unwrap();
    let batch = builder.train_batch(&split, &[10, 20], 3).unwrap();
    let area = batch.side * batch.side;
    assert_eq!(batch.channels, 3);
    for image in batch.pixels.chunks_exact(3 * area) {
        assert_eq!(image[..area], image[area..2 * area]);
        assert_eq!(image[..area], image[2 * area..]);
    }
}

#[test]
fn training_batches_are_a_function_of_seed_step_and_indices() {
    let split = subset();
    let builder = BatchBuilder::new(Augmentation::fashion_mnist(), Channels::Grey, 9).unwrap();
    let indices: Vec<usize> = (0..16).collect();
    let a = builder.train_batch(&split, &indices, 5).unwrap();
    assert_eq!(a, builder.train_batch(&split, &indices, 5).unwrap());
    assert_ne!(
        a.pixels,
        builder.train_batch(&split, &indices, 6).unwrap().pixels
    );
    // Each image depends on its position, not on the rest of the batch (nor on threads).
    let first = builder.train_batch(&split, &indices[..1], 5).unwrap();
    assert_eq!(first.pixels[..], a.pixels[..a.side * a.side]);
    // Every side of the recipe comes up, and only those.
    let sides: std::collections::BTreeSet<usize> = (0..200)
        .map(|step| builder.train_batch(&split, &[0], step).unwrap().side)
        .collect();
    assert_eq!(
        sides.into_iter().collect::<Vec<_>>(),
        Augmentation::fashion_mnist().sizes
    );
    assert!(matches!(
        builder.train_batch(&split, &[250], 0),
        Err(DatasetError::OutOfRange { requested: 250, .. })
    ));
}

#[test]
fn epochs_are_seeded_permutations() {
    let order = epoch_order(100, 1, 0);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    assert_eq!(order, epoch_order(100, 1, 0));
    assert_ne!(order, epoch_order(100, 1, 1));
    assert_ne!(order, epoch_order(100, 2, 0));
}

#[test]
fn bad_statistics_are_refused() {
    assert!(BatchBuilder::with_stats(Augmentation::none(28), Channels::Grey, 0, 0.3, 0.0).is_err());
    assert!(
        BatchBuilder::with_stats(Augmentation::none(28), Channels::Grey, 0, f32::NAN, 1.0).is_err()
    );
    assert!(BatchBuilder::new(Augmentation::none(0), Channels::Grey, 0).is_err());
}
