//! bf16 matrix products with f32 accumulation:
//!
//! ```text
//! C = (accumulate ? C : 0) + alpha * sum_k bf16(A[i, k]) bf16(B[k, j])
//! ```
//!
//! `bf16(x)` rounds to nearest, ties to even (NaN stays NaN). The operands are first packed
//! (rounded and laid out) as pairs of consecutive `k`, one 32-bit word per pair, which is what
//! the dot-product instruction reads:
//!
//! ```text
//! A: panels of MR rows,    word (p, r) = (bf16 A[r, 2p], bf16 A[r, 2p + 1])
//! B: panels of NR columns, word (p, c) = (bf16 B[2p, c], bf16 B[2p + 1, c])
//! ```
//!
//! (a zero pads an odd `k` and the last panels). A micro-kernel then holds an `MR x NR` tile
//! of C in registers and, for every pair `p`, adds `A(p, r) . B(p, c)` (two products and two
//! f32 additions per lane, as `vdpbf16ps` does: the odd element first, then the even; the
//! products of two bf16 values are exact in f32).
//!
//! Kernels: AVX512-BF16 (`vdpbf16ps`: AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids
//! and later), chosen at run time ([`native`]); [`portable`] is the same arithmetic one lane at
//! a time, the reference the tests hold the vector kernel to. Where the CPU has no native bf16
//! dot product the callers run f32 instead ([`crate::cpu::Precision::effective`]).
//!
//! Where Intel's oneDNN 2.x is installed ([`onednn`]: `libdnnl.so.2`, opened at run time) the
//! products whose depth is a multiple of 32 and whose `A` has contiguous rows can go through
//! its matmul instead, on the same packed operands; on AMX CPUs it uses the tiles, and it is
//! chosen there by default ([`onednn::chosen`]). Our kernel stays the fallback for every other
//! product and the reference the tests hold oneDNN to.

pub(crate) mod onednn;
mod pack;
#[cfg(test)]
mod portable;
mod scratch;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

use rayon::prelude::*;

use super::mat::{Mat, SharedOut};
#[cfg(test)]
use pack::round_bf16;
pub(crate) use pack::{pack_pairs_into, pack_panels, pack_rows_into, packed_len};

/// Rows of a micro-tile (the broadcast operand, `A`).
pub(crate) const MR: usize = 12;
/// Columns of a micro-tile (two vectors of 16 f32 lanes, `B`).
pub(crate) const NR: usize = 32;
/// Row panels and column panels of one task of a product on the threads.
const TASK_ROW_PANELS: usize = 4;
const TASK_COL_PANELS: usize = 8;

/// A micro-kernel: `C[0..rows, 0..cols] = (accumulate ? C : 0) + alpha * A_panel B_panel`
/// over `pairs` pairs of `k`, with A's word `(p, r)` at `a + p * a_ps + r * a_rs` (a panel:
/// `(MR, 1)`; rows of words: `(1, pairs)`).
///
/// # Safety
/// `a` holds the words `(p, r)` for `p < pairs`, `r < MR` and `b` holds `pairs * NR`; `c` is valid for writes of `rows` rows of
/// `cols` elements at row stride `rs`, and no other thread touches them; `rows <= MR`,
/// `cols <= NR`.
pub(crate) type MicroKernel = unsafe fn(
    pairs: usize,
    a: (*const u32, usize, usize),
    b: *const u32,
    c: *mut f32,
    rs: usize,
    rows: usize,
    cols: usize,
    alpha: f32,
    accumulate: bool,
);

/// A bf16 product kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// One lane at a time (any CPU; the tests' reference).
    #[cfg(test)]
    Portable,
    /// AVX512-BF16 `vdpbf16ps`.
    Avx512Bf16,
    /// oneDNN's matmul where it takes the product ([`onednn::takes`]), else `Avx512Bf16`.
    OneDnn,
}

impl Kernel {
    /// The micro-kernel.
    pub(crate) fn micro(self) -> MicroKernel {
        match self {
            #[cfg(test)]
            Kernel::Portable => portable::micro,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 | Kernel::OneDnn => x86::micro_avx512bf16,
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512Bf16 | Kernel::OneDnn => {
                unreachable!("AVX512-BF16 is never detected off x86_64")
            }
        }
    }
}

