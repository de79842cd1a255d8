//! Seeded initial values of a fresh vision model, as transformers' DINOv3 `_init_weights`
//! sets them, written into a [`VarMap`] so that a model built on it trains from them:
//!
//! - dense and patch weights, the CLS and register tokens, an absolute table, the classifier's
//!   weight: `N(0, initializer_range^2)` (transformers truncates at 2 absolute, which for its
//!   0.02 never binds);
//! - biases 0, layer-norm weights 1, layer scales `layerscale_value`;
//! - RoPE-Mixed's frequencies: [`mixed_frequencies`] (Heo et al.'s magnitudes, a direction per
//!   layer and head).
//!
//! Each random tensor draws from its own ChaCha8 stream keyed by the seed and its name (without
//! `dinov3_vit.`), so that the backbone starts the same alone or under a head, and adding a
//! tensor shifts no other.
//!
//! ```
//! use candle_core::{DType, Device, Tensor};
//! use candle_nn::{VarBuilder, VarMap};
//! use roformer::vision::{init, VisionConfig, VisionForImageClassification, VisionKind};
//! use roformer::{Dropout, Mode, Precision};
//!
//! let cfg = VisionConfig::from_json_str(
//!     r#"{"image_size": 8, "patch_size": 4, "num_channels": 1, "hidden_size": 16,
//!         "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
//!         "position_embedding_type": "rope_mixed", "num_labels": 3}"#,
//! )?;
//! let (varmap, device) = (VarMap::new(), Device::Cpu);
//! init::initialise(&varmap, &cfg, VisionKind::ImageClassification, 7, DType::F32, &device)?;
//! let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
//! let model = VisionForImageClassification::load(vb, &cfg)?;
//!
//! let pixels = Tensor::zeros((2, 1, 8, 8), DType::F32, &device)?;
//! let dropout = Dropout::disabled();
//! let plan = model.plan(Mode::Train { dropout: &dropout, precision: Precision::F32 });
//! let logits = model.forward(&pixels, plan)?; // [2, 3]
//! let grads = logits.sum_all()?.backward()?;
//! assert!(varmap.all_vars().iter().all(|v| grads.get(v.as_tensor()).is_some()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::data::split::fnv1a64;
use crate::vision::config::VisionConfig;
use crate::vision::error::{invalid, Result};
use crate::vision::model::VisionForImageClassification;
use crate::vision::rope::mixed_frequencies;
use crate::vision::tensors::{expected_tensors, VisionKind};

/// The generator of tensor `name` (its name without `dinov3_vit.`): ChaCha8 keyed by `seed` and
/// the FNV-1a hash of the name.
fn stream(seed: u64, name: &str) -> ChaCha8Rng {
    let bare = name
        .strip_prefix(VisionForImageClassification::BASE_PREFIX)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(name);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&fnv1a64(bare.as_bytes()).to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

/// The initial value of tensor `name` (as [`expected_tensors`] names it) of shape `shape`.
///
/// # Errors
/// [`crate::vision::VisionError::Config`] for an `initializer_range` no normal distribution has; candle
/// errors.
pub fn initial_value(
    cfg: &VisionConfig,
    name: &str,
    shape: &[usize],
    seed: u64,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let mut parts = name.rsplit('.');
    let leaf = parts.next().unwrap_or(name);
    let owner = parts.next().unwrap_or("");
    let constant = |v: f64| Tensor::full(v, shape, device)?.to_dtype(dtype);
    if leaf == "rope_freqs" {
        let layer = name
            .split("layer.")
            .nth(1)
            .and_then(|rest| rest.split('.').next()?.parse().ok())
            .ok_or_else(|| invalid("position_embedding_type", format!("no layer in {name}")))?;
        return mixed_frequencies(cfg, layer, dtype, device);
    }
    let value = match (owner, leaf) {
        (_, "lambda1") => constant(cfg.layerscale_value)?,
        (_, "bias") => constant(0.0)?,
        ("norm" | "norm1" | "norm2", "weight") => constant(1.0)?,
        _ => {
            let normal = Normal::new(0.0, cfg.initializer_range)
                .map_err(|e| invalid("initializer_range", e.to_string()))?;
            let mut rng = stream(seed, name);
            let n = shape.iter().product();
            let values: Vec<f64> = (0..n).map(|_| normal.sample(&mut rng)).collect();
            Tensor::from_vec(values, shape, device)?.to_dtype(dtype)?
        }
    };
    Ok(value)
}

/// Writes the initial value of every tensor of `kind` for `cfg` into `varmap`, as `Var`s of
/// `dtype` on `device`: a variable already there (built by a model on this map) takes the
/// value, a missing one is created. A model built on `varmap` with
/// `VarBuilder::from_varmap`, before or after, trains from these values.
///
/// # Errors
/// A variable already in the map with another shape; the errors of [`initial_value`].
pub fn initialise(
    varmap: &VarMap,
    cfg: &VisionConfig,
    kind: VisionKind,
    seed: u64,
    dtype: DType,
    device: &Device,
) -> Result<()> {
    let mut vars = varmap
        .data()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for t in expected_tensors(cfg, kind) {
        let value = initial_value(cfg, &t.name, &t.shape, seed, dtype, device)?;
        match vars.get(&t.name) {
            Some(var) if var.dims() != t.shape.as_slice() => {
                return Err(invalid(
                    "config",
                    format!(
                        "the map's variable {} has shape {:?}, this config makes it {:?}",
                        t.name,
                        var.dims(),
                        t.shape
                    ),
                ))
            }
            Some(var) => var.set(&value.to_dtype(var.dtype())?)?,
            None => {
                vars.insert(t.name, Var::from_tensor(&value)?);
            }
        }
    }
    Ok(())
}
