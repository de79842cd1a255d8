//! Applying rotations to q/k data given as slices plus a shape, with threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::element::Element;
use crate::error::{Result, RopeError};
use crate::kernel::{chunk_fn, ChunkFn, Geom, Isa};
use crate::table::CosSinView;

pub use crate::parallel::PARALLEL_MIN_ELEMENTS;

/// Elements a parallel task aims to cover (about 128-256 KiB): large enough to amortise task
/// overhead, small enough to balance two to dozens of threads.
const TASK_ELEMENTS: usize = 1 << 15;

/// Memory order of a `[batch, heads, seq, head_dim]` tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// `[batch, seq, heads, head_dim]`: a token's heads are adjacent (the output of a
    /// projection before the head transpose; candle's `rope_thd`).
    TokenMajor,
    /// `[batch, heads, seq, head_dim]`: a head's tokens are adjacent (after the transpose).
    #[default]
    HeadMajor,
}

/// Whether to apply `R_m` or its transpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Direction {
    /// `y = a R_m x`, with `a` the table's amplitude (1 for a pure rotation).
    #[default]
    Forward,
    /// The transpose `y = a R_m^T x = a R_{-m} x`: the backward pass of `Forward` (the gradient
    /// of `y = a R_m x` with respect to `x` is `a R_m^T dy`), and its inverse when `a = 1`.
    Inverse,
}

/// Dimensions and memory order of one q or k tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Number of sequences.
    pub batch: usize,
    /// Number of heads.
    pub heads: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Memory order.
    pub order: Order,
}

impl Shape {
    /// A head-major shape `[batch, heads, seq, head_dim]`.
    pub fn head_major(batch: usize, heads: usize, seq: usize, head_dim: usize) -> Shape {
        Shape {
            batch,
            heads,
            seq,
            head_dim,
            order: Order::HeadMajor,
        }
    }

    /// A token-major shape `[batch, seq, heads, head_dim]`.
    pub fn token_major(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Shape {
        Shape {
            batch,
            heads,
            seq,
            head_dim,
            order: Order::TokenMajor,
        }
    }

    /// The dimensions as `[batch, heads, seq, head_dim]` whatever the order.
    pub fn dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq, self.head_dim]
    }

    /// Number of elements.
    ///
    /// # Errors
    /// [`RopeError::ShapeOverflow`] if it overflows `usize`.
    pub fn elements(&self) -> Result<usize> {
        self.dims()
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .ok_or(RopeError::ShapeOverflow(self.dims()))
    }

    /// Checks that the data's head dim is the rotation's `expected` one.
    pub(crate) fn check_head_dim(&self, what: &'static str, expected: usize) -> Result<()> {
        if self.head_dim != expected {
            return Err(RopeError::HeadDimMismatch {
                what,
                expected,
                got: self.head_dim,
            });
        }
        Ok(())
    }

    /// Checks that a slice of `len` elements holds exactly this shape; returns the count.
    pub(crate) fn check_len(&self, what: &'static str, len: usize) -> Result<usize> {
        let expected = self.elements()?;
        if expected != len {
            return Err(RopeError::LengthMismatch {
                what,
                shape: self.dims(),
                expected,
                got: len,
            });
        }
        Ok(expected)
    }
}

/// One unit of work: whole tokens of one sequence slab and the table row of its first token.
/// `dst` may be uninitialised only where `src` is given (out of place).
struct Task<'a, T> {
    src: Option<&'a [T]>,
    dst: &'a mut [MaybeUninit<T>],
    table_row: usize,
    geom: Geom,
}

/// Checks `table` against `shape` and returns whether its rows are per sequence
/// (`batch * seq` rows) rather than shared (`seq` rows).
fn check_table(shape: &Shape, table: &CosSinView<'_>) -> Result<bool> {
    if table.rotary_dim() > shape.head_dim {
        return Err(RopeError::RotaryDimTooLarge {
            rotary_dim: table.rotary_dim(),
            head_dim: shape.head_dim,
        });
    }
    let rows = table.rows();
    if rows == shape.seq {
        Ok(false)
    } else if Some(rows) == shape.batch.checked_mul(shape.seq) {
        Ok(true)
    } else {
        Err(RopeError::TableMismatch(format!(
            "{rows} rows given for batch {} x seq {}: need seq or batch * seq rows",
            shape.batch, shape.seq
        )))
    }
}

