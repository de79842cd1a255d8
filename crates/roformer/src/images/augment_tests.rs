//! Each augmentation step on its own, determinism, and the validation of settings.

use proptest::prelude::*;

use super::*;
use crate::data::rng::{stream, Purpose};

/// A `1 x 28 x 28` image with values `(y * 28 + x) / 784` (distinct, in `[0, 1)`).
fn ramp() -> Planes<f32> {
    Planes::new(1, 28, 28, (0..784).map(|i| i as f32 / 784.0).collect()).unwrap()
}

/// A stream for test `n`.
fn rng(n: u64) -> ChaCha8Rng {
    stream(1, Purpose::ImageAugment, n, 0)
}

#[test]
fn no_augmentation_only_normalises() {
    let image = ramp();
    let out = Augmentation::none(28)
        .apply(&image, 28, &[0.5], &[0.25], &mut rng(0))
        .unwrap();
    for (o, i) in out.data().iter().zip(image.data()) {
        assert!((o - (i - 0.5) / 0.25).abs() < 1e-6);
    }
    let small = Augmentation::none(20)
        .apply(&image, 20, &[0.0], &[1.0], &mut rng(0))
        .unwrap();
    let direct = resize(&image, 20, 20, Resample::Bilinear).unwrap();
    assert_eq!(small, direct);
}

#[test]
fn translations_shift_by_at_most_the_padding() {
    let image = ramp();
    let shift = Augmentation {
        crop: Crop::Translate { pad: 3 },
        ..Augmentation::none(28)
    };
    let mut seen = std::collections::HashSet::new();
    for n in 0..200 {
        let out = shift
            .apply(&image, 28, &[0.0], &[1.0], &mut rng(n))
            .unwrap();
        let found = (-3..=3)
            .flat_map(|dy| (-3..=3).map(move |dx| (dy, dx)))
            .find(|&(dy, dx)| window(&image, dy, dx, 28, 28, 0.0).unwrap() == out);
        seen.insert(found.expect("a shift within the padding"));
    }
    assert_eq!(seen.len(), 49, "every shift of -3..=3 on both axes occurs");
}

#[test]
fn flips_and_erasing_do_what_they_say() {
    let image = ramp();
    let flip = Augmentation {
        flip: 1.0,
        ..Augmentation::none(28)
    };
    let out = flip.apply(&image, 28, &[0.0], &[1.0], &mut rng(0)).unwrap();
    assert_eq!(out, flip_horizontal(&image));

    let erasing = Erasing {
        probability: 1.0,
        area: (0.1, 0.1),
        ratio: (1.0, 1.0),
    };
    let erase = Augmentation {
        erasing: Some(erasing),
        ..Augmentation::none(28)
    };
    // Shift values away from 0 so that erased pixels are the only zeros.
    let out = erase
        .apply(&image, 28, &[-1.0], &[1.0], &mut rng(5))
        .unwrap();
    let zeros: Vec<usize> = (0..784).filter(|&i| out.data()[i] == 0.0).collect();
    // sqrt(78.4) = 8.85 rounds to a 9 x 9 square.
    assert_eq!(zeros.len(), 81);
    let rows: std::collections::BTreeSet<usize> = zeros.iter().map(|i| i / 28).collect();
    let cols: std::collections::BTreeSet<usize> = zeros.iter().map(|i| i % 28).collect();
    assert_eq!((rows.len(), cols.len()), (9, 9));
}

#[test]
fn draws_are_deterministic() {
    let recipe = Augmentation::fashion_mnist();
    let image = ramp();
    let a = recipe
        .apply(&image, 36, &[0.3], &[0.35], &mut rng(7))
        .unwrap();
    let b = recipe
        .apply(&image, 36, &[0.3], &[0.35], &mut rng(7))
        .unwrap();
    let c = recipe
        .apply(&image, 36, &[0.3], &[0.35], &mut rng(8))
        .unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!((a.height(), a.width()), (36, 36));
}

#[test]
fn settings_are_validated() {
    assert!(Augmentation::fashion_mnist().validate().is_ok());
    assert!(Augmentation::none(28).validate().is_ok());
    let field = |a: Augmentation| match a.validate() {
        Err(ConfigError::Invalid { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let base = Augmentation::fashion_mnist;
    assert_eq!(
        field(Augmentation {
            sizes: vec![],
            ..base()
        }),
        "sizes"
    );
    assert_eq!(
        field(Augmentation {
            sizes: vec![28, 0],
            ..base()
        }),
        "sizes"
    );
    assert_eq!(
        field(Augmentation {
            flip: 1.5,
            ..base()
        }),
        "flip"
    );
    let crop = |scale, ratio| Augmentation {
        crop: Crop::ResizedCrop {
            pad: 0,
            scale,
            ratio,
        },
        ..base()
    };
    assert_eq!(field(crop((0.9, 0.5), (1.0, 1.0))), "crop.scale");
    assert_eq!(field(crop((0.0, 0.5), (1.0, 1.0))), "crop.scale");
    assert_eq!(field(crop((0.5, 1.0), (0.0, 1.0))), "crop.ratio");
    let erase = |probability, area| Augmentation {
        erasing: Some(Erasing {
            probability,
            area,
            ratio: (1.0, 1.0),
        }),
        ..base()
    };
    assert_eq!(field(erase(-0.1, (0.1, 0.2))), "erasing.probability");
    assert_eq!(field(erase(0.5, (0.1, f64::NAN))), "erasing.area");
}

proptest! {
    #[test]
    fn resized_crop_boxes_fit(
        (h, w) in (1usize..40, 1usize..40),
        lo in 0.05f64..1.0,
        (r0, r1) in (0.2f64..1.0, 1.0f64..5.0),
        n in any::<u64>(),
    ) {
        let (top, left, bh, bw) = resized_crop_box(h, w, (lo, 1.0), (r0, r1), &mut rng(n));
        prop_assert!(bh >= 1 && bw >= 1 && top + bh <= h && left + bw <= w);
    }

    #[test]
    fn the_recipe_keeps_values_finite(n in any::<u64>(), side in prop::sample::select(vec![20usize, 28, 56])) {
        let out = Augmentation::fashion_mnist().apply(&ramp(), side, &[0.286], &[0.353], &mut rng(n)).unwrap();
        prop_assert_eq!(out.data().len(), side * side);
        prop_assert!(out.data().iter().all(|v| v.is_finite()));
    }
}
