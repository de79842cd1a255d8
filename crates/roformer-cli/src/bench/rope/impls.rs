//! The implementations timed: our rotation (a cached rope or a table), memcpy and candle-nn.

use anyhow::Result;
use rayon::prelude::*;
use rotary::{
    rotate, rotate_qk_inplace, CosSin, Direction, Element, Layout, NdPositions, NdRope, Positions,
    Rope, RopeSpec, Shape, DEFAULT_BASE,
};
use serde_json::json;

use super::cases::{grid, Case, Rotation};

/// Our side of a case: a cached 1D rope, or a table made once from N-D angles.
pub(super) enum Ours {
    Rope(Rope),
    Table(CosSin),
}

impl Ours {
    pub(super) fn build(case: &Case) -> Result<Ours> {
        let [_, _, t, d] = case.dims;
        Ok(match case.rotation {
            Rotation::Rope1d => Ours::Rope(Rope::new(d, d, DEFAULT_BASE, case.layout)?),
            Rotation::Axial2d => {
                let (rows, cols) = grid(t);
                let rope = NdRope::axial_2d(d, d, DEFAULT_BASE, case.layout)?;
                Ours::Table(rope.table(&NdPositions::grid_2d(rows, cols)?)?)
            }
            Rotation::Yarn => {
                let config = json!({
                    "head_dim": d, "rope_theta": DEFAULT_BASE,
                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 4096},
                });
                Ours::Rope(RopeSpec::from_hf_config(&config)?.rope(case.layout, None)?)
            }
        })
    }

    /// The cos and sin per pair (`[seq, d / 2]` each, row-major) of this rotation's table, for
    /// candle-nn.
    pub(super) fn pair_coefficients(
        &self,
        layout: Layout,
        seq: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let computed;
        let view = match self {
            Ours::Rope(rope) => {
                computed = rope.coefficients(Positions::START, 1, seq)?;
                computed.view()
            }
            Ours::Table(table) => table.view(),
        };
        let r = view.rotary_dim();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for row in 0..seq {
            for i in 0..r / 2 {
                // The second coordinate of a pair holds +sin.
                let (a, b) = layout.pair(i, r);
                cos.push(view.cos()[row * r + a]);
                sin.push(view.sin()[row * r + b]);
            }
        }
        Ok((cos, sin))
    }

    /// q and k in place, one fused call.
    pub(super) fn fused<T: Element>(&self, q: &mut [T], k: &mut [T], shape: Shape) -> Result<()> {
        match self {
            Ours::Rope(rope) => {
                rope.apply_qk_inplace(q, shape, k, shape, Positions::START, Direction::Forward)?
            }
            Ours::Table(table) => {
                rotate_qk_inplace(q, shape, k, shape, table.view(), Direction::Forward)?
            }
        }
        Ok(())
    }

    /// q and k out of place, one call each.
    pub(super) fn out_of_place<T: Element>(
        &self,
        (q, k): (&[T], &[T]),
        (q_out, k_out): (&mut [T], &mut [T]),
        shape: Shape,
    ) -> Result<()> {
        match self {
            Ours::Rope(rope) => {
                rope.apply(q, q_out, shape, Positions::START, Direction::Forward)?;
                rope.apply(k, k_out, shape, Positions::START, Direction::Forward)?;
            }
            Ours::Table(table) => {
                rotate(q, q_out, shape, table.view(), Direction::Forward)?;
                rotate(k, k_out, shape, table.view(), Direction::Forward)?;
            }
        }
        Ok(())
    }
}

/// The implementations timed, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Impl {
    Fused,
    OutOfPlace,
    Memcpy,
    Candle,
    /// Our drop-in for candle-nn's functions (`rotary::candle::rope_i` / `rope`): the kernels
    /// behind candle-nn's arguments, cos/sin tensors instead of our table.
    DropIn,
}

impl Impl {
    pub(super) const ALL: [Impl; 5] = [
        Impl::Fused,
        Impl::OutOfPlace,
        Impl::Memcpy,
        Impl::Candle,
        Impl::DropIn,
    ];

    /// The `impl` field of the JSON output.
    pub(super) fn family(self) -> &'static str {
        match self {
            Impl::Fused | Impl::OutOfPlace | Impl::DropIn => "rotary",
            Impl::Memcpy => "memcpy",
            Impl::Candle => "candle",
        }
    }

    /// The `variant` field: how the implementation was called.
    pub(super) fn variant(self, layout: Layout) -> &'static str {
        match (self, layout) {
            (Impl::Fused, _) => "fused_inplace",
            (Impl::OutOfPlace, _) => "out_of_place",
            (Impl::Memcpy, _) => "copy",
            (Impl::Candle, Layout::Interleaved) => "rope_i",
            (Impl::Candle, Layout::Half) => "rope",
            (Impl::DropIn, Layout::Interleaved) => "candle_rope_i",
            (Impl::DropIn, Layout::Half) => "candle_rope",
        }
    }
}

/// Copies `src` into `dst` in chunks of about 1 MiB spread over the worker threads (one plain
/// copy below that).
pub(super) fn par_copy<T: Copy + Send + Sync>(src: &[T], dst: &mut [T]) {
    let chunk = ((1 << 20) / std::mem::size_of::<T>()).max(1);
    if src.len() <= chunk {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}