/// Splits one tensor into tasks and appends them to `tasks`.
fn push_tasks<'a, T: Element>(
    tasks: &mut Vec<Task<'a, T>>,
    src: Option<&'a [T]>,
    dst: &'a mut [MaybeUninit<T>],
    shape: &Shape,
    table: &CosSinView<'_>,
    direction: Direction,
) -> Result<()> {
    let per_sequence = check_table(shape, table)?;
    let Shape {
        heads,
        seq,
        head_dim,
        order,
        ..
    } = *shape;
    if dst.is_empty() {
        return Ok(());
    }
    // A slab is the data of one sequence that is contiguous in memory: [seq, heads, d] for
    // token-major, [seq, d] for each head for head-major. With one token per sequence (a
    // decode step) both orders are [heads, d] per sequence: one slab, one kernel call.
    let (rows_per_token, slabs_per_batch) = match order {
        Order::TokenMajor => (heads, 1),
        Order::HeadMajor if seq == 1 => (heads, 1),
        Order::HeadMajor => (1, heads),
    };
    let token_len = rows_per_token * head_dim;
    let tokens_per_task = (TASK_ELEMENTS / token_len.max(1)).clamp(1, seq.max(1));
    let geom = Geom {
        head_dim,
        rotary_dim: table.rotary_dim(),
        rows_per_token,
        layout: table.layout(),
        inverse: direction == Direction::Inverse,
    };
    let slab_len = seq * token_len;
    let first_task = tasks.len();
    let mut src_slabs = src.map(|s| s.chunks(slab_len));
    for (slab, dst_slab) in dst.chunks_mut(slab_len).enumerate() {
        let b = slab / slabs_per_batch;
        let first_row = if per_sequence { b * seq } else { 0 };
        let src_slab = src_slabs.as_mut().and_then(Iterator::next);
        let task_len = tokens_per_task * token_len;
        let mut src_parts = src_slab.map(|s| s.chunks(task_len));
        for (part, dst_part) in dst_slab.chunks_mut(task_len).enumerate() {
            tasks.push(Task {
                src: src_parts.as_mut().and_then(Iterator::next),
                dst: dst_part,
                table_row: first_row + part * tokens_per_task,
                geom,
            });
        }
    }
    // Head-major: put the tasks of one token range next to each other across heads, so that a
    // thread reuses the same table rows from cache for every head instead of re-streaming them.
    tasks[first_task..].sort_by_key(|t| t.table_row);
    Ok(())
}

/// Runs the tasks, in parallel when there is enough work.
fn run_tasks<T: Element>(tasks: Vec<Task<'_, T>>, table: &CosSinView<'_>, elements: usize) {
    let kernel: ChunkFn<T> = chunk_fn::<T>(Isa::detect());
    let run = |task: Task<'_, T>| {
        let g = task.geom;
        let n_rows = task.dst.len() / g.head_dim;
        let r = g.rotary_dim;
        let offset = task.table_row * r;
        let dst = task.dst.as_mut_ptr().cast::<T>();
        let src = task.src.map_or(dst as *const T, <[T]>::as_ptr);
        // SAFETY: `push_tasks` cut `dst` (and `src`, of the same shape) into whole tokens of
        // `head_dim`-element rows; `check_table` guarantees the table holds a row for each of
        // those tokens from `table_row` on; an out-of-place `src` is a shared slice, so it cannot
        // overlap the exclusive `dst`.
        unsafe {
            kernel(
                src,
                dst,
                n_rows,
                &g,
                table.cos().as_ptr().add(offset),
                table.sin().as_ptr().add(offset),
            )
        }
    };
    if elements >= PARALLEL_MIN_ELEMENTS && tasks.len() > 1 {
        tasks.into_par_iter().for_each(run);
    } else {
        tasks.into_iter().for_each(run);
    }
}

