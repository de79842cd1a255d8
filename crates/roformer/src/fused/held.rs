//! The layers' parts and packed weights, their tensors read-locked, and their data as plain
//! slices and numbers.

use candle_core::DType;
use candle_nn::Linear;

use crate::activation::Activation;
use crate::cpu::bf16::PackedB;
use crate::cpu::dense::Dense;
use crate::cpu::math::RowNorm;
use crate::cpu::tensor::Held;
use crate::cpu::Mat;
use crate::norm::Norm;

/// Sizes shared by every layer.
pub(super) struct Geometry {
    pub(super) t: usize,
    pub(super) h: usize,
    pub(super) heads: usize,
    pub(super) d: usize,
    pub(super) inter: usize,
}

/// The parts of one encoder layer the fused path reads.
pub(crate) struct LayerParts<'a> {
    pub query: &'a Linear,
    pub key: &'a Linear,
    pub value: &'a Linear,
    pub heads: usize,
    pub rotary_value: bool,
    pub attention_dense: &'a Linear,
    pub attention_norm: &'a Norm,
    pub intermediate: &'a Linear,
    pub activation: Activation,
    pub output: &'a Linear,
    pub output_norm: &'a Norm,
    /// The epsilon of the layer norms (`layer_norm_eps`).
    pub layer_norm_eps: f64,
    /// The weights packed for bf16 products, when the model runs in bf16.
    pub packed: Option<&'a PackedLayer>,
}

/// A layer's dense weights packed once for the bf16 products (`W^T`, `in x out`).
#[derive(Debug)]
pub(crate) struct PackedLayer {
    pub(crate) query: PackedB,
    pub(crate) key: PackedB,
    pub(crate) value: PackedB,
    pub(crate) dense: PackedB,
    pub(crate) intermediate: PackedB,
    pub(crate) output: PackedB,
}

impl PackedLayer {
    /// Packs the dense weights of `parts` (each must be a contiguous f32 CPU tensor).
    ///
    /// # Errors
    /// A weight that is not f32 on the CPU.
    pub(crate) fn new(parts: &LayerParts<'_>) -> candle_core::Result<PackedLayer> {
        let pack = |layer: &Linear| -> candle_core::Result<PackedB> {
            let (out, inp) = layer.weight().dims2()?;
            let w = layer.weight().to_dtype(DType::F32)?.contiguous()?;
            let data = w.flatten_all()?.to_vec1::<f32>()?;
            Ok(PackedB::new(Mat::rows(&data, inp).t(), inp, out, true))
        };
        Ok(PackedLayer {
            query: pack(parts.query)?,
            key: pack(parts.key)?,
            value: pack(parts.value)?,
            dense: pack(parts.attention_dense)?,
            intermediate: pack(parts.intermediate)?,
            output: pack(parts.output)?,
        })
    }
}

/// The held weight and bias of a dense layer.
struct HeldLinear<'a> {
    weight: Held<'a>,
    bias: Option<Held<'a>>,
}

impl<'a> HeldLinear<'a> {
    fn new(l: &'a Linear) -> Self {
        HeldLinear {
            weight: Held::new(l.weight()),
            bias: l.bias().map(Held::new),
        }
    }

    /// `W [out, in]` row-major, `b [out]` and the packed `W^T` (`packed`, which must then be
    /// `in x out`), if the tensors are contiguous f32 of those sizes.
    fn get<'p>(&'p self, out: usize, inp: usize, packed: Option<&'p PackedB>) -> Option<Dense<'p>> {
        let weight = self.weight.f32s().filter(|w| w.len() == out * inp)?;
        let bias = match &self.bias {
            Some(b) => Some(b.f32s().filter(|b| b.len() == out)?),
            None => None,
        };
        let bf16 = match packed {
            Some(p) => Some(p.view()).filter(|v| v.k() == inp && v.n() == out),
            None => None,
        };
        if packed.is_some() && bf16.is_none() {
            return None;
        }
        Some(Dense { weight, bias, bf16 })
    }
}

