//! `embeddings`: transformers' `DINOv3ViTEmbeddings`, the tokens of an image.
//!
//! ```text
//! patches = PatchEmbedding(pixels) (+ resample(position_embeddings))   [b, rows cols, hidden]
//! tokens  = [cls_token; register_tokens; patches]                      [b, 1 + R + rows cols, hidden]
//! ```
//!
//! The table is added for the `absolute` kind only, to the patch tokens only. DINOv3's
//! `mask_token` (masked-image pre-training) is not read.

use candle_core::Tensor;
use candle_nn::{Init, VarBuilder};

use crate::plan::Plan;
use crate::vision::absolute::AbsoluteTable;
use crate::vision::config::{PositionKind, VisionConfig};
use crate::vision::patch::PatchEmbedding;
use crate::vision::positions::PatchGrid;

/// The embedding block.
#[derive(Debug, Clone)]
pub struct VisionEmbeddings {
    cls_token: Tensor,
    register_tokens: Option<Tensor>,
    patch: PatchEmbedding,
    table: Option<AbsoluteTable>,
}

impl VisionEmbeddings {
    /// Reads `cls_token` `[1, 1, hidden]`, `register_tokens` `[1, R, hidden]` (when `R > 0`),
    /// `patch_embeddings.*` and, for `absolute` positions, `position_embeddings` under `vb`
    /// (`embeddings`).
    ///
    /// # Errors
    /// Candle errors from the var builder.
    pub fn load(vb: VarBuilder<'_>, cfg: &VisionConfig) -> candle_core::Result<Self> {
        let (h, r) = (cfg.hidden_size, cfg.num_register_tokens);
        let init = Init::Randn {
            mean: 0.0,
            stdev: cfg.initializer_range,
        };
        let register_tokens = match r {
            0 => None,
            _ => Some(vb.get_with_hints((1, r, h), "register_tokens", init)?),
        };
        let table = match cfg.position {
            PositionKind::Absolute => Some(AbsoluteTable::load(vb.clone(), cfg)?),
            _ => None,
        };
        Ok(VisionEmbeddings {
            cls_token: vb.get_with_hints((1, 1, h), "cls_token", init)?,
            register_tokens,
            patch: PatchEmbedding::load(vb.pp("patch_embeddings"), cfg)?,
            table,
        })
    }

    /// The patch embedding.
    pub fn patch_embedding(&self) -> &PatchEmbedding {
        &self.patch
    }

    /// The tokens `[b, 1 + R + rows * cols, hidden]` of `pixels` (`[b, c, h, w]` in the model's
    /// dtype, whose whole patches make `grid`).
    ///
    /// # Errors
    /// Candle errors only.
    pub fn forward(
        &self,
        pixels: &Tensor,
        grid: PatchGrid,
        plan: Plan<'_>,
    ) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let mut patches = self.patch.forward(pixels, grid, plan)?; // [b, n, hidden]
        if let Some(table) = &self.table {
            patches = patches.broadcast_add(&table.for_grid(grid)?)?;
        }
        let prefix = |t: &Tensor| -> candle_core::Result<Tensor> {
            let (_, n, h) = t.dims3()?;
            t.broadcast_as((b, n, h))?.contiguous()
        };
        let mut parts = vec![prefix(&self.cls_token)?];
        if let Some(registers) = &self.register_tokens {
            parts.push(prefix(registers)?);
        }
        parts.push(patches);
        Tensor::cat(&parts, 1)
    }
}
