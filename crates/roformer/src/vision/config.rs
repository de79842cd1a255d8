//! The vision configuration in two phases: [`RawVisionConfig`] mirrors the `config.json` of a
//! transformers `DINOv3ViTModel` (`model_type: dinov3_vit`) field for field with its defaults,
//! plus this crate's own fields (position kind, coordinates, labels), each with a default that
//! makes a real DINOv3 config load as DINOv3 (`rope_axial` over normalised coordinates);
//! [`VisionConfig`] is the validated form the model is built from.
//!
//! Unknown fields are ignored, as checkpoints carry some that describe nothing of the model
//! (`dtype`, `transformers_version`, the derived `stage_names`, ...).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::config::validate::labels_of;
use crate::error::ModelError;
use crate::vision::error::{invalid, Result, VisionError};
use crate::vision::positions::{Coordinates, PatchGrid};

/// The `model_type` of transformers' DINOv3 ViT.
pub const MODEL_TYPE: &str = "dinov3_vit";

/// The largest patch side accepted (a `c * p * p` patch row must stay a sane product width).
pub const MAX_PATCH_SIZE: usize = 1 << 10;

/// How the patch tokens learn where they are: one choice per model.
///
/// With `q`, `k` split into heads of `d` dims and pairs `(j, j + d/2)` (transformers'
/// `rotate_half` layout), the rotary kinds turn pair `i` of a patch token at position `p` by
/// `angle_i(p) = sum_k p_k * omega[i][k]` ([`rotary::nd`]); the prefix tokens (CLS, registers)
/// are not turned (angle 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionKind {
    /// Axial 2D RoPE (seed 003; DINOv3 over normalised coordinates): pairs `i < d/4` turn by
    /// the row `p_y * theta^(-4i/d)`, pairs `d/4 <= i < d/2` by the column
    /// `p_x * theta^(-4(i - d/4)/d)`.
    RopeAxial,
    /// RoPE-Mixed (Heo et al., 2024): a learned `omega` per layer and head, `[heads, 2, d/2]`
    /// (axis-major), mixing both axes in every pair; initialised as
    /// [`rotary::NdRope::rope_mixed_2d`] with `theta` and a direction per head.
    RopeMixed,
    /// 1D RoPE over the row-major patch index `n = r * cols + c` (the seed's counter-example):
    /// pair `i` turns by `p_n * theta^(-2i/d)`.
    RopeFlat,
    /// A learned table `[1, rows0 * cols0, hidden]` over the config's grid (`image_size /
    /// patch_size`) added to the patch tokens, resampled bicubically (antialiased, as timm's
    /// `resample_abs_pos_embed`) to any other grid.
    Absolute,
    /// No positions at all: the patch tokens are a set.
    None,
}

impl PositionKind {
    /// The name as written in `config.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            PositionKind::RopeAxial => "rope_axial",
            PositionKind::RopeMixed => "rope_mixed",
            PositionKind::RopeFlat => "rope_flat",
            PositionKind::Absolute => "absolute",
            PositionKind::None => "none",
        }
    }

    /// Whether q and k are rotated.
    pub fn is_rotary(self) -> bool {
        matches!(
            self,
            PositionKind::RopeAxial | PositionKind::RopeMixed | PositionKind::RopeFlat
        )
    }

    /// What the head dim must divide by: 4 for the 2D rotations (two axes, pairs), 2 for the
    /// 1D one, 1 without rotation.
    pub fn head_dim_divisor(self) -> usize {
        match self {
            PositionKind::RopeAxial | PositionKind::RopeMixed => 4,
            PositionKind::RopeFlat => 2,
            PositionKind::Absolute | PositionKind::None => 1,
        }
    }
}

impl fmt::Display for PositionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A size written as one number (square) or as `[height, width]`, as transformers accepts for
/// `image_size` and `patch_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SizeField {
    /// `n`: `n x n`.
    Square(usize),
    /// `[height, width]`.
    Rect([usize; 2]),
}

impl SizeField {
    /// `[height, width]`.
    pub fn dims(self) -> [usize; 2] {
        match self {
            SizeField::Square(n) => [n, n],
            SizeField::Rect(hw) => hw,
        }
    }
}

