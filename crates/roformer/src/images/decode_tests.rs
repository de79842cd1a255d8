//! Decoding against Pillow's pixels, and every refusal: too many bytes, too many pixels, zero
//! sizes, truncated and corrupt files, other formats.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use image::codecs::png::PngEncoder;
use image::{ColorType, ImageEncoder};
use proptest::prelude::*;
use serde::Deserialize;

use super::*;

/// The image fixtures' folder.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images")
}

/// The bytes of fixture `name`.
fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap()
}

/// What Pillow decoded from a fixture (`decoded.json`): shape `[c, h, w]` and values.
#[derive(Deserialize)]
struct Decoded {
    shape: [usize; 3],
    values: Vec<u8>,
}

/// `decoded.json`.
fn pillow() -> HashMap<String, Decoded> {
    serde_json::from_slice(&fixture("decoded.json")).unwrap()
}

/// `bytes` with the IHDR size of a PNG replaced (the chunk's CRC is then wrong, which the
/// size checks must not need to see).
fn with_png_size(mut bytes: Vec<u8>, width: u32, height: u32) -> Vec<u8> {
    bytes[16..20].copy_from_slice(&width.to_be_bytes());
    bytes[20..24].copy_from_slice(&height.to_be_bytes());
    bytes
}

#[test]
fn pngs_decode_as_pillow_decodes_them() {
    let expected = pillow();
    for name in ["rgb.png", "grey.png", "rgba.png"] {
        let planes = decode_image(&fixture(name), &DecodeLimits::default()).unwrap();
        let want = &expected[name];
        let [c, h, w] = want.shape;
        assert_eq!(
            (planes.channels(), planes.height(), planes.width()),
            (c, h, w),
            "{name}"
        );
        assert_eq!(planes.data(), &want.values[..], "{name}");
    }
}

#[test]
fn jpegs_decode_close_to_pillow() {
    // Two JPEG decoders may differ by a level or two (IDCT and chroma upsampling rounding).
    let planes = decode_image(&fixture("rgb.jpg"), &DecodeLimits::default()).unwrap();
    let want = &pillow()["rgb.jpg"];
    assert_eq!(
        [planes.channels(), planes.height(), planes.width()],
        want.shape
    );
    let diffs: Vec<i32> = planes
        .data()
        .iter()
        .zip(&want.values)
        .map(|(&a, &b)| (i32::from(a) - i32::from(b)).abs())
        .collect();
    let max = diffs.iter().max().copied().unwrap_or(0);
    let mean = diffs.iter().sum::<i32>() as f64 / diffs.len() as f64;
    assert!(max <= 4 && mean < 0.5, "max {max}, mean {mean}");
}

#[test]
fn files_are_read_and_sized_first() {
    let path = fixtures().join("rgb.png");
    let planes = read_image(&path, &DecodeLimits::default()).unwrap();
    assert_eq!(planes.channels(), 3);
    let tight = DecodeLimits {
        max_bytes: 100,
        ..DecodeLimits::default()
    };
    assert!(matches!(
        read_image(&path, &tight),
        Err(DecodeError::TooManyBytes { limit: 100, .. })
    ));
    assert!(matches!(
        decode_image(&fixture("rgb.png"), &tight),
        Err(DecodeError::TooManyBytes { .. })
    ));
    assert!(matches!(
        read_image(&fixtures().join("missing.png"), &DecodeLimits::default()),
        Err(DecodeError::Io { .. })
    ));
}

#[test]
fn huge_and_empty_declarations_are_refused_before_decoding() {
    let huge = with_png_size(fixture("rgb.png"), 100_000, 100_000);
    assert!(matches!(
        decode_image(&huge, &DecodeLimits::default()),
        Err(DecodeError::TooManyPixels {
            width: 100_000,
            height: 100_000,
            ..
        })
    ));
    for (w, h) in [(0, 5), (5, 0), (0, 0)] {
        let empty = with_png_size(fixture("rgb.png"), w, h);
        assert!(matches!(
            decode_image(&empty, &DecodeLimits::default()),
            Err(DecodeError::Empty { .. })
        ));
    }
    // The pixel cap is the caller's: 24 x 32 = 768 pixels.
    let small = DecodeLimits {
        max_pixels: 767,
        ..DecodeLimits::default()
    };
    assert!(matches!(
        decode_image(&fixture("rgb.jpg"), &small),
        Err(DecodeError::TooManyPixels {
            width: 32,
            height: 24,
            limit: 767
        })
    ));
}

#[test]
fn a_decompression_bomb_is_refused() {
    // 6000 x 6000 black pixels: 36 MB decoded from a file of a few tens of KB.
    let mut bomb = Vec::new();
    let side = 6000;
    PngEncoder::new(&mut bomb)
        .write_image(
            &vec![0u8; side * side],
            side as u32,
            side as u32,
            ColorType::L8,
        )
        .unwrap();
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    assert!(matches!(
        decode_image(&bomb, &DecodeLimits::default()),
        Err(DecodeError::TooManyPixels { .. })
    ));
    // A header that understates the size cannot make the decoder write past it.
    let lying = with_png_size(bomb, 10, 10);
    assert!(decode_image(&lying, &DecodeLimits::default()).is_err());
}

#[test]
fn truncated_files_are_errors() {
    // Cuts that lose pixel data; a file missing only its end marker (PNG's 12-byte IEND
    // chunk, JPEG's 2-byte EOI) still holds the whole image and may decode.
    for (name, end) in [("rgb.png", 12), ("grey.png", 12), ("rgb.jpg", 2)] {
        let bytes = fixture(name);
        for cut in 0..bytes.len() - end {
            let result = decode_image(&bytes[..cut], &DecodeLimits::default());
            assert!(result.is_err(), "{name} cut at {cut} decoded");
        }
        // Cut in the middle of the pixel data: reported as truncated.
        let half = decode_image(&bytes[..bytes.len() / 2], &DecodeLimits::default());
        assert!(
            matches!(half, Err(DecodeError::Truncated)),
            "{name}: {half:?}"
        );
    }
}

#[test]
fn other_formats_are_refused() {
    assert!(matches!(
        decode_image(b"GIF89a\x01\x00\x01\x00", &DecodeLimits::default()),
        Err(DecodeError::UnsupportedFormat)
    ));
    assert!(matches!(
        decode_image(b"", &DecodeLimits::default()),
        Err(DecodeError::UnsupportedFormat)
    ));
}

proptest! {
    #[test]
    fn damaged_files_never_panic(
        name in prop_oneof![Just("rgb.png"), Just("rgb.jpg"), Just("grey.png")],
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = fixture(name);
        for (at, mask) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        // Some damage decodes (a flipped pixel value), most is refused; none panics.
        if let Ok(planes) = decode_image(&bytes, &DecodeLimits::default()) {
            prop_assert!(matches!(planes.channels(), 1 | 3));
        }
    }
}
