//! The vision experiment's settings, read from `experiments/vision/settings.json` (through
//! [`crate::settings`], as every experiment's): the arms, the rates of the sweep, the seeds,
//! the steps and the sizes, so that a reader changes a number without reading Rust, and the
//! model itself (`"model"`: a DINOv3 ViT `config.json`), whose position kind each arm
//! replaces.

use anyhow::{bail, Context};
use roformer::vision::{Coordinates, PositionKind, VisionConfig};
use serde::{Deserialize, Serialize};

use crate::settings::{Read, SettingsFile, SettingsFlag};

/// The settings of `experiment vision`.
pub const SETTINGS: SettingsFile = SettingsFile {
    path: "experiments/vision/settings.json",
    built_in: include_str!("../../../../experiments/vision/settings.json"),
};

/// `experiments/vision/settings.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The position kinds compared, each an arm.
    pub arms: Vec<PositionKind>,
    /// The peak learning rates of each arm's sweep.
    pub rates: Vec<f64>,
    /// The seed of the sweep's runs (its run at the best rate is also that seed's final run).
    pub sweep_seed: u64,
    /// The seeds of the final runs at each arm's best rate.
    pub seeds: Vec<u64>,
    /// Optimisation steps of every run.
    pub steps: u64,
    /// Warm-up steps (then a cosine decay to 0).
    pub warmup: u64,
    /// Images per step, all at 28 x 28, not augmented.
    pub batch_size: usize,
    /// AdamW's weight decay on matrices.
    pub weight_decay: f64,
    /// Label smoothing of the training loss.
    pub label_smoothing: f64,
    /// The clipping of the global gradient norm.
    pub max_grad_norm: f64,
    /// The sides the test images are resized to.
    pub eval_sides: Vec<usize>,
    /// Test images evaluated at each side (the first this many of the 10,000).
    pub test_images: usize,
    /// The sides whose patch grids the rotation's properties are measured on.
    pub property_sides: Vec<usize>,
    /// The model: a DINOv3 ViT `config.json` with `num_labels` 10.
    pub model: serde_json::Value,
}

impl Plan {
    /// Reads and checks the settings `given` names (or the default file, or its built-in
    /// copy), and validates the model they hold; also returns how the report cites them.
    ///
    /// # Errors
    /// Unreadable or malformed settings; an invalid model config; empty lists, a list naming
    /// a value twice, a rate that is not positive, a side smaller than a patch or a model with
    /// another label count than Fashion-MNIST's.
    pub fn read(given: &SettingsFlag) -> anyhow::Result<(Plan, VisionConfig, String)> {
        let Read { settings, cited } = SETTINGS.read::<Plan>(given)?;
        let model = VisionConfig::from_json_str(&settings.model.to_string())
            .with_context(|| format!("{cited}: \"model\" is not a valid ViT config.json"))?;
        settings.check(&model)?;
        Ok((settings, model, cited))
    }

    fn check(&self, model: &VisionConfig) -> anyhow::Result<()> {
        if self.arms.is_empty() || self.rates.is_empty() || self.seeds.is_empty() {
            bail!("the settings need at least one arm, one rate and one seed");
        }
        let names: Vec<&str> = self.arms.iter().map(|a| a.as_str()).collect();
        super::super::refuse_duplicates("arms", &names)?;
        super::super::refuse_duplicates("seeds", &self.seeds)?;
        super::super::refuse_duplicates("eval_sides", &self.eval_sides)?;
        if self.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            bail!("every rate must be positive");
        }
        let sides = self.eval_sides.iter().chain(&self.property_sides);
        if self.eval_sides.is_empty() || sides.clone().any(|&s| s < model.patch_size) {
            bail!(
                "the sides must be at least one patch ({} pixels)",
                model.patch_size
            );
        }
        if self.steps == 0 || self.batch_size == 0 || self.test_images == 0 {
            bail!("steps, batch_size and test_images must be at least 1");
        }
        if model.num_labels != 10 {
            bail!(
                "the model has {} labels, Fashion-MNIST 10",
                model.num_labels
            );
        }
        Ok(())
    }
}

/// The model of `arm`: `model` with its position kind replaced, on the seed's integer
/// coordinates (which, at the training size, the interpolated reading equals).
pub fn model_of(model: &VisionConfig, arm: PositionKind) -> VisionConfig {
    let mut config = model.clone();
    config.position = arm;
    config.coordinates = Coordinates::Indices;
    config
}

/// The coordinate conventions `arm` is evaluated under: for a rotary kind, the patch indices
/// as they are (a larger grid reaches indices training never saw: extrapolation) and stretched
/// onto the training grid's span (interpolation, DINOv3's reading in index units); for the
/// others, the one reading they have.
pub fn conventions(arm: PositionKind) -> Vec<Coordinates> {
    if arm.is_rotary() {
        vec![Coordinates::Indices, Coordinates::Interpolated]
    } else {
        vec![Coordinates::Indices]
    }
}
