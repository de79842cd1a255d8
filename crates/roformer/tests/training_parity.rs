//! Gradient parity with transformers (`scripts/make_training_fixtures.py`): on small random
//! checkpoints, transformers computed the training loss and `backward()`; our loss and the
//! gradient of every parameter must match.
//!
//! Tolerance: each parameter's gradient within 1e-4 relative, measured as
//! `max |ours - theirs| / max |theirs|` over the tensor. Both sides run in f32 with all dropout
//! probabilities 0; the fixture's manifest records how far transformers' own f32 gradients are
//! from its f64 ones (at most about 1e-6 relative): summation order alone moves a gradient by
//! that much, so 1e-4 leaves two orders of margin, while a missing term (a gradient stopped by
//! an op without backward, a missed tie, a wrong dropout or norm) moves it by O(1).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use roformer::train::{build_trainable, classification_loss, mlm_loss, BatchInputs};
use roformer::{
    Dropout, Mode, ModelDir, Precision, RoFormerForMaskedLM, RoFormerForSequenceClassification,
};

const TOL: f32 = 1e-4;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/training")
        .join(case)
}

fn read(dir: &Path, file: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join(file), &Device::Cpu).unwrap()
}

fn manifest(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The names of a manifest list of strings, or of objects with a `name`.
fn names(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| p.get("name").unwrap_or(p).as_str().unwrap().to_string())
        .collect()
}

fn relative_error(ours: &Tensor, theirs: &Tensor) -> f32 {
    let diff = (ours - theirs)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let scale = theirs
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    diff / scale.max(f32::MIN_POSITIVE)
}

struct Inputs {
    ids: Tensor,
    types: Tensor,
    mask: Tensor,
    labels: Tensor,
}

fn inputs(dir: &Path) -> Inputs {
    let mut t = read(dir, "inputs.safetensors");
    let mut take = |k: &str| t.remove(k).unwrap_or_else(|| panic!("inputs lack {k}"));
    Inputs {
        ids: take("input_ids"),
        types: take("token_type_ids"),
        mask: take("attention_mask"),
        labels: take("labels"),
    }
}

/// Compares the loss and every parameter's gradient with the fixture's.
fn check_gradients(dir: &Path, loss: &Tensor, params: &roformer::train::Params) {
    let expected = read(dir, "expected.safetensors");
    let want_loss = expected["loss"].to_dtype(DType::F32).unwrap();
    let got = loss.to_scalar::<f32>().unwrap();
    let want = want_loss.flatten_all().unwrap().to_vec1::<f32>().unwrap()[0];
    assert!(
        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
        "loss {got} vs transformers {want}"
    );
    let grads = loss.backward().unwrap();
    let manifest = manifest(dir);
    // Trainable parameters only: RoFormer's sinusoidal table is a frozen parameter there and
    // recomputed here.
    let frozen = self::names(&manifest["frozen"]);
    let names: Vec<String> = names(&manifest["parameters"])
        .into_iter()
        .filter(|n| !frozen.contains(n))
        .collect();
    // Gradients that are 0 in exact arithmetic (BERT's key bias: softmax ignores a constant
    // added to a row) are f32 noise on both sides: compared absolutely, against 1e-5 (their
    // size in the fixture is about 1e-7).
    let zero = self::names(&manifest["grads_zero_in_exact_arithmetic"]);
    let ours: Vec<&str> = params.vars().iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted_ours = ours.clone();
    sorted_ours.sort_unstable();
    let mut sorted_theirs: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted_theirs.sort_unstable();
    assert_eq!(sorted_ours, sorted_theirs, "parameter sets differ");
    for name in &names {
        let var = params.get(name).unwrap();
        let grad = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient reached {name}"));
        let theirs = &expected[&format!("grad.{name}")];
        if zero.contains(name) {
            let size = grad
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(size <= 1e-5, "{name}: should be ~0, is {size}");
            continue;
        }
        let err = relative_error(grad, theirs);
        assert!(err <= TOL, "{name}: gradient relative error {err}");
    }
}

fn mlm_case(case: &str) {
    let dir = fixture(case);
    let md = ModelDir::open(&dir).unwrap();
    let t =
        build_trainable::<RoFormerForMaskedLM>(&md.config, Some(&md.checkpoint), 0, &Device::Cpu)
            .unwrap();
    assert!(t.initialised.is_empty(), "{:?}", t.initialised);
    let i = inputs(&dir);
    let labels = i.labels.flatten_all().unwrap().to_vec1::<i64>().unwrap();
    let dropout = Dropout::disabled();
    let out = mlm_loss(
        &t.model,
        BatchInputs {
            input_ids: &i.ids,
            token_type_ids: Some(&i.types),
            attention_mask: Some(&i.mask),
        },
        &labels,
        Mode::Train {
            dropout: &dropout,
            precision: Precision::F32,
        },
    )
    .unwrap();
    check_gradients(&dir, &out.loss, &t.params);
}

#[test]
fn mlm_rotary_gradients_match_transformers() {
    mlm_case("mlm_rotary");
}

#[test]
fn mlm_rotary_value_gradients_match_transformers() {
    mlm_case("mlm_rotary_value");
}

#[test]
fn mlm_factorised_embedding_gradients_match_transformers() {
    mlm_case("mlm_factorised");
}

#[test]
fn roformer_v2_gradients_match_reference() {
    mlm_case("mlm_v2");
}

#[test]
fn bert_gradients_match_transformers() {
    mlm_case("bert_mlm");
}

#[test]
fn sequence_classification_gradients_match_transformers() {
    let dir = fixture("seq_cls");
    let md = ModelDir::open(&dir).unwrap();
    let t = build_trainable::<RoFormerForSequenceClassification>(
        &md.config,
        Some(&md.checkpoint),
        0,
        &Device::Cpu,
    )
    .unwrap();
    let i = inputs(&dir);
    let labels: Vec<u32> = i
        .labels
        .to_vec1::<i64>()
        .unwrap()
        .iter()
        .map(|&l| l as u32)
        .collect();
    let dropout = Dropout::disabled();
    let out = classification_loss(
        &t.model,
        BatchInputs {
            input_ids: &i.ids,
            token_type_ids: Some(&i.types),
            attention_mask: Some(&i.mask),
        },
        &labels,
        Mode::Train {
            dropout: &dropout,
            precision: Precision::F32,
        },
    )
    .unwrap();
    check_gradients(&dir, &out.loss, &t.params);
}

/// The logits of the inference path (fused where it applies) agree with transformers' too,
/// for BERT (absolute positions) included.
#[test]
fn bert_forward_matches_transformers() {
    use roformer::HeadModel;
    let dir = fixture("bert_mlm");
    let model = ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let i = inputs(&dir);
    let out = model
        .forward(&i.ids, Some(&i.types), Some(&i.mask), None)
        .unwrap();
    let expected = read(&dir, "expected.safetensors");
    let diff = (&out.logits - &expected["logits"])
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff <= TOL, "BERT logits differ by {diff}");
}