/// `config.json` of a vision model as written, with transformers' `DINOv3ViTConfig` defaults
/// for absent fields (ViT-S/16: 384 wide, 12 layers of 6 heads, theta 100).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct RawVisionConfig {
    /// `dinov3_vit` (the only type read; absent means it).
    pub model_type: Option<String>,
    /// The classes the checkpoint was saved from (written back, not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    /// Side of the square patches (default 16); `[p, p]` is accepted.
    pub patch_size: SizeField,
    /// Width of the hidden states (default 384).
    pub hidden_size: usize,
    /// Width of the MLP (default 1536).
    pub intermediate_size: usize,
    /// Layers (default 12).
    pub num_hidden_layers: usize,
    /// Attention heads per layer (default 6).
    pub num_attention_heads: usize,
    /// Activation of the MLP (default `gelu`, the exact one).
    pub hidden_act: String,
    /// Dropout on the attention probabilities (training only; default 0).
    pub attention_dropout: f64,
    /// Standard deviation of the initial weights (default 0.02).
    pub initializer_range: f64,
    /// Epsilon of the layer norms (default 1e-5).
    pub layer_norm_eps: f64,
    /// The RoPE base `theta` (default 100).
    pub rope_theta: f64,
    /// The training image size (default 224); sets the grid of an `absolute` table only: the
    /// rotary grid always comes from the image.
    pub image_size: SizeField,
    /// Channels of the pixels (default 3).
    pub num_channels: usize,
    /// Bias on the query projection (default true).
    pub query_bias: bool,
    /// Bias on the key projection (default false).
    pub key_bias: bool,
    /// Bias on the value projection (default true).
    pub value_bias: bool,
    /// Bias on the attention's output projection (default true).
    pub proj_bias: bool,
    /// Biases on the MLP projections (default true).
    pub mlp_bias: bool,
    /// Initial value of the layer scales (default 1).
    pub layerscale_value: f64,
    /// Stochastic depth: the probability of dropping a sample's residual branch in training
    /// (default 0).
    pub drop_path_rate: f64,
    /// A gated (SwiGLU-style) MLP `down(act(gate x) * up x)` instead of `down(act(up x))`
    /// (default false); older configs call it `use_swiglu_ffn`.
    #[serde(alias = "use_swiglu_ffn")]
    pub use_gated_mlp: bool,
    /// Register tokens after the CLS token (default 0).
    pub num_register_tokens: usize,
    /// DINOv3's training-time shift of the coordinates (read and written back; not applied).
    pub pos_embed_shift: Option<f64>,
    /// DINOv3's training-time jitter of the coordinates (read and written back; not applied).
    pub pos_embed_jitter: Option<f64>,
    /// DINOv3's training-time rescaling of the coordinates (default 2; read and written back;
    /// not applied).
    pub pos_embed_rescale: Option<f64>,
    /// For transformers' backbone class: norm the feature maps (default true; read and written
    /// back, not used here).
    pub apply_layernorm: bool,
    /// For transformers' backbone class: feature maps as grids (default true; read and written
    /// back, not used here).
    pub reshape_hidden_states: bool,
    /// For transformers' backbone class: the stages it returns (read and written back, not used
    /// here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_features: Option<Vec<String>>,
    /// For transformers' backbone class: the indices of those stages (read and written back,
    /// not used here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_indices: Option<Vec<i64>>,
    /// This crate's extension: how the patches learn where they are (default `rope_axial`,
    /// DINOv3's).
    pub position_embedding_type: PositionKind,
    /// This crate's extension: the coordinates of the patches (default `normalised`, DINOv3's
    /// patch centres in `[-1, 1]`).
    pub rope_coordinates: Coordinates,
    /// Labels of a classifier; when absent, the size of `id2label`, or 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_labels: Option<usize>,
    /// Label names by index (as strings, like transformers writes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// Label indices by name (written back for transformers; not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label2id: Option<BTreeMap<String, usize>>,
}

