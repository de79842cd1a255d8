//! The rotary kernels as candle operations on [`Tensor`]s (feature `candle`).
//!
//! A 4D tensor of q, k or v heads is rotated token by token:
//!
//! ```text
//! y[.., j] = x[.., j] * C[m, j] + x[.., partner(j)] * S[m, j]     (y = R_m x,   Direction::Forward)
//! y[.., j] = x[.., j] * C[m, j] - x[.., partner(j)] * S[m, j]     (y = R_m^T x, Direction::Inverse)
//! ```
//!
//! with the token's table row `(C, S)` (see [`CosSin`](crate::CosSin)) and coordinates past the
//! table's rotary dims passed through. Tensors are `[batch, heads, seq, head_dim]`
//! ([`Order::HeadMajor`]) or `[batch, seq, heads, head_dim]` ([`Order::TokenMajor`]), of dtype
//! f32, f16 or bf16.
//!
//! On the CPU the rotation runs through this crate's kernels ([`rotate`](crate::rotate)) on the
//! tensor's contiguous storage. On other devices it falls back to [`rotate_slow`], the same
//! formula as plain candle tensor ops (multiply, add, `index_select`), which is also the
//! reference the kernels are tested against.
//!
//! Both paths are differentiable: the gradient of `y = R_m x` with respect to `x` is
//! `R_m^T dy`, which the CPU op computes with [`Direction::Inverse`] (and the slow path gets
//! from candle's autograd).
//!
//! # A drop-in for `candle_nn::rotary_emb`
//!
//! [`rope_i`], [`rope`] and [`rope_thd`] take candle-nn 0.11's arguments (`xs` `[b, h, t, d]`,
//! or `[b, t, h, d]` for `rope_thd`; `cos`/`sin` `[t, d/2]` or `[b, t, d/2]`, one dtype) and
//! return its results, so a model switches by changing one `use` line. What differs:
//!
//! - they carry a backward: the gradient with respect to `xs` is `R^T dy` (with respect to
//!   `cos` and `sin` too, when those are tracked); candle-nn's ops have none;
//! - on the CPU, for f32, f16 and bf16, they run this crate's kernels on the tensors'
//!   contiguous storage (cos/sin widened to f32 once per call). f32 results equal candle-nn's
//!   bit for bit (the same two products and one difference or sum per coordinate); f16 and bf16
//!   ones are candle-nn's f32 arithmetic on the widened values, rounded once, where candle-nn
//!   rounds every product and sum to the 16-bit type;
//! - on other devices (and for f64) they call candle-nn's op, or, when `xs`, `cos` or `sin` is
//!   tracked by autograd, the same formula from plain candle ops, which candle differentiates;
//! - non-contiguous `xs`, `cos` or `sin` are copied to contiguous tensors (candle-nn refuses
//!   them with an error);
//! - `cos` and `sin` must have the same shape (candle-nn accepts a 2D `cos` with a 3D `sin`);
//!   3D ones with more rows than `t` use rows `0..t` of each sequence (candle-nn's CPU op reads
//!   sequence `i`'s rows from row `i * t`, the right ones only when there are exactly `t`).
//!
//! ```
//! use candle_core::{DType, Device, Tensor, Var};
//! use rotary::candle::rope; // was: use candle_nn::rotary_emb::rope;
//!
//! let dev = Device::Cpu;
//! let (b, h, t, d) = (1, 2, 5, 8);
//! // cos/sin [t, d/2] of the angles m * 10000^(-2i/d), as a candle model makes them.
//! let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1e4f32.powf(-2.0 * i as f32 / d as f32)).collect();
//! let inv_freq = Tensor::from_vec(inv_freq, (1, d / 2), &dev)?;
//! let m = Tensor::arange(0u32, t as u32, &dev)?.to_dtype(DType::F32)?.reshape((t, 1))?;
//! let angles = m.matmul(&inv_freq)?;
//! let (cos, sin) = (angles.cos()?, angles.sin()?);
//!
//! let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (b, h, t, d), &dev)?)?;
//! let y = rope(x.as_tensor(), &cos, &sin)?;
//! let theirs = candle_nn::rotary_emb::rope(x.as_tensor(), &cos, &sin)?;
//! let diff = (&y - &theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
//! assert_eq!(diff, 0.0); // f32: bit for bit
//!
//! // A rotation keeps norms, so the gradient of sum(y^2) is R^T (2 R x) = 2 x.
//! let grads = y.sqr()?.sum_all()?.backward()?;
//! let dx = grads.get(x.as_tensor()).expect("x is tracked");
//! let err = (dx - (x.as_tensor() * 2.0)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
//! assert!(err < 1e-5);
//! # Ok::<(), candle_core::Error>(())
//! ```

