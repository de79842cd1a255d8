//! Shared helpers of the rotary integration tests: the dense reference rotation (paper eq. 15),
//! independent of the crate's tables and kernels, plus data, shape and position generators.
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use proptest::prelude::*;
use rotary::{Layout, Order, Positions, Shape};
use test_support::SplitMix64;

/// Unit roundoff of f32 (round to nearest): relative error of one rounding.
pub const U_F32: f64 = 1.0 / (1u64 << 24) as f64;

/// The paper's frequencies `theta_i = base^(-2i/r)`, written as `exp(-(2i/r) ln base)` so that
/// they do not share the crate's `powf` formula.
pub fn theta(rotary_dim: usize, base: f64) -> Vec<f64> {
    let r = rotary_dim as f64;
    (0..rotary_dim / 2)
        .map(|i| (-((2 * i) as f64) / r * base.ln()).exp())
        .collect()
}

/// The two coordinates of pair `i`, restated here (not taken from [`Layout::pair`]).
pub fn pair(layout: Layout, i: usize, rotary_dim: usize) -> (usize, usize) {
    match layout {
        Layout::Interleaved => (2 * i, 2 * i + 1),
        Layout::Half => (i, i + rotary_dim / 2),
    }
}

/// The dense `head_dim x head_dim` matrix `a * R^d_{Theta,m}` of the paper's eq. 15, row-major,
/// with the 2x2 block `[[cos, -sin], [sin, cos]]` of pair `i` (angle `angles[i]`) placed on the
/// pair's coordinates for `layout`, and the identity on coordinates `rotary_dim..head_dim`.
pub fn dense_rotation(head_dim: usize, layout: Layout, angles: &[f64], amplitude: f64) -> Vec<f64> {
    let r = 2 * angles.len();
    let mut m = vec![0.0; head_dim * head_dim];
    for j in r..head_dim {
        m[j * head_dim + j] = 1.0;
    }
    for (i, &phi) in angles.iter().enumerate() {
        let (a, b) = pair(layout, i, r);
        let (s, c) = (amplitude * phi.sin(), amplitude * phi.cos());
        m[a * head_dim + a] = c;
        m[a * head_dim + b] = -s;
        m[b * head_dim + a] = s;
        m[b * head_dim + b] = c;
    }
    m
}

/// `m x` for a dense row-major square matrix, in f64.
pub fn matvec(m: &[f64], x: &[f64]) -> Vec<f64> {
    let n = x.len();
    (0..n)
        .map(|row| (0..n).map(|col| m[row * n + col] * x[col]).sum())
        .collect()
}

/// Offset of element `(b, h, s, j)` of a tensor of `shape` in its memory order.
pub fn index(shape: &Shape, b: usize, h: usize, s: usize, j: usize) -> usize {
    let (hs, ss, d) = (shape.heads, shape.seq, shape.head_dim);
    match shape.order {
        Order::HeadMajor => ((b * hs + h) * ss + s) * d + j,
        Order::TokenMajor => ((b * ss + s) * hs + h) * d + j,
    }
}

/// One head vector `(b, h, s, ..)` of `x`, widened to f64.
pub fn head_vec(x: &[f32], shape: &Shape, b: usize, h: usize, s: usize) -> Vec<f64> {
    (0..shape.head_dim)
        .map(|j| f64::from(x[index(shape, b, h, s, j)]))
        .collect()
}

/// The same tensor in the other memory order.
pub fn transpose<T: Copy + Default>(x: &[T], shape: &Shape) -> (Vec<T>, Shape) {
    let order = match shape.order {
        Order::HeadMajor => Order::TokenMajor,
        Order::TokenMajor => Order::HeadMajor,
    };
    let to = Shape { order, ..*shape };
    let mut y = vec![T::default(); x.len()];
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            for s in 0..shape.seq {
                for j in 0..shape.head_dim {
                    y[index(&to, b, h, s, j)] = x[index(shape, b, h, s, j)];
                }
            }
        }
    }
    (y, to)
}

/// The tests' generator ([`SplitMix64`]), one seed per proptest case instead of thousands of
/// shrinkable floats, with the draw of a test tensor's values.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// `n` f32 values in `[-1, 1)` times a scale spread over `2^-4 .. 2^4`.
    pub fn data(&mut self, n: usize) -> Vec<f32> {
        let scale = (2f64).powf(self.uniform(-4.0, 4.0));
        (0..n)
            .map(|_| (scale * self.uniform(-1.0, 1.0)) as f32)
            .collect()
    }
}