/// The native bf16 kernel of this CPU, detected once: where the CPU has AVX512-BF16 (and
/// AVX-512F), `OneDnn` when oneDNN is chosen ([`onednn::chosen`]: installed, and an AMX CPU
/// or `ROFORMER_ONEDNN=1`) and `Avx512Bf16` otherwise; else `None` (the portable kernel is
/// far slower than f32, so the callers run f32).
pub(crate) fn native() -> Option<Kernel> {
    static NATIVE: OnceLock<Option<Kernel>> = OnceLock::new();
    *NATIVE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
        {
            return Some(if onednn::chosen() {
                Kernel::OneDnn
            } else {
                Kernel::Avx512Bf16
            });
        }
        None
    })
}

/// [`pack_rows_into`] with each row rounded by the CPU's own conversion (`vcvtne2ps2bf16`)
/// where it has AVX512-BF16, as the inference row stages do (they run only there): the same
/// words for every normal value, infinity and NaN, a zero of its sign for a subnormal (the
/// instruction reads subnormals as zeros); elsewhere [`pack_rows_into`] itself, the reference.
pub(crate) fn pack_rows_fast(block: &[f32], width: usize, first: usize, out: SharedOut<u32>) {
    #[cfg(target_arch = "x86_64")]
    if native().is_some() {
        let pairs = width.div_ceil(2);
        for (j, row) in block.chunks_exact(width.max(1)).enumerate() {
            // SAFETY: the CPU has AVX512-BF16 (`native`); the caller's tasks write disjoint
            // rows, and row `first + j`'s `pairs` words lie in `out`.
            unsafe { x86::row_words_avx512bf16(row, out.slice((first + j) * pairs, pairs)) };
        }
        return;
    }
    pack_rows_into(block, width, first, out);
}

/// A packed `k x n` right operand, owned (a weight packed once).
#[derive(Debug)]
pub(crate) struct PackedB {
    words: Vec<u32>,
    n: usize,
    k: usize,
}

/// A packed `k x n` right operand: panels of [`NR`] columns, see the module doc.
#[derive(Clone, Copy)]
pub(crate) struct Packed<'a> {
    words: &'a [u32],
    n: usize,
    k: usize,
}

impl Packed<'_> {
    /// `k`, the rows of the packed operand.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// `n`, the columns of the packed operand.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// The packed words.
    #[cfg(test)]
    pub(crate) fn words(&self) -> &[u32] {
        self.words
    }

    /// Columns `cols` alone, when they start at a panel (a multiple of [`NR`]) and end at one
    /// or at `n`.
    pub(crate) fn columns(&self, cols: std::ops::Range<usize>) -> Option<Self> {
        let aligned = cols.start.is_multiple_of(NR)
            && (cols.end == self.n || cols.end.is_multiple_of(NR))
            && cols.start <= cols.end
            && cols.end <= self.n;
        if !aligned {
            return None;
        }
        let panel = self.k.div_ceil(2) * NR;
        let words = self
            .words
            .get(cols.start / NR * panel..cols.end.div_ceil(NR) * panel)?;
        Some(Packed {
            words,
            n: cols.len(),
            k: self.k,
        })
    }
}

impl<'a> Packed<'a> {
    /// `words` as a packed `k x n` right operand (panels of [`NR`] columns, pairs of `k`, as
    /// [`pack_panels`] and [`pack_pairs_into`] write them); `None` when it is not
    /// [`packed_len`]`(n, k, NR)` words long.
    pub(crate) fn from_words(words: &'a [u32], k: usize, n: usize) -> Option<Self> {
        (words.len() == packed_len(n, k, NR)).then_some(Packed { words, n, k })
    }
}

/// A packed `m x k` left operand: panels of [`MR`] rows, as rows of pair words (`rows`) or
/// interleaved (see the module doc).
#[derive(Clone, Copy)]
pub(crate) struct PackedA<'a> {
    words: &'a [u32],
    m: usize,
    k: usize,
    rows: bool,
}