impl Default for RawVisionConfig {
    fn default() -> Self {
        RawVisionConfig {
            model_type: None,
            architectures: None,
            patch_size: SizeField::Square(16),
            hidden_size: 384,
            intermediate_size: 1536,
            num_hidden_layers: 12,
            num_attention_heads: 6,
            hidden_act: "gelu".into(),
            attention_dropout: 0.0,
            initializer_range: 0.02,
            layer_norm_eps: 1e-5,
            rope_theta: 100.0,
            image_size: SizeField::Square(224),
            num_channels: 3,
            query_bias: true,
            key_bias: false,
            value_bias: true,
            proj_bias: true,
            mlp_bias: true,
            layerscale_value: 1.0,
            drop_path_rate: 0.0,
            use_gated_mlp: false,
            num_register_tokens: 0,
            pos_embed_shift: None,
            pos_embed_jitter: None,
            pos_embed_rescale: Some(2.0),
            apply_layernorm: true,
            reshape_hidden_states: true,
            out_features: None,
            out_indices: None,
            position_embedding_type: PositionKind::RopeAxial,
            rope_coordinates: Coordinates::Normalised,
            num_labels: None,
            id2label: None,
            label2id: None,
        }
    }
}

impl RawVisionConfig {
    /// Parses `config.json` text (`path` names it in errors).
    ///
    /// # Errors
    /// [`ModelError::ConfigJson`] for malformed JSON, JSON that is not an object, or a field of
    /// the wrong type.
    pub fn parse(json: &str, path: &Path) -> Result<RawVisionConfig> {
        let malformed = |source| ModelError::ConfigJson {
            path: path.to_path_buf(),
            source,
        };
        serde_json::from_str::<BTreeMap<String, serde::de::IgnoredAny>>(json).map_err(malformed)?;
        Ok(serde_json::from_str(json).map_err(malformed)?)
    }
}

/// The MLP of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// `down(act(up x))` (`up_proj`, `down_proj`).
    Plain,
    /// `down(act(gate x) * up x)` (`gate_proj`, `up_proj`, `down_proj`): SwiGLU with `silu`.
    Gated,
}

/// Which projections carry a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Biases {
    /// `q_proj`.
    pub query: bool,
    /// `k_proj`.
    pub key: bool,
    /// `v_proj`.
    pub value: bool,
    /// `o_proj`.
    pub proj: bool,
    /// The MLP's projections.
    pub mlp: bool,
}

/// DINOv3's training-time augmentation of the patch coordinates, kept to be written back
/// (this crate does not apply it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoordinateAugmentation {
    /// `pos_embed_shift`.
    pub shift: Option<f64>,
    /// `pos_embed_jitter`.
    pub jitter: Option<f64>,
    /// `pos_embed_rescale`.
    pub rescale: Option<f64>,
}

/// A validated vision configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// The training image `[height, width]`: the grid of an `absolute` table.
    pub image_size: [usize; 2],
    /// Side `p` of the square patches.
    pub patch_size: usize,
    /// Channels `c` of the pixels.
    pub num_channels: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Activation of the MLP.
    pub hidden_act: Activation,
    /// Plain or gated MLP.
    pub mlp: MlpKind,
    /// Which projections carry a bias.
    pub biases: Biases,
    /// Epsilon of the layer norms.
    pub layer_norm_eps: f64,
    /// Initial value of the layer scales.
    pub layerscale_value: f64,
    /// Register tokens after the CLS token.
    pub num_register_tokens: usize,
    /// How the patches learn where they are.
    pub position: PositionKind,
    /// The coordinates of the rotary kinds.
    pub coordinates: Coordinates,
    /// The RoPE base `theta`.
    pub rope_theta: f64,
    /// Dropout on the attention probabilities (training only).
    pub attention_dropout: f64,
    /// Stochastic depth rate (training only).
    pub drop_path_rate: f64,
    /// Standard deviation of the initial weights.
    pub initializer_range: f64,
    /// DINOv3's coordinate augmentation, written back as read.
    pub augmentation: CoordinateAugmentation,
    /// Labels of a classifier.
    pub num_labels: usize,
    /// Label names by index (possibly fewer than `num_labels`).
    pub id2label: BTreeMap<usize, String>,
}

impl VisionConfig {
    /// Parses and validates `config.json` text.
    ///
    /// # Errors
    /// As [`RawVisionConfig::parse`] and `VisionConfig::try_from`.
    pub fn from_json_str(json: &str) -> Result<VisionConfig> {
        VisionConfig::try_from(RawVisionConfig::parse(json, Path::new("<string>"))?)
    }

