//! [`VisionModel`] (transformers' `DINOv3ViTModel`) and [`VisionForImageClassification`] (a
//! linear head on the CLS token and the mean patch token, as `Dinov2ForImageClassification`).
//!
//! ```text
//! grid   = (floor(h / p), floor(w / p))                            from the image, not the config
//! x0     = Embeddings(pixels)                                      [b, 1 + R + rows cols, hidden]
//! x      = Layer_{n-1}( ... Layer_0(x0, R_grid))                   the rotation made once per pass
//!                                                                  (training: one op, autograd::chain)
//! last   = LayerNorm(x)                                            last_hidden_state
//! pooled = last[:, 0]                                              pooler_output (the normed CLS)
//! logits = classifier([pooled ; mean(last[:, 1 + R:])])            [b, num_labels]
//!                        (the features one op on the CPU kernels: autograd::class_features)
//! ```

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use rotary::finite::first_non_finite_in;

use crate::autograd::chain::Chained;
use crate::autograd::class_features::{class_features, class_features_slow};
use crate::mode::Mode;
use crate::norm::Norm;
use crate::plan::Plan;
use crate::vision::block::VisionLayer;
use crate::vision::config::VisionConfig;
use crate::vision::embeddings::VisionEmbeddings;
use crate::vision::error::{Result, VisionError};
use crate::vision::ops::{dense, fused, linear_layer, Dense};
use crate::vision::positions::PatchGrid;
use crate::vision::rope::Rotation;

/// What [`VisionModel::forward`] returns.
#[derive(Debug, Clone)]
pub struct VisionOutput {
    /// The normed hidden states, `[b, 1 + R + rows * cols, hidden]`: CLS, registers, then the
    /// patches row-major.
    pub last_hidden_state: Tensor,
    /// The normed CLS token, `[b, hidden]`.
    pub pooler_output: Tensor,
}

/// The vision transformer without a head: pixels in, hidden states out.
#[derive(Debug, Clone)]
pub struct VisionModel {
    embeddings: VisionEmbeddings,
    layers: Vec<VisionLayer>,
    norm: Norm,
    rotation: Rotation,
    config: VisionConfig,
    dtype: DType,
    device: Device,
}

impl VisionModel {
    /// Builds the model from `vb` scoped at its tensors (`embeddings.*`, `layer.{i}.*`,
    /// `norm.*`; `vb.pp("dinov3_vit")` in a classifier's checkpoint). With a builder over a
    /// `candle_nn::VarMap` every weight is a trainable `Var` (see [`crate::vision::init`] for
    /// seeded initial values).
    ///
    /// # Errors
    /// Candle errors from the var builder; rotary errors for frequencies a validated config
    /// does not produce.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> Result<Self> {
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| VisionLayer::load(vb.pp("layer").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(VisionModel {
            embeddings: VisionEmbeddings::load(vb.pp("embeddings"), cfg)?,
            layers,
            norm: Norm::layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("norm"))?,
            rotation: Rotation::of_config(cfg)?,
            config: cfg.clone(),
            dtype: vb.dtype(),
            device: vb.device().clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// The embedding block.
    pub fn embeddings(&self) -> &VisionEmbeddings {
        &self.embeddings
    }

    /// The dtype of the weights.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device of the weights.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The plan of a pass in `mode` over this model's tensors ([`Plan::new`]): the fused CPU
    /// ops for f32 on the CPU (products in the training precision in [`Mode::Train`]),
    /// candle's ops elsewhere.
    pub fn plan<'a>(&self, mode: Mode<'a>) -> Plan<'a> {
        Plan::new(mode, &self.device, self.dtype)
    }

    /// The hidden states and the pooled CLS of `pixel_values` (`[b, c, h, w]`, any float dtype,
    /// converted to the model's): any `h, w` of at least one patch, the pixels past the last
    /// whole patch of each axis dropped. In [`Mode::Train`] every op carries gradients to the
    /// weights (including RoPE-Mixed's frequencies and the absolute table), with dropout and
    /// stochastic depth drawn from the mode's generator.
    ///
    /// # Errors
    /// [`VisionError::Input`] for pixels of the wrong rank, channel count or dtype, or holding
    /// a NaN or an infinity; [`VisionError::ImageTooSmall`]; candle errors.
    pub fn forward(&self, pixel_values: &Tensor, plan: Plan<'_>) -> Result<VisionOutput> {
        let (pixels, grid) = self.check_pixels(pixel_values)?;
        let embedded = self.embeddings.forward(&pixels, grid, plan)?;
        let mut x = Chained::new(embedded, plan.param_grads());
        let rotation = self
            .rotation
            .for_pass(&self.config, grid, self.dtype, &self.device)?;
        for layer in &self.layers {
            layer.forward(&mut x, &rotation, plan)?;
        }
        // In a training pass on the CPU kernels the blocks' halves run here, as one op.
        let last_hidden_state = self.norm.forward(&x.tensor()?, plan)?;
        let pooler_output = last_hidden_state.i((.., 0, ..))?.contiguous()?;
        Ok(VisionOutput {
            last_hidden_state,
            pooler_output,
        })
    }