mod dropin;

pub use dropin::{rope, rope_i, rope_thd};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Tensor, D};

use crate::apply::{rotate_uninit, Direction, Order, Shape};
use crate::element::Element;
use crate::error::try_with_capacity;
use crate::positions::Positions;
use crate::rope::{Coefficients, Rope};
use crate::table::CosSinView;

/// Rotates `x` by `rope` at `positions`: `y = R_m x` for every head of every token.
///
/// `x` is `[batch, heads, seq, head_dim]` for [`Order::HeadMajor`] or
/// `[batch, seq, heads, head_dim]` for [`Order::TokenMajor`]; `positions` gives one position per
/// token (`seq` shared entries or `batch * seq`, sequence-major) or a range from an offset.
///
/// # Errors
/// A candle error wrapping a [`RopeError`](crate::RopeError) when `x` is not 4D, its head dim is
/// not the rope's, its dtype is not f32/f16/bf16, or the positions do not fit the shape.
pub fn apply_rope(
    x: &Tensor,
    rope: &Rope,
    positions: Positions<'_>,
    order: Order,
) -> candle_core::Result<Tensor> {
    let shape = shape_of(x, order)?;
    if shape.head_dim != rope.head_dim() {
        return Err(candle_core::Error::wrap(
            crate::error::RopeError::HeadDimMismatch {
                what: "x",
                expected: rope.head_dim(),
                got: shape.head_dim,
            },
        ));
    }
    let coefficients = rope
        .coefficients(positions, shape.batch, shape.seq)
        .map_err(candle_core::Error::wrap)?;
    rotate_tensor(x, coefficients, order, Direction::Forward)
}

/// Rotates `x` (laid out as `order` says) with given coefficients: `R x` or `R^T x`.
///
/// The coefficients hold `seq` rows shared by the batch or `batch * seq` rows, one per token.
/// The result is differentiable with respect to `x`.
///
/// # Errors
/// As [`apply_rope`], and when the coefficients' row count fits neither `seq` nor
/// `batch * seq`.
pub fn rotate_tensor(
    x: &Tensor,
    coefficients: Coefficients,
    order: Order,
    direction: Direction,
) -> candle_core::Result<Tensor> {
    let shape = shape_of(x, order)?;
    if !x.device().is_cpu() {
        return rotate_slow(x, &coefficients, order, direction);
    }
    let op = RotaryOp {
        coefficients,
        shape,
        direction,
    };
    x.contiguous()?.apply_op1(op)
}

