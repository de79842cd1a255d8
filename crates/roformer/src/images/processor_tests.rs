//! The processor against transformers' `DINOv3ViTImageProcessor` (fixtures from
//! `scripts/make_image_fixtures.py`), and every refusal of the config.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::*;
use crate::images::decode::{read_image, DecodeLimits};

/// The processor fixtures' folder.
fn cases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images/processor")
}

/// `pixel_values.json`: the image it came from, its shape `[c, h, w]` and values.
#[derive(Deserialize)]
struct PixelValues {
    image: String,
    shape: [usize; 3],
    values: Vec<f32>,
}

#[test]
fn pixel_values_match_transformers() {
    for name in ["shrink", "enlarge", "grey_crop", "rgba_plain"] {
        let dir = cases().join(name);
        let processor = ImageProcessor::from_path(&dir).unwrap();
        let want: PixelValues =
            serde_json::from_slice(&std::fs::read(dir.join("pixel_values.json")).unwrap()).unwrap();
        let image_path = cases().join("..").join(&want.image);
        let image = read_image(&image_path, &DecodeLimits::default()).unwrap();
        let got = processor.preprocess(&image).unwrap();
        assert_eq!(
            [got.channels(), got.height(), got.width()],
            want.shape,
            "{name}"
        );
        // f32 rounding of the resize, amplified by 1 / std (at most 4 here).
        let diff = test_support::max_abs_diff(got.data(), &want.values[..]);
        assert!(diff <= 2e-5, "{name}: {diff}");
    }
}

#[test]
fn the_shipped_config_parses_to_the_defaults() {
    // As a DINOv3 checkpoint's preprocessor_config.json reads (transformers 4.56 wrote the
    // Fast class and every field, nulls included).
    let shipped = r#"{
        "crop_size": null, "data_format": "channels_first", "default_to_square": true,
        "device": null, "disable_grouping": null, "do_center_crop": null,
        "do_convert_rgb": null, "do_normalize": true, "do_rescale": true, "do_resize": true,
        "image_mean": [0.485, 0.456, 0.406], "image_processor_type": "DINOv3ViTImageProcessorFast",
        "image_std": [0.229, 0.224, 0.225], "input_data_format": null, "resample": 2,
        "rescale_factor": 0.00392156862745098, "return_tensors": null,
        "size": {"height": 224, "width": 224}
    }"#;
    assert_eq!(
        ImageProcessor::from_json(shipped).unwrap(),
        ImageProcessor::default()
    );
    assert_eq!(
        ImageProcessor::from_json("{}").unwrap(),
        ImageProcessor::default()
    );
    let image = Planes::new(1, 30, 40, vec![128u8; 1200]).unwrap();
    let pixels = ImageProcessor::default().preprocess(&image).unwrap();
    assert_eq!(
        (pixels.channels(), pixels.height(), pixels.width()),
        (3, 224, 224)
    );
    let red = (128.0 / 255.0 - 0.485) / 0.229;
    assert!((pixels.data()[0] - red).abs() < 1e-5);
}

