//! A Hugging Face image processor as DINOv3 checkpoints ship it (`preprocessor_config.json`
//! for transformers' `DINOv3ViTImageProcessor`, or `...Fast` as older versions saved it),
//! applied to a decoded image to give the model's `pixel_values`.
//!
//! Two phases: [`RawProcessorConfig`] mirrors the JSON field for field (with the defaults of
//! transformers' DINOv3 class where a field is absent or null), and [`ImageProcessor`] is the
//! validated form, made by `TryFrom`. An option this crate does not implement (another
//! resampling filter, padding, a size by longest edge, channels-last output, another
//! processor class) is an error naming it, never ignored. Fields that change no value
//! (`device`, `return_tensors`, `disable_grouping`, `input_data_format`, `image_seq_length`,
//! `processor_class`) are accepted and have no effect.
//!
//! The steps, in DINOv3's order (its processor rescales before resizing, unlike transformers'
//! generic one), on a `[c, h, w]` u8 image `x`:
//! 1. channels: to RGB when `do_convert_rgb` is set or the statistics have 3 values, to grey
//!    when they have 1 ([`Planes::with_channels`]);
//! 2. `do_rescale`: `x * rescale_factor` (else the raw 0-255 values), in f32;
//! 3. `do_resize`: bilinear with antialiasing ([`Resample::BilinearAntialiased`], what
//!    transformers' torchvision backend runs for `resample = 2`) to `size`: `{height, width}`,
//!    or `{shortest_edge: s}` for `s` on the shorter side and `trunc(s * long / short)` on the
//!    longer;
//! 4. `do_center_crop`: the centred `crop_size` window ([`centre_crop`], zero padding);
//! 5. `do_normalize`: `(x - image_mean[c]) / image_std[c]`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::error::{ConfigError, ImageError};
use super::geometry::centre_crop;
use super::planes::{Channels, Planes};
use super::resize::{resize, Resample};

/// The processor classes whose steps this module reproduces.
pub const SUPPORTED_CLASSES: [&str; 2] = ["DINOv3ViTImageProcessor", "DINOv3ViTImageProcessorFast"];

/// ImageNet's per-channel mean (RGB), DINOv3's default `image_mean`.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];

/// ImageNet's per-channel standard deviation (RGB), DINOv3's default `image_std`.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// PIL's code of bilinear resampling, the only `resample` supported.
pub const PIL_BILINEAR: u8 = 2;

/// A size field (`size`, `crop_size`) as transformers writes it: a number, a list
/// `[height, width]`, or a dictionary.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    /// One side: a square, or the shorter edge when `default_to_square` is false.
    Side(usize),
    /// `[height, width]`.
    Pair(Vec<usize>),
    /// `{"height", "width"}`, `{"shortest_edge"}`, or a form this crate refuses.
    Dict(SizeDict),
}

/// The keys of a size dictionary; those other than `height`, `width` and `shortest_edge`
/// are refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SizeDict {
    /// Output height.
    pub height: Option<usize>,
    /// Output width.
    pub width: Option<usize>,
    /// Output length of the shorter side (the other keeps the aspect ratio).
    pub shortest_edge: Option<usize>,
    /// Any other key (`longest_edge`, `max_height`, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Per-channel statistics: one number for every channel, or one per channel.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawStats {
    /// The same value for every channel.
    All(f32),
    /// One value per channel.
    PerChannel(Vec<f32>),
}