/// The rotation of [`rotate_tensor`] written with plain candle tensor ops, computed in f32 and
/// rounded once to `x`'s dtype: the reference the kernels are tested against, and the path
/// taken on devices other than the CPU.
///
/// # Errors
/// As [`rotate_tensor`].
pub fn rotate_slow(
    x: &Tensor,
    coefficients: &Coefficients,
    order: Order,
    direction: Direction,
) -> candle_core::Result<Tensor> {
    let shape = shape_of(x, order)?;
    let view = coefficients.view();
    let r = view.rotary_dim();
    let rows = view.rows();
    if r > shape.head_dim {
        return Err(candle_core::Error::wrap(
            crate::error::RopeError::RotaryDimTooLarge {
                rotary_dim: r,
                head_dim: shape.head_dim,
            },
        ));
    }
    let per_sequence = if rows == shape.seq {
        false
    } else if Some(rows) == shape.batch.checked_mul(shape.seq) {
        true
    } else {
        return Err(candle_core::Error::wrap(
            crate::error::RopeError::TableMismatch(format!(
                "{rows} rows given for batch {} x seq {}: need seq or batch * seq rows",
                shape.batch, shape.seq
            )),
        ));
    };
    let b = if per_sequence { shape.batch } else { 1 };
    let table_shape = match order {
        Order::HeadMajor => (b, 1, shape.seq, r),
        Order::TokenMajor => (b, shape.seq, 1, r),
    };
    let device = x.device();
    let cos = Tensor::from_slice(view.cos(), table_shape, device)?;
    let sin = Tensor::from_slice(view.sin(), table_shape, device)?;
    // partner[j]: the coordinate that rotates together with coordinate j.
    let mut partner = vec![0u32; r];
    for i in 0..r / 2 {
        let (a, b) = view.layout().pair(i, r);
        partner[a] = b as u32;
        partner[b] = a as u32;
    }
    let partner = Tensor::from_vec(partner, r, device)?;

    let xf = x.to_dtype(DType::F32)?;
    let rotated = xf.narrow(D::Minus1, 0, r)?;
    let swapped = rotated.contiguous()?.index_select(&partner, 3)?;
    let direct = rotated.broadcast_mul(&cos)?;
    let cross = swapped.broadcast_mul(&sin)?;
    let y = match direction {
        Direction::Forward => (direct + cross)?,
        Direction::Inverse => (direct - cross)?,
    };
    let y = if r < shape.head_dim {
        let pass = xf.narrow(D::Minus1, r, shape.head_dim - r)?;
        Tensor::cat(&[&y, &pass], D::Minus1)?
    } else {
        y
    };
    y.to_dtype(x.dtype())
}

/// The rotary [`Shape`] of a 4D tensor laid out as `order` says.
fn shape_of(x: &Tensor, order: Order) -> candle_core::Result<Shape> {
    let (a, b, c, d) = x.dims4()?;
    Ok(match order {
        Order::HeadMajor => Shape::head_major(a, b, c, d),
        Order::TokenMajor => Shape::token_major(a, b, c, d),
    })
}

/// The CPU custom op: one rotation of a contiguous tensor, with its backward.
struct RotaryOp {
    coefficients: Coefficients,
    shape: Shape,
    direction: Direction,
}

impl RotaryOp {
    fn run<T: Element + candle_core::WithDType>(
        &self,
        storage: &[T],
        layout: &Layout,
    ) -> candle_core::Result<Vec<T>> {
        let src = contiguous(storage, layout, "rotary: input")?;
        rotated(src, self.shape, self.coefficients.view(), self.direction)
    }
}

/// The elements of a contiguous tensor's storage; `what` names the tensor in errors.
pub(crate) fn contiguous<'a, T>(
    storage: &'a [T],
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a [T]> {
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{what} is not contiguous")))?;
    storage
        .get(start..end)
        .ok_or_else(|| candle_core::Error::Msg(format!("{what} out of range")))
}

/// `R x` (or `R^T x`) of `src` into a new vector, written once by the kernels: no zero fill
/// first (which cost about a fifth of the call on large tensors).
pub(crate) fn rotated<T: Element>(
    src: &[T],
    shape: Shape,
    table: CosSinView<'_>,
    direction: Direction,
) -> candle_core::Result<Vec<T>> {
    let n = src.len();
    let mut dst = try_with_capacity("rope output", n).map_err(candle_core::Error::wrap)?;
    let spare = &mut dst.spare_capacity_mut()[..n];
    rotate_uninit(src, spare, shape, table, direction).map_err(candle_core::Error::wrap)?;
    // SAFETY: `rotate_uninit` returned Ok, so it wrote all `n` elements of the capacity.
    unsafe { dst.set_len(n) };
    Ok(dst)
}

