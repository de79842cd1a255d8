//! The cases: rotation, shape, dtype and layout, defaults and `--quick` ones.

use rotary::{DType, Layout, Shape};

/// The shapes of the issue: three prefill shapes and one decode step.
const DEFAULT_SHAPES: [[usize; 4]; 4] = [
    [1, 32, 4096, 128],
    [4, 16, 2048, 64],
    [1, 8, 16384, 128],
    [1, 32, 1, 128],
];

/// `--quick`: small shapes that still exercise threads and the decode path.
const QUICK_SHAPES: [[usize; 4]; 2] = [[1, 8, 512, 64], [1, 8, 1, 64]];

/// Default cases besides 1D RoPE on [`DEFAULT_SHAPES`], each on a shape that 1D RoPE also runs
/// on (same bytes): a 64 x 64 patch grid (16 heads, dim 64) with axial 2D RoPE, and YaRN.
const VARIANT_CASES: [(Rotation, [usize; 4]); 4] = [
    (Rotation::Rope1d, [1, 16, 4096, 64]),
    (Rotation::Axial2d, [1, 16, 4096, 64]),
    (Rotation::Yarn, [1, 16, 4096, 64]),
    (Rotation::Yarn, [1, 32, 4096, 128]),
];

/// `--quick`: the variants on the first quick shape (a 16 x 32 grid).
const QUICK_VARIANT_CASES: [(Rotation, [usize; 4]); 2] = [
    (Rotation::Axial2d, [1, 8, 512, 64]),
    (Rotation::Yarn, [1, 8, 512, 64]),
];

/// Which rotation our side computes. Every rotation is compared with the same memcpy and
/// candle-nn's `rope`/`rope_i` given the same cos/sin (its cost does not depend on the angles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rotation {
    /// The paper's 1D RoPE, base 10000, all dims rotated.
    Rope1d,
    /// Seed 003's axial 2D RoPE over a `rows x cols` patch grid (`rows * cols = seq`, as square
    /// as `seq` allows), base 10000, all dims rotated; its table is made once, as a vision model
    /// makes it once per resolution.
    Axial2d,
    /// YaRN (factor 4 over 4096 pre-training positions, base 10000) read from a config, with
    /// its attention factor as the amplitude.
    Yarn,
}

impl Rotation {
    pub(super) const ALL: [Rotation; 3] = [Rotation::Rope1d, Rotation::Axial2d, Rotation::Yarn];

    pub(super) fn name(self) -> &'static str {
        match self {
            Rotation::Rope1d => "rope1d",
            Rotation::Axial2d => "axial2d",
            Rotation::Yarn => "yarn",
        }
    }
}

/// The most square `rows x cols` grid of `seq` cells (`rows <= cols`).
pub(super) fn grid(seq: usize) -> (usize, usize) {
    let rows = (1..=seq)
        .take_while(|r| r * r <= seq)
        .filter(|r| seq.is_multiple_of(*r))
        .last()
        .unwrap_or(1);
    (rows, seq / rows)
}

/// One benchmark case.
#[derive(Debug, Clone, Copy)]
pub(super) struct Case {
    pub(super) rotation: Rotation,
    /// `[batch, heads, seq, head_dim]` of q and of k.
    pub(super) dims: [usize; 4],
    pub(super) dtype: DType,
    pub(super) layout: Layout,
}

impl Case {
    pub(super) fn shape(&self) -> Shape {
        let [b, h, t, d] = self.dims;
        Shape::head_major(b, h, t, d)
    }

    pub(super) fn elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// `2 * (bytes(q) + bytes(k)) + seq * head_dim * elem_size`.
    pub(super) fn bytes(&self) -> usize {
        let [_, _, t, d] = self.dims;
        let elem = self.dtype.size_in_bytes();
        2 * 2 * self.elements() * elem + t * d * elem
    }
}

/// Every case of the run: (rotation, shape) pairs x dtypes x layouts, from the flags
/// `--shapes`, `--rotations`, `--quick`, `--dtypes` and `--layouts`.
pub(super) fn cases(
    shapes: &[[usize; 4]],
    rotations: &[Rotation],
    quick: bool,
    dtypes: &[DType],
    layouts: &[Layout],
) -> Vec<Case> {
    let pairs: Vec<(Rotation, [usize; 4])> = match shapes {
        [] => {
            let (shapes, variants) = if quick {
                (&QUICK_SHAPES[..], &QUICK_VARIANT_CASES[..])
            } else {
                (&DEFAULT_SHAPES[..], &VARIANT_CASES[..])
            };
            let wanted = |r: &Rotation| rotations.is_empty() || rotations.contains(r);
            let ropes = shapes.iter().map(|&dims| (Rotation::Rope1d, dims));
            ropes
                .chain(variants.iter().copied())
                .filter(|(r, _)| wanted(r))
                .collect()
        }
        given => {
            let rotations = match rotations {
                [] => &[Rotation::Rope1d][..],
                chosen => chosen,
            };
            let with = |r: Rotation| given.iter().map(move |&dims| (r, dims));
            rotations.iter().flat_map(|&r| with(r)).collect()
        }
    };
    let mut out = Vec::new();
    for (rotation, dims) in pairs {
        for &dtype in dtypes {
            for &layout in layouts {
                out.push(Case {
                    rotation,
                    dims,
                    dtype,
                    layout,
                });
            }
        }
    }
    out
}
