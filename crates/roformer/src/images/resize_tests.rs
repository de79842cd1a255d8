//! Resizing against PyTorch's golden values (`scripts/make_image_fixtures.py`) and its
//! properties: identity at the same size, constants kept, outputs inside the input's range.

use std::path::Path;

use proptest::prelude::*;
use serde::Deserialize;

use super::*;

/// One input of `resize.json`.
#[derive(Deserialize)]
struct Input {
    shape: [usize; 3],
    values: Vec<f32>,
}

/// One golden resize of `resize.json`.
#[derive(Deserialize)]
struct Case {
    input: String,
    height: usize,
    width: usize,
    antialias: bool,
    output: Vec<f32>,
}

/// `resize.json`: inputs by name, then the cases.
#[derive(Deserialize)]
struct Golden {
    inputs: std::collections::HashMap<String, Input>,
    cases: Vec<Case>,
}

#[test]
fn resizes_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images/resize.json");
    let golden: Golden = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(golden.cases.len(), 20);
    for case in &golden.cases {
        let input = &golden.inputs[&case.input];
        let [c, h, w] = input.shape;
        let planes = Planes::new(c, h, w, input.values.clone()).unwrap();
        let resample = if case.antialias {
            Resample::BilinearAntialiased
        } else {
            Resample::Bilinear
        };
        let out = resize(&planes, case.height, case.width, resample).unwrap();
        assert_eq!(
            (out.channels(), out.height(), out.width()),
            (c, case.height, case.width)
        );
        // Values in [0, 1]; f32 sums of a few products differ from PyTorch's by rounding only.
        let diff = test_support::max_abs_diff(out.data(), &case.output[..]);
        assert!(
            diff <= 2e-6,
            "{} -> {}x{} antialias {}: {diff}",
            case.input,
            case.height,
            case.width,
            case.antialias
        );
    }
}

#[test]
fn empty_sizes_are_refused() {
    let image = Planes::new(1, 2, 2, vec![0.0; 4]).unwrap();
    assert!(matches!(
        resize(&image, 0, 3, Resample::Bilinear),
        Err(ImageError::Empty {
            height: 0,
            width: 3,
            ..
        })
    ));
    let empty = Planes::new(1, 0, 4, vec![]).unwrap();
    assert!(resize(&empty, 3, 3, Resample::BilinearAntialiased).is_err());
}

#[test]
fn enlarging_is_the_same_with_and_without_antialiasing() {
    let image = Planes::new(1, 3, 4, (0..12).map(|v| (v * v) as f32 / 100.0).collect()).unwrap();
    let plain = resize(&image, 7, 9, Resample::Bilinear).unwrap();
    let smooth = resize(&image, 7, 9, Resample::BilinearAntialiased).unwrap();
    assert!(test_support::max_abs_diff(plain.data(), smooth.data()) < 1e-6);
}

/// An image of `c x h x w` values in `[-5, 5]`.
fn image() -> impl Strategy<Value = Planes<f32>> {
    (1usize..=3, 1usize..=9, 1usize..=9).prop_flat_map(|(c, h, w)| {
        prop::collection::vec(-5.0f32..5.0, c * h * w)
            .prop_map(move |data| Planes::new(c, h, w, data).unwrap())
    })
}

/// Either filter.
fn resample() -> impl Strategy<Value = Resample> {
    prop_oneof![
        Just(Resample::Bilinear),
        Just(Resample::BilinearAntialiased)
    ]
}

proptest! {
    #[test]
    fn the_same_size_is_the_identity(image in image(), resample in resample()) {
        let out = resize(&image, image.height(), image.width(), resample).unwrap();
        prop_assert_eq!(out, image);
    }

    #[test]
    fn a_constant_stays_constant(
        value in -100.0f32..100.0,
        (h, w, oh, ow) in (1usize..12, 1usize..12, 1usize..30, 1usize..30),
        resample in resample(),
    ) {
        let image = Planes::new(2, h, w, vec![value; 2 * h * w]).unwrap();
        let out = resize(&image, oh, ow, resample).unwrap();
        for &v in out.data() {
            prop_assert!((v - value).abs() <= 1e-5 * value.abs().max(1.0), "{} vs {}", v, value);
        }
    }

    #[test]
    fn outputs_stay_within_the_input_range(
        image in image(),
        (oh, ow) in (1usize..25, 1usize..25),
        resample in resample(),
    ) {
        let out = resize(&image, oh, ow, resample).unwrap();
        for c in 0..image.channels() {
            let plane = image.plane(c);
            let lo = plane.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = plane.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for &v in out.plane(c) {
                prop_assert!(v >= lo - 1e-5 && v <= hi + 1e-5, "{} outside [{}, {}]", v, lo, hi);
            }
        }
    }
}
