//! Parity with the reference implementations on the committed fixtures
//! (`scripts/make_roformer_fixtures.py`): transformers 5 for RoFormer, JunnYu's `roformer`
//! package for RoFormer-V2.
//!
//! Tolerance: 1e-4 absolute on hidden states (O(1) after the final norm) and logits (O(10)).
//! Both sides compute in f32; they differ by summation order in matrix products (gemm here,
//! PyTorch's BLAS there) and by the erf/tanh/exp implementations, each about 1e-7 relative,
//! which two layers and a head grow to about 1e-5 at most. A loading or layout mistake moves
//! outputs by O(1).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use roformer::{
    Activation, Architecture, HeadModel, ModelDir, Precision, RoFormerForMaskedLM,
    RoFormerForSequenceClassification, RoFormerForTokenClassification, RoFormerModel,
};
use test_support::max_abs_diff;

const TOL: f64 = 1e-4;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model")
        .join(case)
}

fn reference(case: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(case).join("reference.safetensors"), &Device::Cpu)
        .unwrap()
}

fn assert_close(case: &str, what: &str, ours: &Tensor, theirs: &Tensor) {
    let diff = max_abs_diff(ours, theirs);
    eprintln!("{case} {what}: max |diff| = {diff:e}");
    assert!(diff <= TOL, "{case} {what}: max |diff| = {diff}");
}

/// The inputs of a reference file, in the order `forward` takes them.
struct Inputs {
    ids: Tensor,
    types: Option<Tensor>,
    mask: Option<Tensor>,
}

fn inputs(r: &HashMap<String, Tensor>) -> Inputs {
    Inputs {
        ids: r["input_ids"].clone(),
        types: r.get("token_type_ids").cloned(),
        mask: r.get("attention_mask").cloned(),
    }
}

/// The model of fixture `case`, loaded in f32.
fn load<M: Architecture>(case: &str) -> M {
    let dir = ModelDir::open(&fixture(case)).unwrap();
    dir.load::<M>(&Device::Cpu, Precision::F32).unwrap().model
}

fn check_base(case: &str) {
    let r = reference(case);
    let i = inputs(&r);
    let model = load::<RoFormerModel>(case);
    let h = model
        .forward(&i.ids, i.types.as_ref(), i.mask.as_ref(), None)
        .unwrap();
    assert_close(case, "last_hidden_state", &h, &r["last_hidden_state"]);
}

fn check_mlm(case: &str) {
    let r = reference(case);
    let i = inputs(&r);
    let model = load::<RoFormerForMaskedLM>(case);
    let out = model
        .forward(&i.ids, i.types.as_ref(), i.mask.as_ref(), None)
        .unwrap();
    assert_close(
        case,
        "last_hidden_state",
        &out.last_hidden_state,
        &r["last_hidden_state"],
    );
    assert_close(case, "logits", &out.logits, &r["logits"]);
}

#[test]
fn masked_lm_with_padding_and_token_types() {
    check_mlm("mlm_gelu");
}

#[test]
fn bare_model_factorised_embeddings_rotary_value() {
    let dir = ModelDir::open(&fixture("base_factorised_rotary_value")).unwrap();
    assert!(!dir.checkpoint.is_prefixed());
    assert_ne!(dir.config.embedding_size, dir.config.hidden_size);
    assert!(dir.config.rotary_value);
    check_base("base_factorised_rotary_value");
}

#[test]
fn masked_lm_from_pickle() {
    let dir = ModelDir::open(&fixture("mlm_pickle_relu")).unwrap();
    assert_eq!(dir.checkpoint.format(), roformer::Format::Pickle);
    check_mlm("mlm_pickle_relu");
}

#[test]
fn longer_than_max_position_embeddings() {
    let r = reference("base_long_silu");
    let dir = ModelDir::open(&fixture("base_long_silu")).unwrap();
    assert!(r["input_ids"].dim(1).unwrap() > dir.config.max_position_embeddings);
    check_base("base_long_silu");
}

#[test]
fn decoder_is_causal() {
    check_base("decoder");
}

#[test]
fn sequence_classification() {
    let case = "seq_cls";
    let r = reference(case);
    let i = inputs(&r);
    let model = load::<RoFormerForSequenceClassification>(case);
    let out = model
        .forward(&i.ids, i.types.as_ref(), i.mask.as_ref(), None)
        .unwrap();
    assert_eq!(out.logits.dims(), &[3, 3]);
    assert_close(
        case,
        "last_hidden_state",
        &out.last_hidden_state,
        &r["last_hidden_state"],
    );
    assert_close(case, "logits", &out.logits, &r["logits"]);
}

#[test]
fn token_classification() {
    let case = "token_cls";
    let r = reference(case);
    let i = inputs(&r);
    let model = load::<RoFormerForTokenClassification>(case);
    let out = model
        .forward(&i.ids, i.types.as_ref(), i.mask.as_ref(), None)
        .unwrap();
    assert_eq!(out.logits.dims(), &[3, 10, 5]);
    assert_close(
        case,
        "last_hidden_state",
        &out.last_hidden_state,
        &r["last_hidden_state"],
    );
    assert_close(case, "logits", &out.logits, &r["logits"]);
}