    /// The patch grid of an image of `height x width` pixels.
    ///
    /// # Errors
    /// [`VisionError::ImageTooSmall`].
    pub fn grid(&self, height: usize, width: usize) -> Result<PatchGrid> {
        PatchGrid::of_image(height, width, self.config.patch_size)
    }

    /// `pixel_values` checked (rank 4, the config's channels, a float dtype, finite) in the
    /// model's dtype and device, and its grid.
    fn check_pixels(&self, pixel_values: &Tensor) -> Result<(Tensor, PatchGrid)> {
        let dims = pixel_values.dims();
        let &[b, c, h, w] = dims else {
            return Err(VisionError::Input(format!(
                "expected [batch, channels, height, width], got shape {dims:?}"
            )));
        };
        if b == 0 {
            return Err(VisionError::Input("the batch is empty".into()));
        }
        let channels = self.config.num_channels;
        if c != channels {
            return Err(VisionError::Input(format!(
                "{c} channels, the model takes {channels} (shape {dims:?})"
            )));
        }
        let grid = self.grid(h, w)?;
        if !pixel_values.dtype().is_float() {
            return Err(VisionError::Input(format!(
                "dtype {:?}, expected a float dtype (f32)",
                pixel_values.dtype()
            )));
        }
        let pixels = pixel_values.to_device(&Device::Cpu)?.contiguous()?;
        if let Some(bad) = first_non_finite_in(&pixels)? {
            let at = bad.position(pixels.dims());
            return Err(VisionError::Input(format!(
                "non-finite value at [batch, channel, y, x] = {at:?}"
            )));
        }
        let pixels = pixels.to_dtype(self.dtype)?.to_device(&self.device)?;
        Ok((pixels, grid))
    }
}

/// The classification model: [`VisionModel`] under `dinov3_vit.` and a linear `classifier`
/// `[num_labels, 2 hidden]` on the pooled CLS token concatenated with the mean of the patch
/// tokens (the registers left out), as transformers' `Dinov2ForImageClassification` (with
/// registers: `Dinov2WithRegistersForImageClassification`).
#[derive(Debug, Clone)]
pub struct VisionForImageClassification {
    vit: VisionModel,
    classifier: Dense,
}

impl VisionForImageClassification {
    /// The scope of the backbone's tensors in a classifier's checkpoint (transformers'
    /// `base_model_prefix` of DINOv3).
    pub const BASE_PREFIX: &'static str = "dinov3_vit";

    /// Builds the model from `vb` at the checkpoint's top level: the backbone under
    /// [`Self::BASE_PREFIX`], `classifier.weight` `[num_labels, 2 hidden]` and
    /// `classifier.bias`. With a builder over a `candle_nn::VarMap` every weight is a trainable
    /// `Var` ([`crate::vision::init::initialise`] gives seeded initial values).
    ///
    /// # Errors
    /// As [`VisionModel::load`].
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> Result<Self> {
        let (h, n) = (cfg.hidden_size, cfg.num_labels);
        Ok(VisionForImageClassification {
            vit: VisionModel::load(vb.pp(Self::BASE_PREFIX), cfg)?,
            classifier: linear_layer(2 * h, n, true, cfg.initializer_range, vb.pp("classifier"))?,
        })
    }

    /// The backbone.
    pub fn model(&self) -> &VisionModel {
        &self.vit
    }

    /// The configuration (labels: `num_labels`, [`VisionConfig::label`]).
    pub fn config(&self) -> &VisionConfig {
        self.vit.config()
    }

    /// The plan of a pass in `mode` ([`VisionModel::plan`]).
    pub fn plan<'a>(&self, mode: Mode<'a>) -> Plan<'a> {
        self.vit.plan(mode)
    }

    /// The logits `[b, num_labels]` of `pixel_values` (`[b, c, h, w]`):
    /// `classifier([pooler_output ; mean over the patch tokens of last_hidden_state])`.
    ///
    /// # Errors
    /// As [`VisionModel::forward`].
    pub fn forward(&self, pixel_values: &Tensor, plan: Plan<'_>) -> Result<Tensor> {
        let out = self.vit.forward(pixel_values, plan)?;
        let (last, prefix) = (&out.last_hidden_state, self.vit.config().prefix_tokens());
        // [pooler_output ; the patches' mean], [b, 2 hidden].
        let features = match fused(plan) {
            Some(_) => class_features(last, prefix)?,
            None => class_features_slow(last, prefix)?,
        };
        Ok(dense(&self.classifier, &features, None, plan)?)
    }
}
