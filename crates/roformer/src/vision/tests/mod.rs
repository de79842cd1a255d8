//! Tests of the vision model: each fast path against its reference, gradients against finite
//! differences, the config's checks, the loader's reports, saving and loading back.
//! (Parity with transformers is `tests/vision_parity.rs`, on the committed fixtures.)

mod absolute;
mod blocks;
mod config;
mod gradients;
mod load;
mod model;
mod patch;
mod rope;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
pub(crate) use test_support::{max_abs, max_abs_diff as max_diff};

use crate::vision::config::{PositionKind, VisionConfig};
use crate::vision::init::initialise;
use crate::vision::model::VisionForImageClassification;
use crate::vision::tensors::VisionKind;

/// A tiny config (hidden 16, 2 heads of 8, 2 layers, patches of 4 over 2 channels, an 8x12
/// training image, 2 registers, every bias, 3 labels) with the position kind `kind`, and
/// `extra` JSON fields (`"key": value, ...`, or empty) replacing or adding to those.
pub(crate) fn tiny(kind: PositionKind, extra: &str) -> VisionConfig {
    let base = format!(
        r#"{{"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 24, "patch_size": 4, "num_channels": 2,
            "image_size": [8, 12], "num_register_tokens": 2, "num_labels": 3,
            "layerscale_value": 0.7, "key_bias": true,
            "position_embedding_type": "{}"}}"#,
        kind.as_str()
    );
    let mut json: serde_json::Value = serde_json::from_str(&base).expect("the base");
    let extra: serde_json::Value =
        serde_json::from_str(&format!("{{{extra}}}")).expect("extra fields");
    if let (Some(to), Some(from)) = (json.as_object_mut(), extra.as_object()) {
        to.extend(from.clone());
    }
    VisionConfig::from_json_str(&json.to_string()).expect("a valid tiny config")
}

/// Every position kind.
pub(crate) const KINDS: [PositionKind; 5] = [
    PositionKind::RopeAxial,
    PositionKind::RopeMixed,
    PositionKind::RopeFlat,
    PositionKind::Absolute,
    PositionKind::None,
];

/// Uniform values in `[-2, 2)` of shape `dims` (f32), seeded.
pub(crate) fn random(dims: &[usize], seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).expect("a tensor")
}

/// A classifier for `cfg` on a fresh map, in `dtype`, with seeded values (the layer norms
/// and biases perturbed away from 1 and 0, so that every parameter matters).
pub(crate) fn classifier(
    cfg: &VisionConfig,
    dtype: DType,
    seed: u64,
) -> (VisionForImageClassification, VarMap) {
    let varmap = VarMap::new();
    initialise(
        &varmap,
        cfg,
        VisionKind::ImageClassification,
        seed,
        dtype,
        &Device::Cpu,
    )
    .expect("initial values");
    perturb(&varmap, seed);
    let vb = VarBuilder::from_varmap(&varmap, dtype, &Device::Cpu);
    let model = VisionForImageClassification::load(vb, cfg).expect("a model");
    (model, varmap)
}

/// Adds seeded noise (uniform, spread 0.2) to every variable of `varmap` but RoPE-Mixed's
/// frequencies (structured values), after widening the matrices five times, so that norms,
/// biases and layer scales move away from their constants.
fn perturb(varmap: &VarMap, seed: u64) {
    let vars = varmap.data().lock().expect("the map");
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    for (i, name) in names.into_iter().enumerate() {
        let var = &vars[name];
        if name.ends_with("rope_freqs") {
            continue;
        }
        let dtype = var.dtype();
        let noise = (random(var.dims(), seed * 1000 + i as u64) * 0.1).expect("noise");
        let noise = noise.to_dtype(dtype).expect("noise");
        let base = if var.dims().len() >= 2 {
            (var.as_tensor() * 5.0).expect("wider")
        } else {
            var.as_tensor().clone()
        };
        var.set(&(base + noise).expect("value")).expect("set");
    }
}

/// A copy of `varmap`'s values in `dtype`, as a classifier for `cfg`.
pub(crate) fn converted(
    cfg: &VisionConfig,
    varmap: &VarMap,
    dtype: DType,
) -> (VisionForImageClassification, VarMap) {
    let copy = VarMap::new();
    {
        let from = varmap.data().lock().expect("the map");
        let mut to = copy.data().lock().expect("the copy");
        for (name, var) in from.iter() {
            let value = var.as_tensor().to_dtype(dtype).expect("converted");
            to.insert(
                name.clone(),
                candle_core::Var::from_tensor(&value).expect("a var"),
            );
        }
    }
    let vb = VarBuilder::from_varmap(&copy, dtype, &Device::Cpu);
    let model = VisionForImageClassification::load(vb, cfg).expect("a model");
    (model, copy)
}
