//! What the CPU kernels of this module share: the element types they accept (computed in an
//! accumulator type, f32 for f32/f16/bf16 and f64 for f64), dtype dispatch over candle's CPU
//! storage, and the row loop that runs on rayon when a tensor is large.

use std::ops::{Add, AddAssign, Div, Mul, Sub};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Tensor, WithDType};
use half::{bf16, f16};
use rayon::prelude::*;

use crate::cpu::math::exp_approx;

/// The float type a kernel computes in (f32 or f64).
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// -inf, the identity of `max`.
    const NEG_INFINITY: Self;
    /// `e^self` for `self <= 0` (or NaN, which it returns), as softmax needs after subtracting
    /// the row maximum; f32 is the CPU layer's [`exp_approx`] (within a few ulps, 0 below
    /// about `e^-87.3`, the smallest normal f32).
    fn exp_nonpositive(self) -> Self;
    /// `sqrt(self)`.
    fn sqrt(self) -> Self;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NEG_INFINITY: f32 = f32::NEG_INFINITY;
    fn exp_nonpositive(self) -> f32 {
        exp_approx(self)
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    #[allow(clippy::cast_possible_truncation)]
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NEG_INFINITY: f64 = f64::NEG_INFINITY;
    fn exp_nonpositive(self) -> f64 {
        f64::exp(self)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
}

/// A tensor element the kernels read and write, computed in [`Element::Acc`].
pub(crate) trait Element: WithDType {
    /// The type arithmetic runs in.
    type Acc: Real;
    /// `self` in the accumulator type (exact).
    fn load(self) -> Self::Acc;
    /// `v` rounded to the element type.
    fn store(v: Self::Acc) -> Self;
}

impl Element for f32 {
    type Acc = f32;
    fn load(self) -> f32 {
        self
    }
    fn store(v: f32) -> f32 {
        v
    }
}

impl Element for f64 {
    type Acc = f64;
    fn load(self) -> f64 {
        self
    }
    fn store(v: f64) -> f64 {
        v
    }
}

impl Element for f16 {
    type Acc = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    type Acc = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
}

/// Lanes of the blocked reductions: independent partial sums the compiler can keep in one
/// vector register, which also shortens the rounding-error chain by this factor.
const LANES: usize = 8;

/// `sum_i f(i)` over `0..n`, in [`LANES`] interleaved partial sums.
#[inline]
pub(crate) fn lane_sum<A: Real>(n: usize, f: impl Fn(usize) -> A) -> A {
    let mut acc = [A::ZERO; LANES];
    let blocks = n / LANES;
    for b in 0..blocks {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(b * LANES + l);
        }
    }
    let mut total = A::ZERO;
    for i in blocks * LANES..n {
        total += f(i);
    }
    for a in acc {
        total += a;
    }
    total
}