    /// Reads, parses and validates a `config.json` file.
    ///
    /// # Errors
    /// [`ModelError::Io`] if it cannot be read, and the errors of
    /// [`VisionConfig::from_json_str`].
    pub fn from_file(path: &Path) -> Result<VisionConfig> {
        let text = crate::memory::read_input_text(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        VisionConfig::try_from(RawVisionConfig::parse(&text, path)?)
    }

    /// Elements per head: `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Tokens before the patches: the CLS token and the registers.
    pub fn prefix_tokens(&self) -> usize {
        1 + self.num_register_tokens
    }

    /// The patch grid of the training image (`image_size / patch_size` per axis): the grid of
    /// an `absolute` table.
    pub fn config_grid(&self) -> PatchGrid {
        PatchGrid {
            rows: self.image_size[0] / self.patch_size,
            cols: self.image_size[1] / self.patch_size,
        }
    }

    /// The label of class `i` (`LABEL_i` when `id2label` does not name it, as transformers
    /// does).
    pub fn label(&self, i: usize) -> String {
        self.id2label
            .get(&i)
            .cloned()
            .unwrap_or_else(|| format!("LABEL_{i}"))
    }

    /// The config as `config.json` holds it, naming `architecture` (e.g. `DINOv3ViTModel`).
    pub fn to_raw(&self, architecture: &str) -> RawVisionConfig {
        let labelled = !self.id2label.is_empty();
        RawVisionConfig {
            model_type: Some(MODEL_TYPE.into()),
            architectures: Some(vec![architecture.into()]),
            patch_size: SizeField::Square(self.patch_size),
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            hidden_act: self.hidden_act.name().into(),
            attention_dropout: self.attention_dropout,
            initializer_range: self.initializer_range,
            layer_norm_eps: self.layer_norm_eps,
            rope_theta: self.rope_theta,
            image_size: SizeField::Rect(self.image_size),
            num_channels: self.num_channels,
            query_bias: self.biases.query,
            key_bias: self.biases.key,
            value_bias: self.biases.value,
            proj_bias: self.biases.proj,
            mlp_bias: self.biases.mlp,
            layerscale_value: self.layerscale_value,
            drop_path_rate: self.drop_path_rate,
            use_gated_mlp: self.mlp == MlpKind::Gated,
            num_register_tokens: self.num_register_tokens,
            pos_embed_shift: self.augmentation.shift,
            pos_embed_jitter: self.augmentation.jitter,
            pos_embed_rescale: self.augmentation.rescale,
            apply_layernorm: true,
            reshape_hidden_states: true,
            out_features: None,
            out_indices: None,
            position_embedding_type: self.position,
            rope_coordinates: self.coordinates,
            num_labels: Some(self.num_labels),
            id2label: labelled.then(|| {
                let names = self.id2label.iter();
                names.map(|(k, v)| (k.to_string(), v.clone())).collect()
            }),
            label2id: labelled.then(|| {
                let names = self.id2label.iter();
                names.map(|(k, v)| (v.clone(), *k)).collect()
            }),
        }
    }
}

fn positive(field: &'static str, value: usize) -> Result<usize> {
    if value == 0 {
        return Err(invalid(field, "must be at least 1"));
    }
    Ok(value)
}

fn probability(field: &'static str, value: f64) -> Result<f64> {
    if !(0.0..1.0).contains(&value) {
        return Err(invalid(
            field,
            format!("{value} is not a probability below 1"),
        ));
    }
    Ok(value)
}

fn finite_positive(field: &'static str, value: f64) -> Result<f64> {
    if !(value.is_finite() && value > 0.0) {
        return Err(invalid(
            field,
            format!("{value} is not a finite positive number"),
        ));
    }
    Ok(value)
}

/// The square patch side of `raw`, within [`MAX_PATCH_SIZE`].
fn patch_of(raw: &RawVisionConfig) -> Result<usize> {
    let [h, w] = raw.patch_size.dims();
    if h != w {
        return Err(invalid(
            "patch_size",
            format!("{h}x{w} patches are not square (DINOv3's rotary grid needs square ones)"),
        ));
    }
    let p = positive("patch_size", h)?;
    if p > MAX_PATCH_SIZE {
        return Err(invalid(
            "patch_size",
            format!("{p} is above the largest accepted, {MAX_PATCH_SIZE}"),
        ));
    }
    Ok(p)
}

/// `hidden_size / num_attention_heads`, checked to split evenly and to suit the position kind.
fn head_dim_of(raw: &RawVisionConfig) -> Result<usize> {
    let hidden = positive("hidden_size", raw.hidden_size)?;
    let heads = positive("num_attention_heads", raw.num_attention_heads)?;
    if !hidden.is_multiple_of(heads) {
        return Err(invalid(
            "num_attention_heads",
            format!("hidden_size {hidden} is not divisible by {heads} heads"),
        ));
    }
    let head_dim = hidden / heads;
    let position = raw.position_embedding_type;
    let divisor = position.head_dim_divisor();
    if !head_dim.is_multiple_of(divisor) {
        return Err(VisionError::RopeHeadDim {
            position: position.as_str(),
            head_dim,
            hidden_size: hidden,
            heads,
            divisor,
        });
    }
    if position.is_rotary() && head_dim > rotary::MAX_ROTARY_DIM {
        return Err(invalid(
            "hidden_size",
            format!(
                "head dim {head_dim} is above the widest rotation, {}",
                rotary::MAX_ROTARY_DIM
            ),
        ));
    }
    Ok(head_dim)
}

impl TryFrom<RawVisionConfig> for VisionConfig {
    type Error = VisionError;