/// Rotates `x` in place: `x <- R x` (or `R^T x`) for every head of every token, with the
/// coefficients of `table` (one row per token, `seq` rows shared by the batch or
/// `batch * seq` rows).
///
/// # Errors
/// [`RopeError::LengthMismatch`] if `x.len()` does not match `shape`,
/// [`RopeError::RotaryDimTooLarge`] if the table rotates more dims than a head has,
/// [`RopeError::TableMismatch`] if the table has the wrong number of rows.
pub fn rotate_inplace<T: Element>(
    x: &mut [T],
    shape: Shape,
    table: CosSinView<'_>,
    direction: Direction,
) -> Result<()> {
    let n = shape.check_len("x", x.len())?;
    let mut tasks = Vec::new();
    push_tasks(&mut tasks, None, as_uninit(x), &shape, &table, direction)?;
    run_tasks(tasks, &table, n);
    Ok(())
}

/// Rotates `src` into `dst` (same shape): `dst = R src` (or `R^T src`); coordinates past the
/// table's rotary dims are copied.
///
/// # Errors
/// As [`rotate_inplace`], for both slices.
pub fn rotate<T: Element>(
    src: &[T],
    dst: &mut [T],
    shape: Shape,
    table: CosSinView<'_>,
    direction: Direction,
) -> Result<()> {
    let n = shape.check_len("src", src.len())?;
    shape.check_len("dst", dst.len())?;
    let mut tasks = Vec::new();
    push_tasks(
        &mut tasks,
        Some(src),
        as_uninit(dst),
        &shape,
        &table,
        direction,
    )?;
    run_tasks(tasks, &table, n);
    Ok(())
}

/// Rotates q and k in place in one call sharing one pass of threads. q and k may have different
/// head counts (grouped-query attention) but must share batch, seq, head dim and order.
///
/// # Errors
/// [`RopeError::QkMismatch`] for a shared dimension that differs, and the errors of
/// [`rotate_inplace`] for each tensor.
pub fn rotate_qk_inplace<T: Element>(
    q: &mut [T],
    q_shape: Shape,
    k: &mut [T],
    k_shape: Shape,
    table: CosSinView<'_>,
    direction: Direction,
) -> Result<()> {
    check_qk(&q_shape, &k_shape)?;
    let n = q_shape.check_len("q", q.len())? + k_shape.check_len("k", k.len())?;
    let mut tasks = Vec::new();
    push_tasks(&mut tasks, None, as_uninit(q), &q_shape, &table, direction)?;
    push_tasks(&mut tasks, None, as_uninit(k), &k_shape, &table, direction)?;
    run_tasks(tasks, &table, n);
    Ok(())
}

/// Checks the dimensions q and k must share.
pub(crate) fn check_qk(q: &Shape, k: &Shape) -> Result<()> {
    let pairs = [
        ("batch", q.batch, k.batch),
        ("seq", q.seq, k.seq),
        ("head dim", q.head_dim, k.head_dim),
        ("order", q.order as usize, k.order as usize),
    ];
    for (what, a, b) in pairs {
        if a != b {
            return Err(RopeError::QkMismatch { what, q: a, k: b });
        }
    }
    Ok(())
}

/// As [`rotate`], into memory that need not be initialised: every element of `dst` is written
/// (rotated, or copied past the table's rotary dims), so a caller can rotate into fresh
/// capacity (`Vec::spare_capacity_mut`) and then set the length, without filling it first.
///
/// # Errors
/// As [`rotate`]; an error is returned before anything is written.
pub fn rotate_uninit<T: Element>(
    src: &[T],
    dst: &mut [MaybeUninit<T>],
    shape: Shape,
    table: CosSinView<'_>,
    direction: Direction,
) -> Result<()> {
    let n = shape.check_len("src", src.len())?;
    shape.check_len("dst", dst.len())?;
    let mut tasks = Vec::new();
    push_tasks(&mut tasks, Some(src), dst, &shape, &table, direction)?;
    run_tasks(tasks, &table, n);
    Ok(())
}

/// `x` viewed as possibly uninitialised elements, for the task list.
fn as_uninit<T>(x: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has the layout of `T`. Through this view the kernels only ever
    // store initialised values (rotated or copied elements), so `x` stays initialised.
    unsafe { &mut *(x as *mut [T] as *mut [MaybeUninit<T>]) }
}
