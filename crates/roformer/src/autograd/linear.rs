//! A dense layer as one op: `y = act(x W^T + b)` over all rows of `x` at once.
//!
//! ```text
//! forward   u = x W^T + b        (b preloaded into the output, the product accumulates)
//!           y = gelu(u) or u     (u kept for the backward when the GELU is fused)
//! backward  du = g * gelu'(u) or g,    gelu'(u) = Phi(u) + u phi(u)
//!           dx = du W,   dW = du^T x,   db = sum over rows of du
//! ```
//!
//! `x` is `[..., in]` (any leading dims, flattened to rows), `W` `[out, in]`, `b` `[out]`.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Storage, Tensor};
use candle_nn::{Linear, Module};
use rayon::prelude::*;

use crate::activation::Activation;
use crate::cpu::bf16::PackedB;
use crate::cpu::math::{gelu_backward, gelu_erf};
use crate::cpu::policy::PASS_CHUNK;
use crate::cpu::product::product_packed;
use crate::cpu::rows::{build_rows, column_sums};
use crate::cpu::tensor::{f32_slice, tensor, with_f32};
use crate::cpu::{product, Dst, Mat, Precision};

/// `act(layer(x))` as one op on f32 CPU tensors, products in `precision` (the erf GELU fused,
/// other activations applied after it).
///
/// # Errors
/// Shapes that do not fit the layer; candle errors (tensors that are not f32 on the CPU).
pub(crate) fn linear(
    x: &Tensor,
    layer: &Linear,
    activation: Option<Activation>,
    precision: Precision,
    packed: Option<&PackedWeight>,
) -> candle_core::Result<Tensor> {
    let w = layer.weight();
    let (out_dim, in_dim) = w.dims2()?;
    if x.dim(candle_core::D::Minus1)? != in_dim {
        return Err(candle_core::Error::Msg(format!(
            "linear: input width {} for a weight of {out_dim}x{in_dim}",
            x.dim(candle_core::D::Minus1)?
        )));
    }
    let gelu = activation == Some(Activation::Gelu);
    // Without an input that carries gradients no backward can run: nothing to keep for it.
    let tracked = x.track_op() || w.track_op() || layer.bias().is_some_and(Tensor::track_op);
    let weight_fixed = !w.track_op() && !layer.bias().is_some_and(Tensor::track_op);
    let packed = match packed {
        Some(cache) if weight_fixed && precision.effective() == Precision::Bf16 => {
            Some(cache.get_or_pack(w)?)
        }
        _ => None,
    };
    let op = LinearOp {
        gelu,
        precision,
        pre: OnceLock::new(),
        keep_pre: gelu && tracked,
        packed,
    };
    let x = x.contiguous()?;
    let w = w.contiguous()?;
    let y = match layer.bias() {
        Some(b) => x.apply_op3(&w, &b.contiguous()?, op)?,
        None => x.apply_op2(&w, op)?,
    };
    match activation {
        Some(a) if !gelu => a.forward(&y),
        _ => Ok(y),
    }
}

/// `act(layer(x))` of candle ops (candle-nn's `Linear`, then [`Activation::forward`]) on any
/// device and dtype: the reference of [`linear`].
///
/// # Errors
/// Shapes that do not fit the layer; candle errors.
pub(crate) fn linear_slow(
    x: &Tensor,
    layer: &Linear,
    activation: Option<Activation>,
) -> candle_core::Result<Tensor> {
    let y = layer.forward(x)?;
    match activation {
        Some(a) => a.forward(&y),
        None => Ok(y),
    }
}

/// A dense layer's `W^T` packed for the bf16 products once, on first use, for a layer whose
/// weight never changes: [`linear`] fills and reads it only when neither the weight nor the
/// bias is a variable or computed from one (a model loaded for inference). One cache belongs
/// to one layer; its clones share it (as a cloned layer shares its weight).
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedWeight(Arc<OnceLock<Arc<PackedB>>>);

impl PackedWeight {
    /// The packed `W^T` of `w` (`[out, in]`), packed now if this is the first call.
    pub(crate) fn get_or_pack(&self, w: &Tensor) -> candle_core::Result<Arc<PackedB>> {
        if let Some(packed) = self.0.get() {
            return Ok(packed.clone());
        }
        let (out_dim, in_dim) = w.dims2()?;
        let packed = with_f32(w, "linear weight", |w| {
            Ok(Arc::new(PackedB::new(
                Mat::rows(w, in_dim).t(),
                in_dim,
                out_dim,
                true,
            )))
        })?;
        // Two threads packing at once store the same words: either may win.
        Ok(self.0.get_or_init(|| packed).clone())
    }
}

/// The op; `precision` is that of its three products, `pre` holds the pre-activation when the
/// GELU is fused and a backward may run (`keep_pre`); `packed`, the weight packed once (the
/// forward's product then reads it).
struct LinearOp {
    gelu: bool,
    precision: Precision,
    pre: OnceLock<Vec<f32>>,
    keep_pre: bool,
    packed: Option<Arc<PackedB>>,
}