/// `max_i x_i` in [`LANES`] interleaved running maxima (NaNs are skipped, -inf for no
/// elements).
#[inline]
pub(crate) fn lane_max<T: Element>(x: &[T]) -> T::Acc {
    let pick = |a: T::Acc, b: T::Acc| if b > a { b } else { a };
    let mut acc = [T::Acc::NEG_INFINITY; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for block in &mut blocks {
        for (a, v) in acc.iter_mut().zip(block) {
            *a = pick(*a, v.load());
        }
    }
    let mut max = T::Acc::NEG_INFINITY;
    for v in blocks.remainder() {
        max = pick(max, v.load());
    }
    acc.into_iter().fold(max, pick)
}

/// Below this many elements a kernel runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

/// Elements a rayon task handles at least (whole rows).
const TASK_MIN: usize = 1 << 13;

/// Whole rows of `dim` elements per rayon task.
pub(crate) fn rows_per_task(dim: usize) -> usize {
    (TASK_MIN / dim.max(1)).max(1)
}

/// Whether a kernel over `len` elements is worth spreading over rayon's threads.
pub(crate) fn is_large(len: usize) -> bool {
    len >= PARALLEL_MIN
}

/// Calls `f(scratch, row, out_row)` for every row of `dim` elements of `out`, in parallel when
/// `out` is large; each thread's `scratch` comes from `init` and is reused across its rows.
/// Does nothing when `dim` is 0.
pub(crate) fn for_each_row<T: Send, S>(
    out: &mut [T],
    dim: usize,
    init: impl Fn() -> S + Send + Sync,
    f: impl Fn(&mut S, usize, &mut [T]) + Send + Sync,
) {
    if dim == 0 {
        return;
    }
    if is_large(out.len()) {
        let rows = rows_per_task(dim);
        out.par_chunks_mut(rows * dim).enumerate().for_each_init(
            &init,
            |scratch, (task, chunk)| {
                for (r, row) in chunk.chunks_mut(dim).enumerate() {
                    f(scratch, task * rows + r, row);
                }
            },
        );
    } else {
        let mut scratch = init();
        for (r, row) in out.chunks_mut(dim).enumerate() {
            f(&mut scratch, r, row);
        }
    }
}

/// The last dimension of a layout's shape (an error for a scalar).
pub(crate) fn last_dim(layout: &Layout, op: &'static str) -> candle_core::Result<usize> {
    layout
        .shape()
        .dims()
        .last()
        .copied()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: a scalar has no last dimension")))
}

/// `x` computed in f32 when it is f16 or bf16, else `x` itself.
pub(crate) fn upcast(x: &Tensor) -> candle_core::Result<Tensor> {
    match x.dtype() {
        DType::F16 | DType::BF16 => x.to_dtype(DType::F32),
        _ => Ok(x.clone()),
    }
}

/// The elements of a contiguous layout.
pub(crate) fn contiguous<'a, T>(
    data: &'a [T],
    layout: &Layout,
    op: &'static str,
) -> candle_core::Result<&'a [T]> {
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: input is not contiguous")))?;
    data.get(start..end)
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: layout outside its storage")))
}

/// A kernel over tensors of one element type, called with their contiguous elements.
pub(crate) trait Kernel {
    /// The op's name, for errors.
    const NAME: &'static str;
    /// The output elements, from the inputs' elements (all of one dtype).
    fn run<T: Element>(&self, inputs: &[&[T]]) -> candle_core::Result<Vec<T>>;
}

/// Runs `kernel` over CPU storages of one float dtype (f32, f64, f16 or bf16).
///
/// # Errors
/// An unsupported or mixed dtype, a non-contiguous layout, or the kernel's own errors.
pub(crate) fn dispatch<K: Kernel>(
    kernel: &K,
    inputs: &[(&CpuStorage, &Layout)],
) -> candle_core::Result<CpuStorage> {
    fn slices<'a, T: WithDType>(
        inputs: &[(&'a CpuStorage, &Layout)],
        name: &'static str,
    ) -> candle_core::Result<Vec<&'a [T]>> {
        inputs
            .iter()
            .map(|(s, l)| contiguous(T::cpu_storage_as_slice(s)?, l, name))
            .collect()
    }
    let Some((first, _)) = inputs.first() else {
        return Err(candle_core::Error::Msg(format!("{}: no input", K::NAME)));
    };
    let dtype = first.dtype();
    if let Some((other, _)) = inputs.iter().find(|(s, _)| s.dtype() != dtype) {
        return Err(candle_core::Error::DTypeMismatchBinaryOp {
            lhs: dtype,
            rhs: other.dtype(),
            op: K::NAME,
        });
    }
    Ok(match first {
        CpuStorage::F32(_) => CpuStorage::F32(kernel.run(&slices::<f32>(inputs, K::NAME)?)?),
        CpuStorage::F64(_) => CpuStorage::F64(kernel.run(&slices::<f64>(inputs, K::NAME)?)?),
        CpuStorage::F16(_) => CpuStorage::F16(kernel.run(&slices::<f16>(inputs, K::NAME)?)?),
        CpuStorage::BF16(_) => CpuStorage::BF16(kernel.run(&slices::<bf16>(inputs, K::NAME)?)?),
        other => {
            return Err(candle_core::Error::UnsupportedDTypeForOp(
                other.dtype(),
                K::NAME,
            ))
        }
    })
}

/// The `i`th input of a kernel, or an error naming the op.
pub(crate) fn input<'a, T>(
    inputs: &[&'a [T]],
    i: usize,
    name: &'static str,
) -> candle_core::Result<&'a [T]> {
    inputs
        .get(i)
        .copied()
        .ok_or_else(|| candle_core::Error::Msg(format!("{name}: input {i} missing")))
}