impl std::ops::Deref for Rng {
    type Target = SplitMix64;
    fn deref(&self) -> &SplitMix64 {
        &self.0
    }
}

impl std::ops::DerefMut for Rng {
    fn deref_mut(&mut self) -> &mut SplitMix64 {
        &mut self.0
    }
}

/// How the positions of a test call are given; owns the lists a [`Positions`] borrows.
#[derive(Debug, Clone)]
pub enum PosSpec {
    /// `Positions::Range { offset }`.
    Range(usize),
    /// `Positions::Explicit` with `seq` entries shared by every sequence.
    Shared(Vec<u32>),
    /// `Positions::Explicit` with `batch * seq` entries.
    PerSequence(Vec<u32>),
    /// `Positions::Fractional` with `seq` or `batch * seq` entries.
    Fractional(Vec<f64>, bool),
}

impl PosSpec {
    /// The borrowed form the crate takes.
    pub fn positions(&self) -> Positions<'_> {
        match self {
            PosSpec::Range(offset) => Positions::Range { offset: *offset },
            PosSpec::Shared(p) | PosSpec::PerSequence(p) => Positions::Explicit(p),
            PosSpec::Fractional(p, _) => Positions::Fractional(p),
        }
    }

    /// Position of token `s` of sequence `b`, computed here from the spec.
    pub fn position(&self, b: usize, s: usize, seq: usize) -> f64 {
        match self {
            PosSpec::Range(offset) => (offset + s) as f64,
            PosSpec::Shared(p) => f64::from(p[s]),
            PosSpec::PerSequence(p) => f64::from(p[b * seq + s]),
            PosSpec::Fractional(p, per_sequence) => {
                if *per_sequence {
                    p[b * seq + s]
                } else {
                    p[s]
                }
            }
        }
    }

    /// Largest absolute position (for error bounds), 0 if none.
    pub fn max_abs(&self, batch: usize, seq: usize) -> f64 {
        let mut m: f64 = 0.0;
        for b in 0..batch {
            for s in 0..seq {
                m = m.max(self.position(b, s, seq).abs());
            }
        }
        m
    }
}

/// Positions for `batch x seq` tokens of every kind: ranges from offsets below and beyond a
/// `max_table_rows` of a few thousand to a million, explicit integers shared or per sequence up
/// to 2^24, fractional (negative too) shared or per sequence.
pub fn pos_spec(batch: usize, seq: usize) -> impl Strategy<Value = PosSpec> {
    let n = batch * seq;
    prop_oneof![
        (0usize..4096).prop_map(PosSpec::Range),
        (0usize..(1 << 21)).prop_map(PosSpec::Range),
        proptest::collection::vec(0u32..5000, seq).prop_map(PosSpec::Shared),
        proptest::collection::vec(0u32..(1 << 24), seq).prop_map(PosSpec::Shared),
        proptest::collection::vec(0u32..(1 << 17), n).prop_map(PosSpec::PerSequence),
        proptest::collection::vec(-1e4f64..1e5, seq).prop_map(|p| PosSpec::Fractional(p, false)),
        proptest::collection::vec(-1e4f64..1e5, n).prop_map(|p| PosSpec::Fractional(p, true)),
    ]
}

/// A test geometry: shape, rotated dims and layout.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub shape: Shape,
    pub rotary_dim: usize,
    pub layout: Layout,
}

/// Small random geometries: batch 1..3, heads 1..4, seq 0..6, head dims 2..=72 (odd ones too,
/// SIMD widths +- 1), partial rotary dims (even, 2..=head_dim), both orders and layouts.
pub fn geometry() -> impl Strategy<Value = Geometry> {
    (
        1usize..=3,
        1usize..=4,
        0usize..=6,
        2usize..=72,
        any::<prop::sample::Index>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(batch, heads, seq, head_dim, r, token_major, half)| {
            let rotary_dim = 2 * (1 + r.index(head_dim / 2));
            let shape = if token_major {
                Shape::token_major(batch, seq, heads, head_dim)
            } else {
                Shape::head_major(batch, heads, seq, head_dim)
            };
            let layout = if half {
                Layout::Half
            } else {
                Layout::Interleaved
            };
            Geometry {
                shape,
                rotary_dim,
                layout,
            }
        })
}

/// `sqrt(sum x^2)` in f64.
pub fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// `<x, y>` in f64.
pub fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// Number of elements of a shape (small test shapes only).
pub fn len(shape: &Shape) -> usize {
    shape.batch * shape.heads * shape.seq * shape.head_dim
}
