//! The patch embedding: one product over unfolded patches against candle's strided `conv2d`,
//! values and gradients, on images whose sides are not multiples of the patch.

use candle_core::{DType, Device, Var};
use candle_nn::{VarBuilder, VarMap};

use super::{max_abs, max_diff, random, tiny};
use crate::mode::{Dropout, Mode};
use crate::plan::Plan;
use crate::vision::config::PositionKind;
use crate::vision::error::VisionError;
use crate::vision::init::initialise;
use crate::vision::patch::{unfold, PatchEmbedding};
use crate::vision::positions::PatchGrid;
use crate::vision::tensors::VisionKind;
use crate::Precision;

/// The patch embedding of the tiny config (patches of 4, 2 channels, hidden 16) on a map.
fn embedding() -> PatchEmbedding {
    let cfg = tiny(PositionKind::RopeAxial, "");
    let varmap = VarMap::new();
    initialise(
        &varmap,
        &cfg,
        VisionKind::Model,
        3,
        DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    {
        // Weights of spread ~1, a bias that matters.
        let vars = varmap.data().lock().unwrap();
        for (name, var) in vars.iter() {
            if name.contains("patch_embeddings") {
                var.set(&random(var.dims(), 9)).unwrap();
            }
        }
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    PatchEmbedding::load(vb.pp("embeddings").pp("patch_embeddings"), &cfg).unwrap()
}

#[test]
fn vision_patches_are_the_strided_convolution_leftover_pixels_dropped() {
    let patch = embedding();
    let d = Dropout::disabled();
    let train = Mode::Train {
        dropout: &d,
        precision: Precision::F32,
    };
    for (h, w) in [(8, 12), (11, 13), (4, 4), (7, 5), (16, 9)] {
        let grid = PatchGrid::of_image(h, w, 4).unwrap();
        let x = Var::from_tensor(&random(&[2, 2, h, w], (h * w) as u64)).unwrap();
        for mode in [Mode::Inference, train] {
            let plan = Plan::new(mode, &Device::Cpu, DType::F32);
            let fast = patch.forward(x.as_tensor(), grid, plan).unwrap();
            let slow = patch.forward_conv(x.as_tensor()).unwrap();
            assert_eq!(fast.dims(), &[2, grid.patches(), 16]);
            // f32 products of 32 terms of spread ~2: 1e-5 of rounding.
            assert!(max_diff(&fast, &slow) < 1e-5, "{h}x{w}");
            // candle's conv2d backward cannot take leftover pixels: the reference's gradient
            // is taken on the cropped image; the dropped pixels must get none from ours.
            let (ch, cw) = (grid.rows * 4, grid.cols * 4);
            let cropped = Var::from_tensor(
                &x.as_tensor()
                    .narrow(2, 0, ch)
                    .unwrap()
                    .narrow(3, 0, cw)
                    .unwrap(),
            )
            .unwrap();
            let slow = patch.forward_conv(cropped.as_tensor()).unwrap();
            let g_fast = fast.sqr().unwrap().sum_all().unwrap().backward().unwrap();
            let g_slow = slow.sqr().unwrap().sum_all().unwrap().backward().unwrap();
            let a = g_fast.get(&x).unwrap();
            let b = g_slow.get(&cropped).unwrap();
            let kept = a.narrow(2, 0, ch).unwrap().narrow(3, 0, cw).unwrap();
            let mass = |t: &candle_core::Tensor| {
                let total = t.abs().unwrap().sum_all().unwrap();
                total.to_scalar::<f32>().unwrap()
            };
            assert_eq!(
                mass(a),
                mass(&kept),
                "{h}x{w}: dropped pixels get no gradient"
            );
            let a = &kept;
            assert!(max_diff(a, b) < 1e-4 * max_abs(b).max(1.0), "{h}x{w}");
        }
    }
}

#[test]
fn vision_unfold_orders_patches_row_major_and_pixels_as_the_kernel() {
    // One channel, 2x2 patches of a 5x7 image numbered 0..35 row-major: 2x3 whole patches,
    // the last row and the last column dropped.
    let x = candle_core::Tensor::arange(0f32, 35.0, &Device::Cpu)
        .unwrap()
        .reshape((1, 1, 5, 7))
        .unwrap();
    let grid = PatchGrid::of_image(5, 7, 2).unwrap();
    assert_eq!((grid.rows, grid.cols), (2, 3));
    let rows: Vec<Vec<f32>> = unfold(&x, grid, 2).unwrap().to_vec2().unwrap();
    assert_eq!(rows[0], vec![0.0, 1.0, 7.0, 8.0]);
    assert_eq!(rows[2], vec![4.0, 5.0, 11.0, 12.0]);
    assert_eq!(rows[3], vec![14.0, 15.0, 21.0, 22.0]);
    assert_eq!(rows.len(), 6);
}

#[test]
fn vision_an_image_smaller_than_a_patch_is_a_typed_error() {
    for (h, w) in [(3, 8), (8, 3), (0, 0)] {
        let err = PatchGrid::of_image(h, w, 4).unwrap_err();
        assert!(
            matches!(err, VisionError::ImageTooSmall { height, width, patch: 4 }
                if (height, width) == (h, w)),
            "{err}"
        );
    }
    assert!(PatchGrid::of_image(4, 4, 0).is_err());
}