    /// Validates: `model_type` absent or `dinov3_vit`; sizes at least 1; square patches of at
    /// most [`MAX_PATCH_SIZE`]; `hidden_size` divisible by `num_attention_heads` with a head
    /// dim the position kind can rotate ([`VisionError::RopeHeadDim`]); an `image_size` of at
    /// least one patch per axis for an `absolute` table; a finite positive `rope_theta` and
    /// `layer_norm_eps`, a finite `layerscale_value` and `initializer_range`; dropout rates in
    /// `[0, 1)`; a known activation; integer label keys.
    fn try_from(raw: RawVisionConfig) -> Result<VisionConfig> {
        if let Some(other) = raw.model_type.as_deref().filter(|&t| t != MODEL_TYPE) {
            return Err(invalid(
                "model_type",
                format!("{other:?} is not a vision model (expected {MODEL_TYPE:?})"),
            ));
        }
        let patch_size = patch_of(&raw)?;
        head_dim_of(&raw)?;
        let image_size = raw.image_size.dims();
        if raw.position_embedding_type == PositionKind::Absolute
            && image_size.iter().any(|&n| n < patch_size)
        {
            return Err(invalid(
                "image_size",
                format!(
                    "{image_size:?} holds no whole {patch_size}x{patch_size} patch: an absolute \
                     table needs a grid of at least 1x1"
                ),
            ));
        }
        for (field, value) in [
            ("layerscale_value", raw.layerscale_value),
            ("initializer_range", raw.initializer_range),
        ] {
            if !value.is_finite() {
                return Err(invalid(field, format!("{value} is not finite")));
            }
        }
        let (id2label, num_labels) = labels_of(raw.id2label.unwrap_or_default(), raw.num_labels)?;
        Ok(VisionConfig {
            image_size,
            patch_size,
            num_channels: positive("num_channels", raw.num_channels)?,
            hidden_size: raw.hidden_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            intermediate_size: positive("intermediate_size", raw.intermediate_size)?,
            hidden_act: Activation::parse("hidden_act", &raw.hidden_act)?,
            mlp: if raw.use_gated_mlp {
                MlpKind::Gated
            } else {
                MlpKind::Plain
            },
            biases: Biases {
                query: raw.query_bias,
                key: raw.key_bias,
                value: raw.value_bias,
                proj: raw.proj_bias,
                mlp: raw.mlp_bias,
            },
            layer_norm_eps: finite_positive("layer_norm_eps", raw.layer_norm_eps)?,
            layerscale_value: raw.layerscale_value,
            num_register_tokens: raw.num_register_tokens,
            position: raw.position_embedding_type,
            coordinates: raw.rope_coordinates,
            rope_theta: finite_positive("rope_theta", raw.rope_theta)?,
            attention_dropout: probability("attention_dropout", raw.attention_dropout)?,
            drop_path_rate: probability("drop_path_rate", raw.drop_path_rate)?,
            initializer_range: raw.initializer_range,
            augmentation: CoordinateAugmentation {
                shift: raw.pos_embed_shift,
                jitter: raw.pos_embed_jitter,
                rescale: raw.pos_embed_rescale,
            },
            num_labels: positive("num_labels", num_labels)?,
            id2label,
        })
    }
}
