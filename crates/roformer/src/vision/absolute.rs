//! The `absolute` position kind: a learned table over the config's patch grid, added to the
//! patch tokens, and resampled to any other grid as timm's `resample_abs_pos_embed` does
//! (`F.interpolate(mode="bicubic", antialias=True)`).
//!
//! Resampling is linear in the table and separable, so it is two products with fixed weight
//! matrices, and the gradient reaches the table through them:
//!
//! ```text
//! T  [rows0, cols0, h]                      (the table, as a grid)
//! T' = Wy T Wx^T   [rows, cols, h]          Wy [rows, rows0], Wx [cols, cols0]
//! ```
//!
//! Each row of `W` is PyTorch's antialiased cubic filter (`_upsample_bicubic2d_aa`, Keys'
//! kernel with `a = -1/2`, as PIL): output `i` of `n` reads input `j` of `m` with weight
//! `k((j + 1/2 - s (i + 1/2)) / max(s, 1))` over `|.| < 2` (widened by `s = m / n` when
//! shrinking), the weights of a row normalised to sum to 1.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};

use crate::vision::config::VisionConfig;
use crate::vision::positions::PatchGrid;

/// Keys' cubic kernel with `a = -1/2` (PyTorch's antialiased bicubic filter, PIL's).
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// The `[output, input]` weights (row-major) of resampling `input` samples to `output` with
/// PyTorch's antialiased bicubic filter (`align_corners=False`): see the module doc. Each row
/// sums to 1; `input == output` gives the identity.
pub fn bicubic_weights(input: usize, output: usize) -> Vec<f64> {
    let mut w = vec![0.0; output * input];
    if input == 0 || output == 0 {
        return w;
    }
    let scale = input as f64 / output as f64;
    let (support, inv_scale) = if scale >= 1.0 {
        (2.0 * scale, 1.0 / scale)
    } else {
        (2.0, 1.0)
    };
    for (i, row) in w.chunks_exact_mut(input).enumerate() {
        let center = scale * (i as f64 + 0.5);
        // As PyTorch: the window [center - support, center + support), truncated toward zero.
        let lo = ((center - support + 0.5).max(0.0) as usize).min(input);
        let hi = ((center + support + 0.5) as usize).min(input);
        for (j, slot) in row.iter_mut().enumerate().take(hi).skip(lo) {
            *slot = cubic((j as f64 - center + 0.5) * inv_scale);
        }
        let total: f64 = row.iter().sum();
        if total != 0.0 {
            row.iter_mut().for_each(|v| *v /= total);
        }
    }
    w
}

/// `table` (`[1, from.rows * from.cols, h]`, row-major patches) resampled to `to` (`[1,
/// to.rows * to.cols, h]`) by [`bicubic_weights`] along each axis; `table` itself when the grids
/// are equal. Differentiable in `table`.
///
/// # Errors
/// A table whose shape is not the grid's; candle errors.
pub fn resample(table: &Tensor, from: PatchGrid, to: PatchGrid) -> candle_core::Result<Tensor> {
    if from == to {
        return Ok(table.clone());
    }
    let (_, _, h) = table.dims3()?;
    let (dtype, device) = (table.dtype(), table.device());
    let matrix = |m: usize, n: usize| weights_tensor(m, n, dtype, device);
    // [rows0, cols0 h] -> Wy -> [rows, cols0 h]
    let grid = table.reshape((from.rows, from.cols * h))?;
    let tall = matrix(from.rows, to.rows)?.matmul(&grid)?;
    // [rows, cols0, h] -> Wx per row -> [rows, cols, h]
    let tall = tall.reshape((to.rows, from.cols, h))?;
    let wide = matrix(from.cols, to.cols)?.broadcast_matmul(&tall)?;
    wide.reshape((1, to.patches(), h))
}

/// [`bicubic_weights`] as an `[output, input]` tensor.
fn weights_tensor(
    input: usize,
    output: usize,
    dtype: DType,
    device: &Device,
) -> candle_core::Result<Tensor> {
    Tensor::from_vec(bicubic_weights(input, output), (output, input), device)?.to_dtype(dtype)
}

/// `embeddings.position_embeddings`: the learned table `[1, rows0 * cols0, hidden]` over the
/// config's grid.
#[derive(Debug, Clone)]
pub(crate) struct AbsoluteTable {
    table: Tensor,
    grid: PatchGrid,
}

impl AbsoluteTable {
    /// Reads `position_embeddings` under `vb` (the `embeddings` scope).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub(crate) fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let grid = cfg.config_grid();
        let shape = (1, grid.patches(), cfg.hidden_size);
        let init = Init::Randn {
            mean: 0.0,
            stdev: cfg.initializer_range,
        };
        Ok(AbsoluteTable {
            table: vb.get_with_hints(shape, "position_embeddings", init)?,
            grid,
        })
    }

    /// The table for a pass over `grid`, `[1, rows * cols, hidden]`.
    ///
    /// # Errors
    /// Candle errors only.
    pub(crate) fn for_grid(&self, grid: PatchGrid) -> candle_core::Result<Tensor> {
        resample(&self.table, self.grid, grid)
    }
}
