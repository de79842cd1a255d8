//! The absolute table's resampling: timm's (PyTorch's antialiased bicubic) on the committed
//! fixture, identity on the same grid, rows that sum to 1, gradients that reach the table.

use std::path::Path;

use candle_core::{Device, Var};

use super::{max_diff, random};
use crate::vision::absolute::{bicubic_weights, resample};
use crate::vision::positions::PatchGrid;

#[test]
fn vision_resampling_matches_timm() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vision/resample.safetensors");
    let r = candle_core::safetensors::load(path, &Device::Cpu).unwrap();
    let from = PatchGrid { rows: 3, cols: 4 };
    let mut checked = 0;
    for (name, want) in &r {
        let Some(size) = name.strip_prefix("out_") else {
            continue;
        };
        let (rows, cols) = size.split_once('x').unwrap();
        let to = PatchGrid {
            rows: rows.parse().unwrap(),
            cols: cols.parse().unwrap(),
        };
        let got = resample(&r["table"], from, to).unwrap();
        // PyTorch computes the weights in f32: 1e-6 of rounding on values of spread 1.
        let diff = max_diff(&got, want);
        assert!(diff < 1e-5, "{name}: {diff}");
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn vision_bicubic_rows_sum_to_one_and_equal_sizes_are_the_identity() {
    for (m, n) in [(4, 4), (3, 7), (7, 3), (1, 5), (5, 1), (16, 9)] {
        let w = bicubic_weights(m, n);
        for row in w.chunks(m) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{m}->{n}");
        }
        if m == n {
            for (i, row) in w.chunks(m).enumerate() {
                for (j, v) in row.iter().enumerate() {
                    assert_eq!(*v, if i == j { 1.0 } else { 0.0 });
                }
            }
        }
    }
}

#[test]
fn vision_resampled_table_carries_gradients_to_the_table() {
    let table = Var::from_tensor(&random(&[1, 6, 3], 4)).unwrap();
    let from = PatchGrid { rows: 2, cols: 3 };
    let out = resample(table.as_tensor(), from, PatchGrid { rows: 5, cols: 2 }).unwrap();
    assert_eq!(out.dims(), &[1, 10, 3]);
    let grads = out.sum_all().unwrap().backward().unwrap();
    // Each output row's weights sum to 1 per axis, so d(sum)/d(table) sums to 10 per channel.
    let g = grads.get(&table).unwrap().sum((0, 1)).unwrap();
    for v in g.to_vec1::<f32>().unwrap() {
        assert!((v - 10.0).abs() < 1e-4, "{v}");
    }
}
