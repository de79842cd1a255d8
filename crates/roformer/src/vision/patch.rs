//! `embeddings.patch_embeddings`: a convolution of kernel and stride `p` (transformers'
//! `nn.Conv2d(c, hidden, p, stride=p)`), done as one product over the unfolded patches.
//!
//! ```text
//! pixels [b, c, h, w] -> crop to [b, c, rows p, cols p]        (pixels past the last whole patch dropped)
//!        -> unfold    [b rows cols, c p p]                     (patch-major, then channel, row, column)
//!        -> x W^T + b [b rows cols, hidden]                    W = conv weight [hidden, c, p, p] as [hidden, c p p]
//!        -> tokens    [b, rows cols, hidden]                   (row-major patches, as `flatten(2).transpose(1, 2)`)
//! ```
//!
//! The product runs as the encoder's dense layers do (the fused CPU op where the plan has the
//! CPU kernels, in its precision); [`PatchEmbedding::forward_conv`] is the reference, candle's
//! `conv2d`.

use candle_core::Tensor;
use candle_nn::{Init, Linear, VarBuilder};

use crate::plan::Plan;
use crate::vision::config::VisionConfig;
use crate::vision::ops::{dense, Dense};
use crate::vision::positions::PatchGrid;

/// The patch embedding: weight `[hidden, c, p, p]`, bias `[hidden]`.
#[derive(Debug, Clone)]
pub struct PatchEmbedding {
    weight: Tensor,
    bias: Tensor,
    patch: usize,
}

impl PatchEmbedding {
    /// Reads `weight` and `bias` under `vb` (`embeddings.patch_embeddings`).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let (h, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let init = Init::Randn {
            mean: 0.0,
            stdev: cfg.initializer_range,
        };
        Ok(PatchEmbedding {
            weight: vb.get_with_hints((h, c, p, p), "weight", init)?,
            bias: vb.get_with_hints(h, "bias", Init::Const(0.0))?,
            patch: p,
        })
    }

    /// The tokens `[b, rows * cols, hidden]` of `pixels` (`[b, c, h, w]`, whose whole patches
    /// make `grid`): the unfolded patches times the weight.
    ///
    /// # Errors
    /// Pixels whose channels or size do not fit; candle errors.
    pub fn forward(
        &self,
        pixels: &Tensor,
        grid: PatchGrid,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let (hidden, c, p, _) = self.weight.dims4()?;
        let b = pixels.dim(0)?;
        let patches = unfold(pixels, grid, p)?; // [b rows cols, c p p]
        let layer = Linear::new(
            self.weight.reshape((hidden, c * p * p))?,
            Some(self.bias.clone()),
        );
        dense(&Dense::new(layer), &patches, None, plan)?.reshape((b, grid.patches(), hidden))
    }

    /// [`PatchEmbedding::forward`] as candle's strided convolution, `[b, rows * cols, hidden]`:
    /// the reference.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward_conv(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let y = pixels.conv2d(&self.weight, 0, self.patch, 1, 1)?; // [b, hidden, rows, cols]
        let y = y.broadcast_add(&self.bias.reshape((1, (), 1, 1))?)?;
        y.flatten_from(2)?.transpose(1, 2)?.contiguous()
    }
}

/// The whole `p x p` patches of `pixels` (`[b, c, h, w]`) making `grid`, one row each:
/// `[b * rows * cols, c * p * p]`, the patches row-major, each row channel-major then pixel
/// row then pixel column (the order of a conv weight's `[c, p, p]`).
///
/// # Errors
/// A grid larger than the image; candle errors.
pub fn unfold(pixels: &Tensor, grid: PatchGrid, p: usize) -> candle_core::Result<Tensor> {
    let (b, c, _, _) = pixels.dims4()?;
    let (rows, cols) = (grid.rows, grid.cols);
    let cropped = pixels.narrow(2, 0, rows * p)?.narrow(3, 0, cols * p)?;
    cropped
        .reshape((b, c, rows, p, cols, p))? // [b, c, rows, p, cols, p]
        .permute((0, 2, 4, 1, 3, 5))? // [b, rows, cols, c, p, p]
        .contiguous()?
        .reshape((b * rows * cols, c * p * p))
}
