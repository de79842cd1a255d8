//! The layers' tensors, read-locked, and their data as plain slices and numbers.

use candle_core::{CpuStorage, Layout, Storage, StorageRef, Tensor};
use candle_nn::Linear;

use super::{Geometry, LayerParts};
use crate::activation::Activation;
use crate::cpu::bf16::{Packed, PackedB};
use crate::norm::Norm;

/// A tensor's storage, read-locked for as long as its data is in use.
pub(super) struct Held<'a> {
    storage: StorageRef<'a>,
    layout: &'a Layout,
}

impl<'a> Held<'a> {
    pub(super) fn new(t: &'a Tensor) -> Self {
        let (storage, layout) = t.storage_and_layout();
        Held { storage, layout }
    }

    /// The elements, if the tensor is contiguous f32 on the CPU.
    pub(super) fn f32s(&self) -> Option<&[f32]> {
        let Storage::Cpu(CpuStorage::F32(data)) = &*self.storage else {
            return None;
        };
        let (start, end) = self.layout.contiguous_offsets()?;
        data.get(start..end)
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

/// A normalisation as plain numbers.
pub(super) enum RowNorm<'a> {
    Layer {
        weight: &'a [f32],
        bias: &'a [f32],
        eps: f32,
    },
    Rms {
        eps: f32,
    },
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

/// A dense layer as slices: `W` `[out, in]` row-major, the bias, and `W^T` packed for the
/// bf16 products when the model runs in bf16.
pub(super) struct Dense<'a> {
    pub(super) weight: &'a [f32],
    pub(super) bias: Option<&'a [f32]>,
    pub(super) bf16: Option<Packed<'a>>,
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

/// An additive mask `[mb, 1, mq, t]` (`mb` 1 or the batch, `mq` 1 or `t`) as rows of keys.
#[derive(Clone, Copy)]
pub(crate) struct MaskView<'a> {
    data: &'a [f32],
    per_sequence: bool,
    per_query: bool,
    t: usize,
}

impl<'a> MaskView<'a> {
    pub(crate) fn new(data: &'a [f32], dims: &[usize], b: usize, t: usize) -> Option<Self> {
        let [mb, 1, mq, mt] = *dims else {
            return None;
        };
        let ok = (mb == 1 || mb == b) && (mq == 1 || mq == t) && mt == t;
        (ok && data.len() == mb * mq * t).then_some(MaskView {
            data,
            per_sequence: mb != 1,
            per_query: mq != 1,
            t,
        })
    }

    /// The additive mask over keys for query `i` of sequence `s` (of the whole batch).
    pub(crate) fn row(&self, s: usize, i: usize) -> &'a [f32] {
        let mq = if self.per_query { self.t } else { 1 };
        let s = if self.per_sequence { s } else { 0 };
        let i = if self.per_query { i } else { 0 };
        let start = (s * mq + i) * self.t;
        &self.data[start..start + self.t]
    }
}