/// `preprocessor_config.json` field for field. Unknown fields are refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProcessorConfig {
    /// The transformers class; must be one of [`SUPPORTED_CLASSES`] when present.
    pub image_processor_type: Option<String>,
    /// The processor wrapping the image processor (no effect).
    pub processor_class: Option<String>,
    /// Resize (default true).
    pub do_resize: Option<bool>,
    /// The resize target (default `{"height": 224, "width": 224}`).
    pub size: Option<RawSize>,
    /// Whether a single-number size means a square (default true) or the shorter edge.
    pub default_to_square: Option<bool>,
    /// PIL's resampling code (default 2, bilinear, the only one supported).
    pub resample: Option<u8>,
    /// Rescale (default true).
    pub do_rescale: Option<bool>,
    /// The rescale factor (default 1/255).
    pub rescale_factor: Option<f64>,
    /// Normalise (default true).
    pub do_normalize: Option<bool>,
    /// The mean (default [`IMAGENET_MEAN`]).
    pub image_mean: Option<RawStats>,
    /// The standard deviation (default [`IMAGENET_STD`]).
    pub image_std: Option<RawStats>,
    /// Convert to RGB (default false).
    pub do_convert_rgb: Option<bool>,
    /// Centre-crop after resizing (default false).
    pub do_center_crop: Option<bool>,
    /// The crop (needed when `do_center_crop` is set).
    pub crop_size: Option<RawSize>,
    /// Pad (refused when true).
    pub do_pad: Option<bool>,
    /// The padding target (used only with `do_pad`).
    pub pad_size: Option<Value>,
    /// Output layout: `channels_first` (or absent); `channels_last` is refused.
    pub data_format: Option<String>,
    /// How an input array is laid out (no effect: the input is always planes).
    pub input_data_format: Option<Value>,
    /// Where transformers computes (no effect).
    pub device: Option<Value>,
    /// transformers' output tensor kind (no effect).
    pub return_tensors: Option<Value>,
    /// transformers' batching of same-size images (no effect).
    pub disable_grouping: Option<bool>,
    /// Tokens per image for multimodal processors (no effect).
    pub image_seq_length: Option<usize>,
}

/// The size an image is resized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTo {
    /// Exactly `height x width`.
    Exact {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
    },
    /// The shorter side to this length, the longer to `trunc(s * long / short)`.
    ShortestEdge(usize),
}

impl ResizeTo {
    /// The output `(height, width)` for an input of `height x width` (see the variants).
    pub fn output(self, height: usize, width: usize) -> (usize, usize) {
        match self {
            Self::Exact { height, width } => (height, width),
            Self::ShortestEdge(s) => {
                let (short, long) = (height.min(width), height.max(width));
                // Python's int(s * long / short): a float quotient, truncated.
                let long = ((s * long) as f64 / short.max(1) as f64) as usize;
                if width <= height {
                    (long, s)
                } else {
                    (s, long)
                }
            }
        }
    }
}

/// Per-channel normalisation `(x - mean[c]) / std[c]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalize {
    /// The mean: one value for all channels, or one per channel.
    pub mean: Vec<f32>,
    /// The standard deviation, as long as `mean`.
    pub std: Vec<f32>,
}

/// A validated image processor: the steps of the module doc with their settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    /// The channels the model takes; `None` keeps the image's own.
    pub channels: Option<Channels>,
    /// The rescale factor; `None` keeps the 0-255 values.
    pub rescale: Option<f32>,
    /// The resize; `None` keeps the size.
    pub resize: Option<ResizeTo>,
    /// The centre crop `(height, width)`; `None` for none.
    pub crop: Option<(usize, usize)>,
    /// The normalisation; `None` for none.
    pub normalize: Option<Normalize>,
}

impl Default for ImageProcessor {
    /// DINOv3's defaults: RGB, rescale by 1/255, resize to 224 x 224, ImageNet statistics.
    fn default() -> Self {
        Self {
            channels: Some(Channels::Rgb),
            rescale: Some(1.0 / 255.0),
            resize: Some(ResizeTo::Exact {
                height: 224,
                width: 224,
            }),
            crop: None,
            normalize: Some(Normalize {
                mean: IMAGENET_MEAN.to_vec(),
                std: IMAGENET_STD.to_vec(),
            }),
        }
    }
}

