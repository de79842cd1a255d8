//! Parity with transformers' `DINOv3ViTModel` on the committed fixtures
//! (`scripts/make_dinov3_fixtures.py`): `last_hidden_state` and `pooler_output` for images of
//! the config's size, non-square ones, grids other than the config's, leftover pixels on both
//! axes and a single patch; with and without registers, with either MLP, with every bias on
//! and off.
//!
//! Tolerance: 1e-4 absolute on the normed outputs (O(1)). Both sides compute in f32 and differ
//! by summation order and by the cos/sin of the rotation (f64 angles rounded once here, f32
//! angles there: about 1e-6), which two layers grow to about 1e-5. A loading, layout or
//! rotation mistake moves outputs by O(1).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use roformer::vision::{VisionModel, VisionModelDir};
use roformer::Mode;
use test_support::max_abs_diff;

const TOL: f64 = 1e-4;
const CASES: [&str; 4] = ["base", "registers_gated", "no_bias", "small_heads"];

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vision")
        .join(case)
}

fn reference(case: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(case).join("reference.safetensors"), &Device::Cpu)
        .unwrap()
}

/// Every input of `case` through `model` against transformers' outputs; the largest
/// difference.
fn check(case: &str, model: &VisionModel, what: &str) -> f64 {
    let r = reference(case);
    let mut worst = 0f64;
    for i in 0.. {
        let Some(pixels) = r.get(&format!("pixel_values_{i}")) else {
            assert!(i >= 4, "{case}: {i} inputs");
            break;
        };
        let out = model.forward(pixels, model.plan(Mode::Inference)).unwrap();
        for (name, ours) in [
            ("last_hidden_state", &out.last_hidden_state),
            ("pooler_output", &out.pooler_output),
        ] {
            let theirs = &r[&format!("{name}_{i}")];
            assert_eq!(ours.dims(), theirs.dims(), "{case} {name}_{i}");
            let diff = max_abs_diff(ours, theirs);
            assert!(
                diff <= TOL,
                "{case} {what} {name}_{i} {:?}: {diff}",
                pixels.dims()
            );
            worst = worst.max(diff);
        }
    }
    eprintln!("{case} ({what}): max |diff| = {worst:e}");
    worst
}

/// The fused CPU path (f32) on every fixture.
#[test]
fn vision_parity_with_transformers_dinov3() {
    for case in CASES {
        let dir = VisionModelDir::open(&fixture(case)).unwrap();
        let loaded = dir.load_model(DType::F32, &Device::Cpu).unwrap();
        // transformers' checkpoints hold the (zero) mask token, and an empty register table
        // when there are no registers: tolerated, unread.
        assert!(
            loaded.unused.iter().all(|n| n.starts_with("embeddings.")),
            "{:?}",
            loaded.unused
        );
        check(case, &loaded.model, "f32 fused");
    }
}

/// The candle-op path (f64 weights) on every fixture: the reference matches too.
#[test]
fn vision_parity_of_the_reference_path() {
    for case in CASES {
        let dir = VisionModelDir::open(&fixture(case)).unwrap();
        let model = dir.load_model(DType::F64, &Device::Cpu).unwrap().model;
        check(case, &model, "f64 ops");
    }
}