/// Holds a layer norm's weight and bias (`None` for an RMS norm, which has none, or a layer
/// norm without bias, which this path does not take).
fn held_norm(norm: &Norm) -> Option<(Held<'_>, Held<'_>)> {
    match norm {
        Norm::Layer { weight, bias, .. } => Some((Held::new(weight), Held::new(bias))),
        Norm::Rms { .. } => None,
    }
}

/// The norm as numbers; `layer_norm_eps` is the epsilon a layer norm was built with.
fn row_norm<'a>(
    norm: &Norm,
    held: &'a Option<(Held<'_>, Held<'_>)>,
    width: usize,
    layer_norm_eps: f64,
) -> Option<RowNorm<'a>> {
    match (norm, held) {
        (Norm::Layer { .. }, Some((w, b))) => Some(RowNorm::Layer {
            weight: w.f32s().filter(|w| w.len() == width)?,
            bias: b.f32s().filter(|b| b.len() == width)?,
            eps: layer_norm_eps as f32,
        }),
        (Norm::Rms { eps }, _) => Some(RowNorm::Rms { eps: *eps as f32 }),
        _ => None,
    }
}

/// A layer's tensors, read-locked.
pub(super) struct HeldLayer<'a> {
    parts: &'a LayerParts<'a>,
    query: HeldLinear<'a>,
    key: HeldLinear<'a>,
    value: HeldLinear<'a>,
    dense: HeldLinear<'a>,
    attention_norm: Option<(Held<'a>, Held<'a>)>,
    intermediate: HeldLinear<'a>,
    output: HeldLinear<'a>,
    output_norm: Option<(Held<'a>, Held<'a>)>,
}

impl<'a> HeldLayer<'a> {
    pub(super) fn new(parts: &'a LayerParts<'a>) -> Self {
        HeldLayer {
            parts,
            query: HeldLinear::new(parts.query),
            key: HeldLinear::new(parts.key),
            value: HeldLinear::new(parts.value),
            dense: HeldLinear::new(parts.attention_dense),
            attention_norm: held_norm(parts.attention_norm),
            intermediate: HeldLinear::new(parts.intermediate),
            output: HeldLinear::new(parts.output),
            output_norm: held_norm(parts.output_norm),
        }
    }

    /// The layer as slices, if every tensor is contiguous f32 of the expected size.
    pub(super) fn plan(&self, g: &Geometry) -> Option<LayerPlan<'_>> {
        let (h, inter, eps) = (g.h, g.inter, self.parts.layer_norm_eps);
        let packed = self.parts.packed;
        Some(LayerPlan {
            query: self.query.get(h, h, packed.map(|p| &p.query))?,
            key: self.key.get(h, h, packed.map(|p| &p.key))?,
            value: self.value.get(h, h, packed.map(|p| &p.value))?,
            dense: self.dense.get(h, h, packed.map(|p| &p.dense))?,
            attention_norm: row_norm(self.parts.attention_norm, &self.attention_norm, h, eps)?,
            intermediate: self
                .intermediate
                .get(inter, h, packed.map(|p| &p.intermediate))?,
            activation: self.parts.activation,
            output: self.output.get(h, inter, packed.map(|p| &p.output))?,
            output_norm: row_norm(self.parts.output_norm, &self.output_norm, h, eps)?,
            rotary_value: self.parts.rotary_value,
        })
    }
}

/// One layer's weights as slices.
pub(super) struct LayerPlan<'a> {
    pub(super) query: Dense<'a>,
    pub(super) key: Dense<'a>,
    pub(super) value: Dense<'a>,
    pub(super) dense: Dense<'a>,
    pub(super) attention_norm: RowNorm<'a>,
    pub(super) intermediate: Dense<'a>,
    pub(super) activation: Activation,
    pub(super) output: Dense<'a>,
    pub(super) output_norm: RowNorm<'a>,
    pub(super) rotary_value: bool,
}