impl ImageProcessor {
    /// Parses and validates `preprocessor_config.json` text.
    ///
    /// # Errors
    /// [`ConfigError::Json`] for malformed JSON or an unknown field; those of `TryFrom`.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let raw: RawProcessorConfig = serde_json::from_str(text)?;
        Self::try_from(raw)
    }

    /// Reads `path` (a `preprocessor_config.json`, or a directory holding one).
    ///
    /// # Errors
    /// [`ConfigError::Io`] when it cannot be read; those of [`from_json`](Self::from_json).
    pub fn from_path(path: &Path) -> Result<Self, ConfigError> {
        let file = if path.is_dir() {
            path.join("preprocessor_config.json")
        } else {
            path.to_owned()
        };
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Io {
            path: file.clone(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// The model's `pixel_values` `[c, h, w]` for a decoded image (the steps of the module
    /// doc).
    ///
    /// # Errors
    /// [`ImageError::Empty`] for an image without pixels; [`ImageError::Channels`] when the
    /// image's channels cannot be converted; [`ImageError::StatsLength`] when per-channel
    /// statistics do not match an image whose channels were kept.
    pub fn preprocess(&self, image: &Planes<u8>) -> Result<Planes<f32>, ImageError> {
        let image = match self.channels {
            Some(channels) => image.with_channels(channels)?,
            None => image.clone(),
        };
        let mut x = match self.rescale {
            Some(factor) => image.map(|v| f32::from(v) * factor),
            None => image.map(f32::from),
        };
        if let Some(to) = self.resize {
            let (height, width) = to.output(x.height(), x.width());
            x = resize(&x, height, width, Resample::BilinearAntialiased)?;
        }
        if let Some((height, width)) = self.crop {
            x = centre_crop(&x, height, width, 0.0)?;
        }
        if let Some(n) = &self.normalize {
            let c = x.channels();
            let widen = |v: &[f32]| {
                if v.len() == 1 {
                    vec![v[0]; c]
                } else {
                    v.to_vec()
                }
            };
            x.normalise(&widen(&n.mean), &widen(&n.std))?;
        }
        Ok(x)
    }
}

/// A refusal of `field`.
fn unsupported(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Unsupported {
        field,
        reason: reason.into(),
    }
}

/// An invalid value of `field`.
fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A size field as `(height, width)` or a shorter-edge length.
fn size_of(field: &'static str, raw: &RawSize, square: bool) -> Result<ResizeTo, ConfigError> {
    let to = match raw {
        RawSize::Side(s) if square => ResizeTo::Exact {
            height: *s,
            width: *s,
        },
        RawSize::Side(s) => ResizeTo::ShortestEdge(*s),
        RawSize::Pair(pair) => match pair[..] {
            [height, width] => ResizeTo::Exact { height, width },
            [s] => return size_of(field, &RawSize::Side(s), square),
            _ => return Err(invalid(field, format!("a list of {} sides", pair.len()))),
        },
        RawSize::Dict(dict) => {
            if let Some(key) = dict.other.keys().next() {
                return Err(unsupported(
                    field,
                    format!("{key:?} (supported: height and width, or shortest_edge)"),
                ));
            }
            match (dict.height, dict.width, dict.shortest_edge) {
                (Some(height), Some(width), None) => ResizeTo::Exact { height, width },
                (None, None, Some(s)) => ResizeTo::ShortestEdge(s),
                _ => {
                    return Err(invalid(
                        field,
                        "give height and width, or shortest_edge alone",
                    ))
                }
            }
        }
    };
    let zero = match to {
        ResizeTo::Exact { height, width } => height == 0 || width == 0,
        ResizeTo::ShortestEdge(s) => s == 0,
    };
    if zero {
        return Err(invalid(field, "a side of 0"));
    }
    Ok(to)
}

/// Statistics as a vector of 1 or 3 finite values.
fn stats_of(
    field: &'static str,
    raw: Option<&RawStats>,
    default: [f32; 3],
) -> Result<Vec<f32>, ConfigError> {
    let values = match raw {
        None => default.to_vec(),
        Some(RawStats::All(v)) => vec![*v],
        Some(RawStats::PerChannel(v)) => v.clone(),
    };
    if !matches!(values.len(), 1 | 3) {
        return Err(invalid(
            field,
            format!("{} values (1 or 3 expected)", values.len()),
        ));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err(invalid(field, "a value that is not finite"));
    }
    Ok(values)
}

/// Refuses the class, padding, channels-last output and filters other than bilinear.
fn check_refusals(raw: &RawProcessorConfig) -> Result<(), ConfigError> {
    if let Some(class) = raw.image_processor_type.as_deref() {
        if !SUPPORTED_CLASSES.contains(&class) {
            let reason = format!("{class:?} (supported: {})", SUPPORTED_CLASSES.join(", "));
            return Err(unsupported("image_processor_type", reason));
        }
    }
    if raw.do_pad == Some(true) {
        return Err(unsupported("do_pad", "padding is not implemented"));
    }
    if let Some(format) = raw
        .data_format
        .as_deref()
        .filter(|f| *f != "channels_first")
    {
        return Err(unsupported(
            "data_format",
            format!("{format:?} (only channels_first)"),
        ));
    }
    let resample = raw.resample.unwrap_or(PIL_BILINEAR);
    if resample != PIL_BILINEAR {
        let reason = format!("PIL filter {resample} (only 2, bilinear)");
        return Err(unsupported("resample", reason));
    }
    Ok(())
}

/// `size` when `do_resize` (default 224 x 224; a single number is a square unless
/// `default_to_square` is false).
fn resize_of(raw: &RawProcessorConfig) -> Result<Option<ResizeTo>, ConfigError> {
    if !raw.do_resize.unwrap_or(true) {
        return Ok(None);
    }
    let default = RawSize::Pair(vec![224, 224]);
    let square = raw.default_to_square.unwrap_or(true);
    size_of("size", raw.size.as_ref().unwrap_or(&default), square).map(Some)
}

/// `crop_size` as `(height, width)` when `do_center_crop`.
fn crop_of(raw: &RawProcessorConfig) -> Result<Option<(usize, usize)>, ConfigError> {
    if !raw.do_center_crop.unwrap_or(false) {
        return Ok(None);
    }
    let size = raw
        .crop_size
        .as_ref()
        .ok_or_else(|| invalid("crop_size", "missing while do_center_crop is set"))?;
    match size_of("crop_size", size, true)? {
        ResizeTo::Exact { height, width } => Ok(Some((height, width))),
        ResizeTo::ShortestEdge(_) => Err(invalid("crop_size", "a crop needs height and width")),
    }
}

/// `rescale_factor` (default 1/255, finite and positive) when `do_rescale`.
fn rescale_of(raw: &RawProcessorConfig) -> Result<Option<f32>, ConfigError> {
    if !raw.do_rescale.unwrap_or(true) {
        return Ok(None);
    }
    let factor = raw.rescale_factor.unwrap_or(1.0 / 255.0);
    if !(factor.is_finite() && factor > 0.0) {
        return Err(invalid("rescale_factor", format!("{factor}")));
    }
    Ok(Some(factor as f32))
}

/// `image_mean` and `image_std` (default ImageNet's; 1 or 3 finite values each, as many of
/// one as of the other, no std of 0) when `do_normalize`.
fn normalize_of(raw: &RawProcessorConfig) -> Result<Option<Normalize>, ConfigError> {
    if !raw.do_normalize.unwrap_or(true) {
        return Ok(None);
    }
    let mean = stats_of("image_mean", raw.image_mean.as_ref(), IMAGENET_MEAN)?;
    let std = stats_of("image_std", raw.image_std.as_ref(), IMAGENET_STD)?;
    if std.contains(&0.0) {
        return Err(invalid("image_std", "a standard deviation of 0"));
    }
    if mean.len() != std.len() {
        let reason = format!("{} values for {} means", std.len(), mean.len());
        return Err(invalid("image_std", reason));
    }
    Ok(Some(Normalize { mean, std }))
}

/// The channels the model takes: RGB for `do_convert_rgb` or three statistics, grey for a
/// one-value list of statistics; a single number (or no normalisation) keeps the image's.
fn channels_of(
    raw: &RawProcessorConfig,
    normalize: Option<&Normalize>,
) -> Result<Option<Channels>, ConfigError> {
    let grey_stats = normalize.is_some()
        && matches!(&raw.image_mean, Some(RawStats::PerChannel(v)) if v.len() == 1);
    let rgb_stats = normalize.is_some_and(|n| n.mean.len() == 3);
    match (raw.do_convert_rgb.unwrap_or(false), grey_stats) {
        (true, true) => Err(invalid(
            "image_mean",
            "one value per channel for a grey model, but do_convert_rgb is set",
        )),
        (true, false) => Ok(Some(Channels::Rgb)),
        (false, true) => Ok(Some(Channels::Grey)),
        (false, false) if rgb_stats => Ok(Some(Channels::Rgb)),
        (false, false) => Ok(None),
    }
}

impl TryFrom<RawProcessorConfig> for ImageProcessor {
    type Error = ConfigError;

    /// Validates a raw config: the refusals of the module doc, then each step's settings.
    fn try_from(raw: RawProcessorConfig) -> Result<Self, ConfigError> {
        check_refusals(&raw)?;
        let normalize = normalize_of(&raw)?;
        Ok(Self {
            channels: channels_of(&raw, normalize.as_ref())?,
            rescale: rescale_of(&raw)?,
            resize: resize_of(&raw)?,
            crop: crop_of(&raw)?,
            normalize,
        })
    }
}

#[cfg(test)]
#[path = "processor_tests.rs"]
mod tests;
