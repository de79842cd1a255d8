//! `roformer vision forward` on the committed DINOv3 fixtures
//! (crates/roformer/tests/fixtures/vision, made by scripts/make_dinov3_fixtures.py from
//! transformers), and its bad-input errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use test_support::max_abs_diff;

use crate::common::roformer;
use test_support::Scratch;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../roformer/tests/fixtures/vision")
        .join(case)
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-cli-vision", name)
}

fn run(model: &Path, input: &Path, output: &Path) -> std::process::Output {
    roformer(&[
        "vision",
        "forward",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ])
}

fn save(path: &Path, tensors: &[(&str, Tensor)]) {
    let map: HashMap<String, Tensor> = tensors
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    candle_core::safetensors::save(&map, path).unwrap();
}

/// A non-square image whose sides leave pixels past the last whole patch, with registers and
/// a gated MLP: both outputs within 1e-4 of transformers (see the library's parity test).
#[test]
fn vision_forward_matches_transformers() {
    let dir = scratch("parity");
    let case = fixture("registers_gated");
    let r =
        candle_core::safetensors::load(case.join("reference.safetensors"), &Device::Cpu).unwrap();
    let (input, output) = (dir.join("pixels.safetensors"), dir.join("out.safetensors"));
    save(&input, &[("pixel_values", r["pixel_values_1"].clone())]);
    let out = run(&case, &input, &output);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = candle_core::safetensors::load(&output, &Device::Cpu).unwrap();
    assert_eq!(got["last_hidden_state"].dtype(), DType::F32);
    assert!(max_abs_diff(&got["last_hidden_state"], &r["last_hidden_state_1"]) <= 1e-4);
    assert!(max_abs_diff(&got["pooler_output"], &r["pooler_output_1"]) <= 1e-4);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("pooler_output [1, 32]"), "{stdout}");
}

/// Wrong rank, wrong channels, an image smaller than a patch, a NaN, no pixel_values, not a
/// safetensors file: each a clear error, never a panic.
#[test]
fn vision_forward_refuses_bad_pixels_clearly() {
    let dir = scratch("bad");
    let case = fixture("base");
    let cpu = &Device::Cpu;
    let mut nan = vec![0f32; 3 * 8 * 8];
    nan[70] = f32::NAN;
    let zeros = |dims: &[usize]| Tensor::zeros(dims, DType::F32, cpu).unwrap();
    let nan = Tensor::from_vec(nan, (1, 3, 8, 8), cpu).unwrap();
    let cases = [
        (
            "rank",
            "pixel_values",
            zeros(&[3, 8, 8]),
            "[batch, channels, height, width]",
        ),
        (
            "channels",
            "pixel_values",
            zeros(&[1, 1, 8, 8]),
            "1 channels, the model takes 3",
        ),
        (
            "small",
            "pixel_values",
            zeros(&[1, 3, 3, 8]),
            "smaller than one 4x4 patch",
        ),
        (
            "nan",
            "pixel_values",
            nan,
            "[batch, channel, y, x] = [0, 1, 0, 6]",
        ),
        (
            "missing",
            "pixels",
            zeros(&[1, 3, 8, 8]),
            "no pixel_values tensor",
        ),
    ];
    for (case_name, tensor_name, tensor, says) in cases {
        let input = dir.join(format!("{case_name}.safetensors"));
        save(&input, &[(tensor_name, tensor)]);
        let out = run(&case, &input, &dir.join("out.safetensors"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case_name} succeeded");
        assert!(
            stderr.contains("error") && stderr.contains(says),
            "{case_name}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{case_name}: {stderr}");
    }
    let text = dir.join("not.safetensors");
    std::fs::write(&text, "hello").unwrap();
    let out = run(&case, &text, &dir.join("out.safetensors"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a safetensors file"));
    assert!(!dir.join("out.safetensors").exists());
}
