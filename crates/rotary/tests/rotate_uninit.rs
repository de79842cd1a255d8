//! `rotate_uninit`: rotating into uninitialised memory writes every element, exactly as
//! `rotate` does (rotated coordinates and the copied ones past the rotary dims), and writes
//! nothing when it refuses its arguments.

mod common;

use std::mem::MaybeUninit;

use common::{geometry, pos_spec, Geometry, PosSpec, Rng};
use half::{bf16, f16};
use proptest::prelude::*;
use rotary::{rotate, rotate_uninit, Direction, Element, Rope, RopeError, Shape};

/// `rotate` into a zeroed buffer and `rotate_uninit` into fresh capacity, as bit patterns.
fn both<T: Element>(rope: &Rope, g: &Geometry, pos: &PosSpec, x: &[f32]) -> (Vec<T>, Vec<T>) {
    let x: Vec<T> = x.iter().map(|&v| T::from_f32(v)).collect();
    let (b, s) = (g.shape.batch, g.shape.seq);
    let coefficients = rope.coefficients(pos.positions(), b, s).unwrap();
    let table = coefficients.view();
    let mut expected = vec![T::default(); x.len()];
    rotate(&x, &mut expected, g.shape, table, Direction::Forward).unwrap();
    let mut out: Vec<T> = Vec::with_capacity(x.len());
    let spare = &mut out.spare_capacity_mut()[..x.len()];
    rotate_uninit(&x, spare, g.shape, table, Direction::Forward).unwrap();
    // SAFETY: `rotate_uninit` returned Ok: it wrote all `x.len()` elements.
    unsafe { out.set_len(x.len()) };
    (out, expected)
}

fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

fn check(g: &Geometry, pos: &PosSpec, seed: u64) {
    let rope = Rope::new(g.shape.head_dim, g.rotary_dim, 10_000.0, g.layout).unwrap();
    let x = Rng::new(seed).data(common::len(&g.shape));
    let (a, b) = both::<f32>(&rope, g, pos, &x);
    assert_eq!(bits(&a), bits(&b), "f32 {g:?}");
    let (a, b) = both::<f16>(&rope, g, pos, &x);
    assert_eq!(bits(&a), bits(&b), "f16 {g:?}");
    let (a, b) = both::<bf16>(&rope, g, pos, &x);
    assert_eq!(bits(&a), bits(&b), "bf16 {g:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Small geometries of every kind, partial rotary dims (the copied tail) included.
    #[test]
    fn uninit_output_equals_rotate(
        (g, pos) in geometry().prop_flat_map(|g| (Just(g), pos_spec(g.shape.batch, g.shape.seq))),
        seed in any::<u64>(),
    ) {
        check(&g, &pos, seed);
    }
}

/// A shape above the threshold for threads, both orders.
#[test]
fn uninit_output_equals_rotate_on_threads() {
    for shape in [
        Shape::head_major(2, 8, 130, 136),
        Shape::token_major(2, 130, 8, 136),
    ] {
        for layout in [rotary::Layout::Interleaved, rotary::Layout::Half] {
            let g = Geometry {
                shape,
                rotary_dim: 128,
                layout,
            };
            check(&g, &PosSpec::Range(3), 9);
        }
    }
}

/// Refused arguments leave `dst` as it was.
#[test]
fn errors_write_nothing() {
    let rope = Rope::new(8, 8, 10_000.0, rotary::Layout::Half).unwrap();
    let shape = Shape::head_major(1, 2, 3, 8);
    let x = vec![1f32; 48];
    let coefficients = rope.coefficients(rotary::Positions::START, 1, 4).unwrap();
    let mut dst = vec![MaybeUninit::new(7f32); 48];
    let err = rotate_uninit(&x, &mut dst, shape, coefficients.view(), Direction::Forward);
    assert!(matches!(err, Err(RopeError::TableMismatch(_))), "{err:?}");
    // SAFETY: every element was initialised above and nothing was written since.
    assert!(dst.iter().all(|v| unsafe { v.assume_init() } == 7.0));
    let mut short = vec![MaybeUninit::new(7f32); 47];
    let coefficients = rope.coefficients(rotary::Positions::START, 1, 3).unwrap();
    let err = rotate_uninit(
        &x,
        &mut short,
        shape,
        coefficients.view(),
        Direction::Forward,
    );
    assert!(
        matches!(err, Err(RopeError::LengthMismatch { .. })),
        "{err:?}"
    );
}