#[test]
fn roformer_v2_masked_lm() {
    let dir = ModelDir::open(&fixture("v2_mlm")).unwrap();
    assert_eq!(dir.config.norm_type, roformer::NormType::RmsNorm);
    assert!(!dir.config.use_bias);
    check_mlm("v2_mlm");
}

#[test]
fn roformer_v2_bare_model_from_pickle() {
    check_base("v2_base_pickle");
}

/// Every activation against transformers' `ACT2FN` on a grid over [-30, 30]. Values reach 30,
/// so the bound is relative: 1e-5 of max(1, |y|) (f32 rounding plus erf/tanh implementation
/// differences).
#[test]
fn activations_match_transformers() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model/activations.safetensors");
    let t = candle_core::safetensors::load(path, &Device::Cpu).unwrap();
    let x = &t["x"];
    let mut checked = 0;
    for name in Activation::known_names() {
        let expected = &t[name];
        let ours = Activation::parse("hidden_act", name)
            .unwrap()
            .forward(x)
            .unwrap();
        let ours: Vec<f32> = ours.to_vec1().unwrap();
        let theirs: Vec<f32> = expected.to_vec1().unwrap();
        for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let tol = 1e-5 * b.abs().max(1.0);
            assert!((a - b).abs() <= tol, "{name} at index {k}: {a} vs {b}");
        }
        checked += 1;
    }
    assert_eq!(checked, t.len() - 1, "every fixture activation is known");
}

/// Left padding with explicit `position_ids` gives the same hidden states for the real tokens
/// as the unpadded sequence in transformers' reference (whose positions start at 0).
#[test]
fn position_ids_make_left_padding_exact() {
    let case = "mlm_gelu";
    let r = reference(case);
    let model = load::<RoFormerModel>(case);
    // Row 1 of the reference has 7 real tokens then 3 padding; move the padding to the left.
    let ids: Vec<i64> = r["input_ids"].get(1).unwrap().to_vec1().unwrap();
    let types: Vec<i64> = r["token_type_ids"].get(1).unwrap().to_vec1().unwrap();
    let (n, pad) = (7usize, 3usize);
    let mut left_ids = vec![0i64; pad];
    left_ids.extend_from_slice(&ids[..n]);
    let mut left_types = vec![0i64; pad];
    left_types.extend_from_slice(&types[..n]);
    let mask: Vec<i64> = (0..n + pad).map(|i| i64::from(i >= pad)).collect();
    let positions: Vec<i64> = (0..n + pad).map(|i| i.saturating_sub(pad) as i64).collect();
    let row = |v: Vec<i64>| Tensor::from_vec(v, (1, n + pad), &Device::Cpu).unwrap();
    let h = model
        .forward(
            &row(left_ids),
            Some(&row(left_types)),
            Some(&row(mask)),
            Some(&row(positions)),
        )
        .unwrap();
    let ours = h.narrow(1, pad, n).unwrap();
    let theirs = r["last_hidden_state"]
        .narrow(0, 1, 1)
        .unwrap()
        .narrow(1, 0, n)
        .unwrap();
    assert_close(case, "left-padded real tokens", &ours, &theirs);
}

/// Default positions are `0..seq`: passing them explicitly changes nothing, and shifting every
/// position by the same offset changes no attention score (RoPE is relative), so the outputs
/// stay the same too.
#[test]
fn explicit_default_and_shifted_positions_agree() {
    let case = "base_long_silu";
    let r = reference(case);
    let i = inputs(&r);
    let model = load::<RoFormerModel>(case);
    let (b, t) = i.ids.dims2().unwrap();
    let default = model.forward(&i.ids, None, i.mask.as_ref(), None).unwrap();
    for offset in [0u32, 1000] {
        let pos: Vec<u32> = (0..b)
            .flat_map(|_| (0..t as u32).map(|p| p + offset))
            .collect();
        let pos = Tensor::from_vec(pos, (b, t), &Device::Cpu).unwrap();
        let h = model
            .forward(&i.ids, None, i.mask.as_ref(), Some(&pos))
            .unwrap();
        // Offset 1000 changes rounding of the angles only (f64 angles, rounded once).
        assert_close(case, &format!("positions + {offset}"), &h, &default);
    }
}

/// f16 and bf16 weights run and stay near the f32 reference (loose bounds: a half-precision
/// model is not a parity target, this checks the dtypes flow through every op).
#[test]
fn half_precision_runs() {
    let case = "mlm_gelu";
    let r = reference(case);
    let i = inputs(&r);
    for (dtype, tol) in [(DType::F16, 0.05), (DType::BF16, 0.3)] {
        let model = ModelDir::open(&fixture(case))
            .unwrap()
            .load_as::<RoFormerModel>(dtype, &Device::Cpu)
            .unwrap()
            .model;
        let h = model
            .forward(&i.ids, i.types.as_ref(), i.mask.as_ref(), None)
            .unwrap();
        assert_eq!(h.dtype(), dtype);
        let diff = max_abs_diff(&h, &r["last_hidden_state"]);
        assert!(diff < tol, "{dtype:?}: {diff}");
    }
}