impl LinearOp {
    fn forward(
        &self,
        (x, xl): (&[f32], &Layout),
        (w, wl): (&[f32], &Layout),
        bias: Option<&[f32]>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (out_dim, in_dim) = wl.shape().dims2()?;
        let rows = x.len() / in_dim.max(1);
        if bias.is_some_and(|b| b.len() != out_dim) {
            return Err(candle_core::Error::Msg("linear: bias length".into()));
        }
        // Every row the bias (zeros without one), written once, in blocks on the threads.
        let per_block = (PASS_CHUNK / out_dim.max(1)).max(1);
        let blocks: Vec<Range<usize>> = (0..rows)
            .step_by(per_block)
            .map(|start| start..(start + per_block).min(rows))
            .collect();
        let mut y = build_rows(rows, out_dim, &blocks, true, |_, out| {
            out.init(None, &[bias]);
            Ok(())
        })?;
        match &self.packed {
            Some(packed) => product_packed(
                rows,
                Dst::Slice(&mut y),
                (0, out_dim),
                bias.is_some(),
                Mat::rows(x, in_dim),
                packed.view(),
                1.0,
                true,
            )?,
            None => product(
                (rows, out_dim, in_dim),
                Dst::Slice(&mut y),
                (0, out_dim),
                bias.is_some(),
                Mat::rows(x, in_dim),
                Mat::rows(w, in_dim).t(),
                1.0,
                true,
                self.precision,
            )?,
        }
        if self.gelu {
            let pre = self.keep_pre.then(|| y.clone());
            y.par_chunks_mut(PASS_CHUNK).for_each(gelu_erf);
            if let Some(pre) = pre {
                // A fresh op per call: the cell is empty.
                let _ = self.pre.set(pre);
            }
        }
        let mut dims = xl.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = out_dim;
        }
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }

    /// `(dx, dW, db)` from the incoming gradient.
    fn backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        g: &Tensor,
        with_bias: bool,
    ) -> candle_core::Result<(Tensor, Tensor, Option<Tensor>)> {
        let (out_dim, in_dim) = w.dims2()?;
        let rows = x.elem_count() / in_dim.max(1);
        let gelu_du;
        let g = g.contiguous()?;
        let (g_storage, g_layout) = g.storage_and_layout();
        let Storage::Cpu(g_cpu) = &*g_storage else {
            return Err(candle_core::Error::Msg(
                "linear backward: expected a CPU gradient".into(),
            ));
        };
        let g = f32_slice(g_cpu, g_layout, "linear backward")?;
        // du = g (borrowed), or g * gelu'(u) in a new buffer.
        let du: &[f32] = if self.gelu {
            let pre = self.pre.get().ok_or_else(|| {
                candle_core::Error::Msg("linear backward: no saved pre-activation".into())
            })?;
            let mut d = vec![0f32; g.len()];
            d.par_chunks_mut(PASS_CHUNK)
                .zip(g.par_chunks(PASS_CHUNK).zip(pre.par_chunks(PASS_CHUNK)))
                .for_each(|(d, (g, u))| gelu_backward(d, g, u));
            gelu_du = d;
            &gelu_du
        } else {
            g
        };
        let dx = with_f32(w, "linear backward", |w| {
            let mut dx = vec![0f32; rows * in_dim];
            product(
                (rows, in_dim, out_dim),
                Dst::Slice(&mut dx),
                (0, in_dim),
                false,
                Mat::rows(du, out_dim),
                Mat::rows(w, in_dim),
                1.0,
                true,
                self.precision,
            )?;
            Ok(dx)
        })?;
        let dw = with_f32(x, "linear backward", |x| {
            let mut dw = vec![0f32; out_dim * in_dim];
            product(
                (out_dim, in_dim, rows),
                Dst::Slice(&mut dw),
                (0, in_dim),
                false,
                Mat::rows(du, out_dim).t(),
                Mat::rows(x, in_dim),
                1.0,
                true,
                self.precision,
            )?;
            Ok(dw)
        })?;
        let db = if with_bias {
            let sums = column_sums(rows, out_dim, |i, acc| {
                let row = &du[i * out_dim..];
                acc.iter_mut().zip(row).for_each(|(s, v)| *s += v);
            });
            Some(tensor(sums, &Shape::from(out_dim))?)
        } else {
            None
        };
        Ok((tensor(dx, x.shape())?, tensor(dw, w.shape())?, db))
    }
}

impl CustomOp3 for LinearOp {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(
            (f32_slice(s1, l1, "linear x")?, l1),
            (f32_slice(s2, l2, "linear weight")?, l2),
            Some(f32_slice(s3, l3, "linear bias")?),
        )
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = self.backward(x, w, g, true)?;
        Ok((Some(dx), Some(dw), db))
    }
}

impl CustomOp2 for LinearOp {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(
            (f32_slice(s1, l1, "linear x")?, l1),
            (f32_slice(s2, l2, "linear weight")?, l2),
            None,
        )
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.backward(x, w, g, false)?;
        Ok((Some(dx), Some(dw)))
    }
}