impl CustomOp1 for RotaryOp {
    fn name(&self) -> &'static str {
        "rotary"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, candle_core::Shape)> {
        let out = match storage {
            CpuStorage::F32(s) => CpuStorage::F32(self.run(s, layout)?),
            CpuStorage::F16(s) => CpuStorage::F16(self.run(s, layout)?),
            CpuStorage::BF16(s) => CpuStorage::BF16(self.run(s, layout)?),
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    other.dtype(),
                    "rotary",
                ))
            }
        };
        Ok((out, layout.shape().clone()))
    }

    /// `d/dx (R x) . g = R^T g`.
    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let transposed = match self.direction {
            Direction::Forward => Direction::Inverse,
            Direction::Inverse => Direction::Forward,
        };
        let order = self.shape.order;
        rotate_tensor(grad_res, self.coefficients.clone(), order, transposed).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout as PairLayout;
    use candle_core::{Device, Var};
    use proptest::prelude::*;
    use test_support::max_abs_diff;

    fn random(dims: (usize, usize, usize, usize), seed: u64) -> Tensor {
        // A fixed pseudo-random sequence (xorshift) so failures reproduce.
        let n = dims.0 * dims.1 * dims.2 * dims.3;
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let data: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect();
        Tensor::from_vec(data, dims, &Device::Cpu).unwrap()
    }

    fn dims_for(
        order: Order,
        b: usize,
        h: usize,
        t: usize,
        d: usize,
    ) -> (usize, usize, usize, usize) {
        match order {
            Order::HeadMajor => (b, h, t, d),
            Order::TokenMajor => (b, t, h, d),
        }
    }

    /// Kernel and slow reference agree on every order, layout, position kind and dtype. In f32
    /// both compute the same two products and one sum per coordinate, so they agree to
    /// rounding (1e-6 on values of magnitude <= 2); in f16/bf16 both widen, compute in f32 and
    /// round once, so they agree to one unit in the last place of the type.
    #[test]
    fn kernel_matches_slow_reference() {
        let explicit: Vec<u32> = vec![7, 0, 3, 1000, 2, 9, 4, 4, 8, 5];
        for layout in [PairLayout::Interleaved, PairLayout::Half] {
            for (head_dim, rotary_dim) in [(8, 8), (10, 6)] {
                let rope = Rope::new(head_dim, rotary_dim, 10_000.0, layout).unwrap();
                for order in [Order::HeadMajor, Order::TokenMajor] {
                    let x = random(dims_for(order, 2, 3, 5, head_dim), 1);
                    let cases = [
                        Positions::START,
                        Positions::Range { offset: 11 },
                        Positions::Explicit(&explicit[..5]),
                        Positions::Explicit(&explicit),
                    ];
                    for positions in cases {
                        let coeffs = rope.coefficients(positions, 2, 5).unwrap();
                        for direction in [Direction::Forward, Direction::Inverse] {
                            for (dtype, tol) in [
                                (DType::F32, 1e-6),
                                (DType::F16, 2.0 * 2f64.powi(-10)),
                                (DType::BF16, 2.0 * 2f64.powi(-7)),
                            ] {
                                let xd = x.to_dtype(dtype).unwrap();
                                let fast =
                                    rotate_tensor(&xd, coeffs.clone(), order, direction).unwrap();
                                let slow = rotate_slow(&xd, &coeffs, order, direction).unwrap();
                                assert_eq!(fast.dtype(), dtype);
                                let diff = max_abs_diff(&fast, &slow);
                                assert!(
                                    diff <= tol,
                                    "{layout:?} {order:?} {positions:?} {direction:?} {dtype:?}: {diff}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The slow reference against the rotation written out by hand from f64 angles, for the
    /// interleaved layout: `(x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)`.
    #[test]
    fn slow_reference_matches_direct_formula() {
        let rope = Rope::new(4, 4, 100.0, PairLayout::Interleaved).unwrap();
        let x = random((1, 1, 3, 4), 2);
        let coeffs = rope
            .coefficients(Positions::Range { offset: 2 }, 1, 3)
            .unwrap();
        let y = rotate_slow(&x, &coeffs, Order::HeadMajor, Direction::Forward).unwrap();
        let xv: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let yv: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
        for t in 0..3 {
            let m = (t + 2) as f64;
            for i in 0..2 {
                let phi = m * 100f64.powf(-(2.0 * i as f64) / 4.0);
                let (s, c) = phi.sin_cos();
                let (x0, x1) = (xv[t * 4 + 2 * i] as f64, xv[t * 4 + 2 * i + 1] as f64);
                assert!((yv[t * 4 + 2 * i] as f64 - (x0 * c - x1 * s)).abs() < 1e-6);
                assert!((yv[t * 4 + 2 * i + 1] as f64 - (x1 * c + x0 * s)).abs() < 1e-6);
            }
        }
    }

    /// The gradient of `sum(w * R x)` with respect to `x` is `R^T w`, computed here
    /// independently as a rotation by the negated positions (`R_{-m} = R_m^T`), and equal to the
    /// gradient candle's autograd finds through the slow reference.
    #[test]
    fn backward_is_transposed_rotation() {
        let rope = Rope::new(6, 6, 10_000.0, PairLayout::Interleaved).unwrap();
        let positions: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2, 6];
        let negated: Vec<f64> = positions.iter().map(|&p| -f64::from(p)).collect();
        for order in [Order::HeadMajor, Order::TokenMajor] {
            let dims = dims_for(order, 2, 2, 4, 6);
            let x = Var::from_tensor(&random(dims, 3)).unwrap();
            let w = random(dims, 4);
            let y =
                apply_rope(x.as_tensor(), &rope, Positions::Explicit(&positions), order).unwrap();
            let grads = (y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gx = grads.get(x.as_tensor()).unwrap();

            let inverse = rope
                .coefficients(Positions::Fractional(&negated), 2, 4)
                .unwrap();
            let expected = rotate_slow(&w, &inverse, order, Direction::Forward).unwrap();
            assert!(max_abs_diff(gx, &expected) < 1e-6);

            let coeffs = rope
                .coefficients(Positions::Explicit(&positions), 2, 4)
                .unwrap();
            let y_slow = rotate_slow(x.as_tensor(), &coeffs, order, Direction::Forward).unwrap();
            let grads = (y_slow * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gx_slow = grads.get(x.as_tensor()).unwrap();
            assert!(max_abs_diff(gx, gx_slow) < 1e-6);
        }
    }

    #[test]
    fn non_contiguous_input_is_rotated_as_its_values() {
        let rope = Rope::new(4, 4, 10_000.0, PairLayout::Interleaved).unwrap();
        let x = random((2, 5, 3, 4), 5); // [b, t, h, d]
        let head_major = x.transpose(1, 2).unwrap(); // [b, h, t, d], strided
        let a = apply_rope(&head_major, &rope, Positions::START, Order::HeadMajor).unwrap();
        let b = apply_rope(&x, &rope, Positions::START, Order::TokenMajor)
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        assert!(max_abs_diff(&a, &b) < 1e-7);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let rope = Rope::new(4, 4, 10_000.0, PairLayout::Interleaved).unwrap();
        let x3 = Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu).unwrap();
        assert!(apply_rope(&x3, &rope, Positions::START, Order::HeadMajor).is_err());
        let wrong_dim = Tensor::zeros((1, 1, 3, 6), DType::F32, &Device::Cpu).unwrap();
        assert!(apply_rope(&wrong_dim, &rope, Positions::START, Order::HeadMajor).is_err());
        let x = Tensor::zeros((1, 1, 3, 4), DType::F32, &Device::Cpu).unwrap();
        let short = [0u32, 1];
        assert!(apply_rope(&x, &rope, Positions::Explicit(&short), Order::HeadMajor).is_err());
        let ints = Tensor::zeros((1, 1, 3, 4), DType::U32, &Device::Cpu).unwrap();
        assert!(apply_rope(&ints, &rope, Positions::START, Order::HeadMajor).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Kernel and reference agree on arbitrary small shapes, offsets and both orders.
        #[test]
        fn kernel_matches_slow_on_random_shapes(
            b in 1usize..3, h in 1usize..4, t in 1usize..9, half in 1usize..6,
            offset in 0usize..5000, head_major in any::<bool>(), seed in any::<u64>(),
        ) {
            let d = 2 * half;
            let order = if head_major { Order::HeadMajor } else { Order::TokenMajor };
            let rope = Rope::new(d, d, 10_000.0, PairLayout::Interleaved).unwrap();
            let x = random(dims_for(order, b, h, t, d), seed);
            let coeffs = rope.coefficients(Positions::Range { offset }, b, t).unwrap();
            let fast = rotate_tensor(&x, coeffs.clone(), order, Direction::Forward).unwrap();
            let slow = rotate_slow(&x, &coeffs, order, Direction::Forward).unwrap();
            prop_assert!(max_abs_diff(&fast, &slow) <= 1e-6);
        }
    }
}