impl<'a> PackedA<'a> {
    /// `words` as a packed `m x k` left operand in the row layout (`rows`, as
    /// [`pack_rows_into`] writes it) or the interleaved one ([`pack_pairs_into`] with panels of
    /// [`MR`]); `None` when it is not [`packed_len`]`(m, k, MR)` words long.
    pub(crate) fn from_words(words: &'a [u32], m: usize, k: usize, rows: bool) -> Option<Self> {
        (words.len() == packed_len(m, k, MR)).then_some(PackedA { words, m, k, rows })
    }

    /// `m`, the rows.
    pub(crate) fn m(&self) -> usize {
        self.m
    }

    /// `k`, the depth.
    pub(crate) fn k(&self) -> usize {
        self.k
    }
}

/// `C = (accumulate ? C : 0) + alpha * a b` from two operands packed ahead (bf16 words), with
/// `C`'s element `(i, j)` at `c.0 + i * c.1`, on our micro-kernel.
///
/// # Safety
/// `a.k() == b.k()`; `c` is valid for writes of `a.m()` rows of `b.n()` elements at row
/// stride `c.1`, touched by no one else during the call.
pub(crate) unsafe fn product_prepacked(
    kernel: Kernel,
    c: (*mut f32, usize),
    accumulate: bool,
    (a, b): (PackedA<'_>, Packed<'_>),
    alpha: f32,
    parallel: bool,
) {
    if a.m == 0 || b.n == 0 {
        return;
    }
    // SAFETY: as this function's; the operands hold the words of their sizes (checked when
    // they were made).
    unsafe {
        run_tiles(
            kernel,
            a.m,
            c,
            accumulate,
            (a.words, a.rows),
            b,
            alpha,
            parallel,
        );
    }
}

impl PackedB {
    /// The packed words, borrowed.
    pub(crate) fn view(&self) -> Packed<'_> {
        Packed {
            words: &self.words,
            n: self.n,
            k: self.k,
        }
    }

    /// Packs `b` (`k x n`), on the threads when `parallel`.
    pub(crate) fn new(b: Mat<'_>, k: usize, n: usize, parallel: bool) -> PackedB {
        let mut words = vec![0; packed_len(n, k, NR)];
        pack_panels(b.t(), (n, k), NR, (parallel, false), &mut words);
        PackedB { words, n, k }
    }
}

/// `C = (accumulate ? C : 0) + alpha * bf16(a) bf16(b)` with `C`'s element `(i, j)` at
/// `c.0 + i * c.1`, through `kernel`.
///
/// # Safety
/// `a` and `b` lie inside their slices for `m x k` and `k x n` (checked by the caller); `c` is
/// valid for writes of `m` rows of `n` elements at row stride `c.1`, touched by no one else
/// during the call, and does not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    c: (*mut f32, usize),
    accumulate: bool,
    a: Mat<'_>,
    b: Mat<'_>,
    alpha: f32,
    parallel: bool,
) {
    scratch::with(&scratch::B, packed_len(n, k, NR), |words| {
        pack_panels(b.t(), (n, k), NR, (parallel, false), words);
        let packed_b = Packed { words, n, k };
        product_packed(kernel, m, c, accumulate, a, packed_b, alpha, parallel);
    });
}

/// [`product`] with `b` already packed (a weight packed once at load).
///
/// # Safety
/// As [`product`], with `a` inside its slice for `m x k`, `k` that of `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product_packed(
    kernel: Kernel,
    m: usize,
    c: (*mut f32, usize),
    accumulate: bool,
    a: Mat<'_>,
    b: Packed<'_>,
    alpha: f32,
    parallel: bool,
) {
    let (n, k) = (b.n, b.k);
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: as this function's.
    if kernel == Kernel::OneDnn
        && a.cs != 1
        && a.rs == 1
        && unsafe { onednn_transposed(m, c, accumulate, a, b, alpha, parallel) }
    {
        return;
    }
    scratch::with(&scratch::A, packed_len(m, k, MR), |packed_a| {
        let a_rows = pack_panels(a, (m, k), MR, (parallel, true), packed_a);
        // SAFETY: as this function's; with the row layout, `packed_a` starts with the `m` rows
        // of `k / 2` words oneDNN reads.
        if kernel == Kernel::OneDnn
            && a_rows
            && unsafe { onednn::product(m, c, accumulate, (packed_a, k, 1), b, alpha, parallel) }
        {
            return;
        }
        // SAFETY: as this function's.
        unsafe {
            run_tiles(
                kernel,
                m,
                c,
                accumulate,
                (packed_a, a_rows),
                b,
                alpha,
                parallel,
            )
        };
    });
}

