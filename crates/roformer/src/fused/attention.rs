//! Attention by tiles of query rows: scores, softmax and context per (sequence, head, tile).

use rayon::prelude::*;

use super::held::Geometry;
use super::layer::Step;
use crate::cpu::math::{add_mask_max, exp_sum};
use crate::cpu::policy::{query_tile, INFERENCE_SCORE_TILE};
use crate::cpu::{product, Dst, Mat, SharedOut};

impl Step<'_> {
    /// The context `[n * t, hidden]` of rotated `qk` (`[n * t, 2 * hidden]`) and `v`
    /// (`[n * t, hidden]`), head `j` in columns `j * d..(j + 1) * d`.
    pub(super) fn attention(&self, qk: &[f32], v: &[f32]) -> candle_core::Result<Vec<f32>> {
        let Geometry { t, h, heads, d, .. } = *self.geometry;
        let n = self.sequences.len();
        let tile = query_tile(t, INFERENCE_SCORE_TILE);
        let tiles = t.div_ceil(tile);
        let mut context = vec![0f32; n * t * h];
        let out = SharedOut::new(&mut context);
        let scale = 1.0 / (d as f32).sqrt();
        let task = |index: usize, scores: &mut Vec<f32>| -> candle_core::Result<()> {
            let (s, rest) = (index / (heads * tiles), index % (heads * tiles));
            let (head, i0) = (rest / tiles, (rest % tiles) * tile);
            let r = tile.min(t - i0);
            scores.resize(r * t, 0.0);
            let seq = s * t;
            // scores = scale * q[i0..i0 + r] k^T
            product(
                (r, t, d),
                Dst::Slice(scores),
                (0, t),
                false,
                Mat {
                    data: qk,
                    offset: (seq + i0) * 2 * h + head * d,
                    rs: 2 * h,
                    cs: 1,
                },
                Mat {
                    data: qk,
                    offset: seq * 2 * h + h + head * d,
                    rs: 1,
                    cs: 2 * h,
                },
                scale,
                false,
                self.precision,
            )?;
            let mut inv_sums = Vec::with_capacity(r);
            for (i, row) in scores.chunks_exact_mut(t).enumerate() {
                let mask = self
                    .mask
                    .map(|m| m.row(self.sequences.start + s, head, i0 + i));
                let max = add_mask_max(row, mask);
                inv_sums.push(1.0 / exp_sum(row, max));
            }
            // context rows = (p v) / sum p
            let dst_offset = (seq + i0) * h + head * d;
            product(
                (r, d, t),
                Dst::Shared(out),
                (dst_offset, h),
                false,
                Mat::rows(scores, t),
                Mat {
                    data: v,
                    offset: seq * h + head * d,
                    rs: h,
                    cs: 1,
                },
                1.0,
                false,
                self.precision,
            )?;
            for (i, inv) in inv_sums.into_iter().enumerate() {
                // SAFETY: this task alone writes rows i0..i0 + r, columns head * d..+ d; the
                // product above checked that they lie inside the buffer.
                let row = unsafe { out.slice(dst_offset + i * h, d) };
                row.iter_mut().for_each(|c| *c *= inv);
            }
            Ok(())
        };
        let tasks = n * heads * tiles;
        if self.parallel {
            (0..tasks)
                .into_par_iter()
                .try_for_each_init(Vec::new, |scores, i| task(i, scores))?;
        } else {
            let mut scores = Vec::new();
            (0..tasks).try_for_each(|i| task(i, &mut scores))?;
        }
        Ok(context)
    }
}