#[test]
fn sizes_take_every_form() {
    let parse = |json: &str| ImageProcessor::from_json(json).unwrap().resize;
    assert_eq!(
        parse(r#"{"size": 32}"#),
        Some(ResizeTo::Exact {
            height: 32,
            width: 32
        })
    );
    assert_eq!(
        parse(r#"{"size": [20, 30]}"#),
        Some(ResizeTo::Exact {
            height: 20,
            width: 30
        })
    );
    assert_eq!(
        parse(r#"{"size": 32, "default_to_square": false}"#),
        Some(ResizeTo::ShortestEdge(32))
    );
    assert_eq!(
        parse(r#"{"do_resize": false, "size": {"longest_edge": 3}}"#),
        None
    );
    // Shorter edge 16: 30 x 20 -> trunc(16 * 30 / 20) = 24 x 16; 7 x 9 -> 16 x trunc(20.57).
    let to = ResizeTo::ShortestEdge(16);
    assert_eq!(to.output(30, 20), (24, 16));
    assert_eq!(to.output(7, 9), (16, 20));
    assert_eq!(to.output(5, 5), (16, 16));
}

#[test]
fn grey_and_rgb_follow_the_statistics() {
    let processor = |json: &str| ImageProcessor::from_json(json).unwrap();
    assert_eq!(
        processor(r#"{"image_mean": [0.5], "image_std": [0.5]}"#).channels,
        Some(Channels::Grey)
    );
    assert_eq!(
        processor(r#"{"image_mean": 0.5, "image_std": 0.5}"#).channels,
        None
    );
    assert_eq!(processor(r#"{"do_normalize": false}"#).channels, None);
    assert_eq!(
        processor(r#"{"do_normalize": false, "do_convert_rgb": true}"#).channels,
        Some(Channels::Rgb)
    );
    // A grey model fed a colour image gets its luma.
    let grey = processor(r#"{"image_mean": [0.0], "image_std": [1.0], "do_resize": false}"#);
    let rgb = Planes::new(3, 1, 1, vec![255u8, 0, 0]).unwrap();
    let out = grey.preprocess(&rgb).unwrap();
    assert_eq!(out.data(), &[76.0 / 255.0]);
    // A single number applies to every channel.
    let scalar = processor(r#"{"image_mean": 1.0, "image_std": 2.0, "do_resize": false}"#);
    let out = scalar.preprocess(&rgb).unwrap();
    assert_eq!(out.data(), &[0.0, -0.5, -0.5]);
}

#[test]
fn unsupported_options_are_named() {
    let refused = |json: &str| match ImageProcessor::from_json(json) {
        Err(ConfigError::Unsupported { field, .. }) => field,
        other => panic!("{json}: {other:?}"),
    };
    assert_eq!(refused(r#"{"resample": 3}"#), "resample");
    assert_eq!(refused(r#"{"do_pad": true}"#), "do_pad");
    assert_eq!(
        refused(r#"{"data_format": "channels_last"}"#),
        "data_format"
    );
    assert_eq!(
        refused(r#"{"image_processor_type": "CLIPImageProcessor"}"#),
        "image_processor_type"
    );
    assert_eq!(
        refused(r#"{"size": {"shortest_edge": 8, "longest_edge": 9}}"#),
        "size"
    );
    // An unknown field is a parse error naming it.
    let err = ImageProcessor::from_json(r#"{"crop_pct": 0.9}"#).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Json(_)) && err.to_string().contains("crop_pct"),
        "{err}"
    );
}

#[test]
fn invalid_values_are_named() {
    let invalid = |json: &str| match ImageProcessor::from_json(json) {
        Err(ConfigError::Invalid { field, .. }) => field,
        other => panic!("{json}: {other:?}"),
    };
    assert_eq!(invalid(r#"{"size": {"height": 0, "width": 3}}"#), "size");
    assert_eq!(invalid(r#"{"size": {"height": 3}}"#), "size");
    assert_eq!(invalid(r#"{"size": [1, 2, 3]}"#), "size");
    assert_eq!(invalid(r#"{"do_center_crop": true}"#), "crop_size");
    assert_eq!(
        invalid(r#"{"do_center_crop": true, "crop_size": {"shortest_edge": 3}}"#),
        "crop_size"
    );
    assert_eq!(invalid(r#"{"rescale_factor": 0}"#), "rescale_factor");
    assert_eq!(invalid(r#"{"image_std": [1, 0, 1]}"#), "image_std");
    assert_eq!(invalid(r#"{"image_std": [1]}"#), "image_std");
    assert_eq!(invalid(r#"{"image_mean": [1, 2]}"#), "image_mean");
    assert_eq!(
        invalid(r#"{"image_mean": [0.5], "image_std": [0.5], "do_convert_rgb": true}"#),
        "image_mean"
    );
    assert!(ImageProcessor::from_json("[").is_err());
    assert!(matches!(
        ImageProcessor::from_path(Path::new("/nonexistent/dir")),
        Err(ConfigError::Io { .. })
    ));
}

#[test]
fn empty_images_are_refused() {
    let empty = Planes::new(3, 0, 4, Vec::<u8>::new()).unwrap();
    assert!(matches!(
        ImageProcessor::default().preprocess(&empty),
        Err(ImageError::Empty { .. })
    ));
}