/// [`product_packed`] through oneDNN for an `a` stored as its transpose (`a.rs == 1`: the
/// `k` rows of `A^T` are contiguous): those rows rounded to bf16 as they are (no interleaving
/// into panels), read by oneDNN at strides `(1, ld)`. `false` where oneDNN does not take it.
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
unsafe fn onednn_transposed(
    m: usize,
    c: (*mut f32, usize),
    accumulate: bool,
    a: Mat<'_>,
    b: Packed<'_>,
    alpha: f32,
    parallel: bool,
) -> bool {
    let k = b.k;
    if !onednn::takes(k) {
        return false;
    }
    let ld = 2 * m.div_ceil(2);
    scratch::with(&scratch::A, packed_len(k, m, MR), |rows| {
        let rows_layout = pack_panels(a.t(), (k, m), MR, (parallel, true), rows);
        // SAFETY: as this function's; `rows` holds the `k` rows of `ld / 2` words of `A^T`.
        rows_layout
            && unsafe { onednn::product(m, c, accumulate, (rows, 1, ld), b, alpha, parallel) }
    })
}

/// The micro-kernel over every tile of C, from packed operands.
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
unsafe fn run_tiles(
    kernel: Kernel,
    m: usize,
    c: (*mut f32, usize),
    accumulate: bool,
    (packed_a, a_rows): (&[u32], bool),
    b: Packed<'_>,
    alpha: f32,
    parallel: bool,
) {
    let (n, k) = (b.n, b.k);
    let pairs = k.div_ceil(2);
    let micro = kernel.micro();
    // Rows of words when A's rows were converted whole (see `pack_panels`), else panels.
    let (a_ps, a_rs) = if a_rows { (1, pairs) } else { (MR, 1) };
    let row_panels = m.div_ceil(MR);
    let col_panels = n.div_ceil(NR);
    let (c_ptr, rs) = c;
    let c_addr = c_ptr as usize;
    let task = |(rp0, cp0): (usize, usize)| {
        for cp in cp0..(cp0 + TASK_COL_PANELS).min(col_panels) {
            let j0 = cp * NR;
            let b_panel = &b.words[cp * pairs * NR..(cp + 1) * pairs * NR];
            for rp in rp0..(rp0 + TASK_ROW_PANELS).min(row_panels) {
                let i0 = rp * MR;
                let a_panel = &packed_a[rp * pairs * MR..(rp + 1) * pairs * MR];
                // SAFETY: the panels hold `pairs` words per row/column; the tile lies inside C
                // (rows i0.., columns j0.. cut at m and n), and the tasks' tiles are disjoint.
                unsafe {
                    micro(
                        pairs,
                        (a_panel.as_ptr(), a_ps, a_rs),
                        b_panel.as_ptr(),
                        (c_addr as *mut f32).add(i0 * rs + j0),
                        rs,
                        (m - i0).min(MR),
                        (n - j0).min(NR),
                        alpha,
                        accumulate,
                    );
                }
            }
        }
    };
    let tasks: Vec<(usize, usize)> = (0..row_panels)
        .step_by(TASK_ROW_PANELS)
        .flat_map(|rp| {
            (0..col_panels)
                .step_by(TASK_COL_PANELS)
                .map(move |cp| (rp, cp))
        })
        .collect();
    if parallel && tasks.len() > 1 {
        tasks.into_par_iter().for_each(task);
    } else {
        tasks.into_iter().for_each(task);
    }
}
