//! `y = x W^T` for a Q8_0 weight `W` (`[n_out, k]`) and f32 activations `x` (`[rows, k]`) on the
//! CPU, with AVX-512 VNNI dot products over several rows and output features at once, bit for
//! bit equal to candle's CPU product for Q8_0 (`vec_dot_q8_0_q8_0`, its AVX2 kernel).
//!
//! # The arithmetic (candle's, reproduced exactly)
//!
//! A Q8_0 block holds 32 weights as `d: f16, qs: [i8; 32]`: weight `j` is `d * qs[j]`.
//!
//! Each row of `x` is first quantized to Q8_0 blocks of 32 values `x_0..x_31`:
//! `amax = max |x_j|`, `d8 = amax / 127`, `id = 1 / d8` (0 when `d8 == 0`),
//! `q_j = round(x_j * id)` (ties away from zero, saturated to `i8`, NaN to 0), `d8` stored as
//! f16. So `|q_j| <= 127`: `amax * id` exceeds 127 by a few ulps at most, which rounds to 127.
//!
//! Then for output `(r, n)`, over the blocks `b` of row `n` of `W` and row `r` of `x`, in order,
//! with eight f32 accumulators `a_0..a_7` (the eight lanes of candle's vector), all zero first:
//!
//! ```text
//! d_b = f32(dw_b) * f32(d8_b)                                        (f32, rounded)
//! s_{b,l} = Σ_{j = 4l}^{4l+3} w_{b,j} * q_{b,j}                      (exact, i32; l = 0..8)
//! a_l = fma(d_b, f32(s_{b,l}), a_l)                                  (one rounding)
//! y[r][n] = ((a_4 + a_0) + (a_6 + a_2)) + ((a_5 + a_1) + (a_7 + a_3))
//! ```
//!
//! Candle computes `s` with the sign trick (`|w|` times `q` with `w`'s sign, through
//! `vpmaddubsw` / `vpmaddwd`), which equals the exact sum whenever `q_j != -128` (the only case
//! where negating wraps), and the quantization above never makes `-128`. Our kernels compute the
//! exact sum; their float steps are candle's, one lane at a time. (Where `k` is a multiple of 256
//! and `n_out` of 16, candle 0.11's `QMatMul` takes its own repacked kernel instead, whose sums
//! differ in order; this module always computes the `vec_dot_q8_0_q8_0` values.)
//!
//! # Layout
//!
//! [`Q8_0Matrix`] keeps the weights by groups of eight output features: for each group and
//! block, one 256-byte tile of four 64-byte pairs, pair `p` holding the 32 values of features
//! `2p` and `2p + 1` as `w + 128` (unsigned bytes), and the eight block scales as f16 beside.
//! One 512-bit `vpdpbusd` multiplies a pair by the activation block (broadcast to both halves),
//! starting from `-128 * Σ_{4 values} q` per lane, so that the unsigned offset cancels: sixteen
//! lanes, the eight sums `s_{b,l}` of two features. Up to four rows of `x` go through a group
//! together, sharing each load of its weights and scales. The last group is padded with zero
//! features, whose results are dropped. The groups are spread over candle's barrier pool by
//! the crate's `groups` module; each output is computed whole by one thread, so the split never
//! changes a bit.

use std::fmt;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use half::f16;

use crate::error::{LlamaError, Result};
use crate::groups::{count_rows, forward_tensor, product_by_groups, weight_blocks, weight_shape};

/// Values per Q8_0 block.
pub const BLOCK_VALUES: usize = 32;
/// Bytes per Q8_0 block (`d` as f16, then 32 signed bytes).
pub const BLOCK_BYTES: usize = 34;
/// Output features per group (a tile's features).
const GROUP: usize = 8;

/// The instruction set a Q8_0 product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, any CPU (`f32::mul_add` for the fused steps).
    Scalar,
    /// x86-64 AVX-512 (F, BW, VNNI, with F16C and FMA) on 512-bit vectors: `vpdpbusd` sums.
    Avx512Vnni,
}

impl Isa {
    /// The fastest instruction set this CPU supports (checked at run time).
    pub fn detect() -> Isa {
        if Isa::Avx512Vnni.is_available() {
            Isa::Avx512Vnni
        } else {
            Isa::Scalar
        }
    }

    /// Whether this CPU can run `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("f16c")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx512Vnni => false,
        }
    }
}

/// A Q8_0 weight `W` of shape `[n_out, k]` (`k` a multiple of 32), ready for `y = x W^T`.
///
/// Output `y[r][n] = ((a_4 + a_0) + (a_6 + a_2)) + ((a_5 + a_1) + (a_7 + a_3))` where lane
/// `a_l` accumulates `fma(dw_b * d8_b, Σ_{j=4l}^{4l+3} w_{b,j} q_{b,j}, a_l)` over the blocks
/// `b` in order, `q` being row `r` of `x` quantized to Q8_0 (scale `d8_b`) and `dw_b` the weight
/// block's scale: the same value, bit for bit, as candle's `vec_dot_q8_0_q8_0` (see the
/// [module documentation](self)).
#[derive(Clone)]
pub struct Q8_0Matrix {
    n_out: usize,
    k: usize,
    /// Blocks per row, `k / 32`.
    blocks: usize,
    /// `ceil(n_out / 8)` groups of `blocks` tiles of weights, group after group.
    weights: Vec<WeightTile>,
    /// The block scales of the same tiles: eight f16 (as bits), feature after feature.
    scales: Vec<[u16; GROUP]>,
    isa: Isa,
}

impl fmt::Debug for Q8_0Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Q8_0Matrix")
            .field("n_out", &self.n_out)
            .field("k", &self.k)
            .field("isa", &self.isa)
            .finish_non_exhaustive()
    }
}

impl Q8_0Matrix {
    /// Reads the blocks of a Q8_0 `QTensor` of shape `[n_out, k]`.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when the tensor is not Q8_0, not two-dimensional, or its
    /// rows are not a whole number of 32-value blocks; candle errors reading its bytes.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Self> {
        let (n_out, k) = weight_shape(tensor, GgmlDType::Q8_0, "Q8_0")?;
        let data = tensor.data()?;
        Self::from_blocks(&data, n_out, k)
    }

    /// Reads `n_out` rows of `k / 32` Q8_0 blocks of 34 bytes each (`d` as f16 in native byte
    /// order, then 32 signed bytes), row after row.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when `k` is not a multiple of 32 or `bytes` is not
    /// `n_out * k / 32 * 34` bytes long.
    pub fn from_blocks(bytes: &[u8], n_out: usize, k: usize) -> Result<Self> {
        let blocks = weight_blocks(bytes, (n_out, k), (BLOCK_VALUES, BLOCK_BYTES), "Q8_0")?;
        let tiles = n_out.div_ceil(GROUP) * blocks;
        // Padding features: weight 0 (stored as 128) and scale 0.
        let mut weights = vec![WeightTile([[0x80; 64]; 4]); tiles];
        let mut scales = vec![[0u16; GROUP]; tiles];
        if blocks > 0 {
            for (n, row) in bytes.chunks_exact(blocks * BLOCK_BYTES).enumerate() {
                let (group, lane) = (n / GROUP, n % GROUP);
                let range = group * blocks..(group + 1) * blocks;
                let tiles = weights[range.clone()].iter_mut().zip(&mut scales[range]);
                for ((tile, scale), block) in tiles.zip(row.chunks_exact(BLOCK_BYTES)) {
                    scale[lane] = u16::from_ne_bytes([block[0], block[1]]);
                    let half = 32 * (lane % 2);
                    let pair = &mut tile.0[lane / 2][half..half + 32];
                    for (dst, &w) in pair.iter_mut().zip(&block[2..]) {
                        *dst = w ^ 0x80;
                    }
                }
            }
        }
        Ok(Q8_0Matrix {
            n_out,
            k,
            blocks,
            weights,
            scales,
            isa: Isa::detect(),
        })
    }

    /// Output features (rows of `W`).
    pub fn n_out(&self) -> usize {
        self.n_out
    }

    /// Input features (columns of `W`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The instruction set [`Q8_0Matrix::forward`] uses on this CPU.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `y = x W^T` for f32 `x` of shape `[..., k]` on the CPU; `y` has shape `[..., n_out]`.
    /// Bit for bit candle's `vec_dot_q8_0_q8_0` (see [`Q8_0Matrix`] for the formula).
    ///
    /// # Errors
    /// [`LlamaError::Request`] for an input that is not f32, not on the CPU, has no dimension
    /// or whose last dimension is not `k`; candle errors otherwise.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, self.isa)
    }

    /// Row `n` of `W` as f32 into `out` (`k` values): `w_j = f32(d_b) * q_j` for value `j` of
    /// block `b`, as candle's `BlockQ8_0::to_float` writes it. A tied head serves the token
    /// embedding this way, with no second copy of the table.
    ///
    /// # Errors
    /// [`LlamaError::Request`] when `n >= n_out` or `out` does not hold `k` values.
    pub fn dequantize_row(&self, n: usize, out: &mut [f32]) -> Result<()> {
        if n >= self.n_out || out.len() != self.k {
            return Err(LlamaError::Request(format!(
                "row {n} of a [{}, {}] Q8_0 weight into {} values",
                self.n_out,
                self.k,
                out.len()
            )));
        }
        let (group, lane) = (n / GROUP, n % GROUP);
        let range = group * self.blocks..(group + 1) * self.blocks;
        let half = 32 * (lane % 2);
        let blocks = self.weights[range.clone()].iter().zip(&self.scales[range]);
        for ((tile, scales), out) in blocks.zip(out.chunks_exact_mut(BLOCK_VALUES)) {
            let d = f16::from_bits(scales[lane]).to_f32();
            for (o, &w) in out.iter_mut().zip(&tile.0[lane / 2][half..half + 32]) {
                *o = f32::from((w ^ 0x80) as i8) * d;
            }
        }
        Ok(())
    }

    /// [`Q8_0Matrix::forward`] on a chosen instruction set (all give the same bits; for tests
    /// and benchmarks).
    ///
    /// # Errors
    /// As [`Q8_0Matrix::forward`], and [`LlamaError::Unsupported`] when this CPU lacks `isa`.
    pub fn forward_with(&self, x: &Tensor, isa: Isa) -> Result<Tensor> {
        forward_tensor(x, self.k, self.n_out, "Q8_0", |x, out| {
            self.matmul_with(x, out, isa)
        })
    }

    /// `out = x W^T` on slices: `x` is `[rows, k]` row-major, `out` is `[rows, n_out]`.
    ///
    /// # Errors
    /// [`LlamaError::Request`] when `x.len()` is not a multiple of `k` or `out` does not hold
    /// `rows * n_out` values.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) -> Result<()> {
        self.matmul_with(x, out, self.isa)
    }

    /// [`Q8_0Matrix::matmul`] on a chosen instruction set.
    ///
    /// # Errors
    /// As [`Q8_0Matrix::matmul`], and [`LlamaError::Unsupported`] when this CPU lacks `isa`.
    pub fn matmul_with(&self, x: &[f32], out: &mut [f32], isa: Isa) -> Result<()> {
        if !isa.is_available() {
            return Err(LlamaError::Unsupported(format!(
                "this CPU cannot run the {isa:?} Q8_0 kernel"
            )));
        }
        let rows = count_rows(x.len(), out.len(), self.k, self.n_out, "Q8_0")?;
        if rows == 0 || self.n_out == 0 {
            return Ok(());
        }
        let xq = Q8Rows::quantize(x, rows, self.blocks);
        product_by_groups::<GROUP, _>(rows, self.n_out, self.k, out, |group, dst| {
            let range = group * self.blocks..(group + 1) * self.blocks;
            let group = Group {
                weights: &self.weights[range.clone()],
                scales: &self.scales[range],
            };
            group_product(isa, group, &xq, dst);
        });
        Ok(())
    }
}

/// One block of each of four pairs of output features: pair `p` is the 32 values of feature
/// `2p` then the 32 of feature `2p + 1`, each stored as `w + 128` (`w ^ 0x80`).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct WeightTile([[u8; 64]; 4]);

/// The tiles of one group of eight output features, block after block.
#[derive(Clone, Copy)]
struct Group<'a> {
    weights: &'a [WeightTile],
    scales: &'a [[u16; GROUP]],
}

/// A Q8_0 block of `x` as the kernels read it: the 32 values, and per four of them
/// `-128 * (their sum)`, the start of each `vpdpbusd` lane.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Q8Block {
    q: [i8; 32],
    offset: [i32; 8],
}

/// Rows of `x` quantized to Q8_0 as candle does, with the scales widened to f32.
struct Q8Rows {
    rows: usize,
    blocks: usize,
    /// `[rows][blocks]` blocks.
    qs: Vec<Q8Block>,
    /// `[rows][blocks]`: `f32(f16(amax / 127))`.
    d: Vec<f32>,
}

/// One quantized row of `x`: `blocks` entries in each slice.
#[derive(Clone, Copy)]
struct Q8Row<'a> {
    qs: &'a [Q8Block],
    d: &'a [f32],
}

impl Q8Rows {
    /// Candle's `BlockQ8_0::from_float` on each row of `x` (`[rows, blocks * 32]`): `amax`,
    /// `d = amax / 127`, `q = round(x * (1 / d))` (0 when `d == 0`; ties away from zero,
    /// saturated, NaN to 0), `d` kept as an f16 widened to f32. A few hundred values a row,
    /// against the whole weight per row for the product: plain Rust is enough.
    fn quantize(x: &[f32], rows: usize, blocks: usize) -> Q8Rows {
        let mut qs = Vec::with_capacity(rows * blocks);
        let mut d = Vec::with_capacity(rows * blocks);
        for values in x.chunks_exact(BLOCK_VALUES) {
            let amax = values.iter().fold(0f32, |a, &v| a.max(v.abs()));
            let scale = amax / 127.0;
            let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let mut block = Q8Block {
                q: [0; 32],
                offset: [0; 8],
            };
            for (q, &v) in block.q.iter_mut().zip(values) {
                // `as` saturates and maps NaN to 0, as in candle.
                *q = (v * inverse).round() as i8;
            }
            for (offset, four) in block.offset.iter_mut().zip(block.q.chunks_exact(4)) {
                *offset = -128 * four.iter().map(|&q| i32::from(q)).sum::<i32>();
            }
            qs.push(block);
            d.push(f16::from_f32(scale).to_f32());
        }
        Q8Rows {
            rows,
            blocks,
            qs,
            d,
        }
    }

    fn row(&self, r: usize) -> Q8Row<'_> {
        let range = r * self.blocks..(r + 1) * self.blocks;
        Q8Row {
            qs: &self.qs[range.clone()],
            d: &self.d[range],
        }
    }
}

/// Candle's final sum of its eight lanes (`hsum_float_8`): the high half added to the low one,
/// then the upper pair to the lower, then the two left.
#[inline(always)]
fn lane_sum(a: &[f32]) -> f32 {
    ((a[4] + a[0]) + (a[6] + a[2])) + ((a[5] + a[1]) + (a[7] + a[3]))
}

/// One group of eight output features against every row of `xq`: `dst[r * 8 + lane]`.
fn group_product(isa: Isa, group: Group<'_>, xq: &Q8Rows, dst: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // SAFETY: `matmul_with` only gets here when `Isa::Avx512Vnni.is_available()`: the
            // CPU has AVX-512F, BW and VNNI, F16C and FMA, the features of `group_avx512`.
            unsafe { x86::group_avx512(group, xq, dst) }
        }
        _ => {
            for (r, dst) in dst.chunks_exact_mut(GROUP).enumerate().take(xq.rows) {
                group_scalar(group, xq.row(r), dst);
            }
        }
    }
}

/// The scalar kernel: eight outputs of one row of `x`, candle's eight lanes per output.
fn group_scalar(group: Group<'_>, x: Q8Row<'_>, dst: &mut [f32]) {
    for (lane, dst) in dst.iter_mut().enumerate().take(GROUP) {
        let mut acc = [0f32; 8];
        let blocks = group.weights.iter().zip(group.scales).zip(x.qs).zip(x.d);
        for (((tile, scales), q), &d8) in blocks {
            let d = f16::from_bits(scales[lane]).to_f32() * d8;
            let half = 32 * (lane % 2);
            let w = &tile.0[lane / 2][half..half + 32];
            for ((acc, w), q) in acc
                .iter_mut()
                .zip(w.chunks_exact(4))
                .zip(q.q.chunks_exact(4))
            {
                let sum: i32 = w
                    .iter()
                    .zip(q)
                    .map(|(&w, &q)| i32::from((w ^ 0x80) as i8) * i32::from(q))
                    .sum();
                *acc = d.mul_add(sum as f32, *acc);
            }
        }
        *dst = lane_sum(&acc);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The AVX-512 kernel. Per block of a group: the eight scales widened by `vcvtph2ps` and
    //! spread two features to a vector (`vpermps`), the four weight pairs loaded once; then for
    //! each row of `x` (up to four at a time) its block broadcast to both 256-bit halves, and
    //! per pair `vpdpbusd` from the row's offsets, `vcvtdq2ps`, the scale product `vmulps` and
    //! `vfmadd` into that pair's sixteen lanes. The eight lanes of each output are summed at the
    //! end in candle's order.

    use std::arch::x86_64::*;

    use super::{lane_sum, Group, Q8Block, Q8Row, Q8Rows, GROUP};

    /// Pairs of features per group.
    const PAIRS: usize = GROUP / 2;

    /// A 64-byte weight pair as a vector.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_pair(pair: &[u8; 64]) -> __m512i {
        // SAFETY: `pair` is 64 readable bytes; `loadu` has no alignment requirement.
        unsafe { _mm512_loadu_si512(pair.as_ptr().cast()) }
    }

    /// A block of `x` (values and lane offsets), each broadcast to both 256-bit halves.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_block(block: &Q8Block) -> (__m512i, __m512i) {
        // SAFETY: `q` and `offset` are 32 readable bytes each; `loadu` has no alignment
        // requirement.
        let (q, offset) = unsafe {
            (
                _mm256_loadu_si256(block.q.as_ptr().cast()),
                _mm256_loadu_si256(block.offset.as_ptr().cast()),
            )
        };
        (_mm512_broadcast_i64x4(q), _mm512_broadcast_i64x4(offset))
    }

    /// The eight block scales of a group (f16 bits) widened to f32, in the low half.
    #[inline]
    #[target_feature(enable = "avx512f,f16c")]
    fn load_scales(scales: &[u16; GROUP]) -> __m512 {
        // SAFETY: `scales` is 16 readable bytes; `loadu` has no alignment requirement.
        let raw = unsafe { _mm_loadu_si128(scales.as_ptr().cast()) };
        _mm512_castps256_ps512(_mm256_cvtph_ps(raw))
    }

    /// One group against `T` rows of `x`: `dst[t * 8 + lane]`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
    fn tile<const T: usize>(group: Group<'_>, x: [Q8Row<'_>; T], dst: &mut [f32]) {
        // Pair `p`'s scales: feature `2p` in lanes 0..8, `2p + 1` in lanes 8..16.
        let spread: [__m512i; PAIRS] = std::array::from_fn(|p| {
            let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
            _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        let mut acc = [[_mm512_setzero_ps(); PAIRS]; T];
        let blocks = group.weights.iter().zip(group.scales).enumerate();
        for (b, (tile, scales)) in blocks {
            let scales = load_scales(scales);
            let dw: [__m512; PAIRS] =
                std::array::from_fn(|p| _mm512_permutexvar_ps(spread[p], scales));
            let w: [__m512i; PAIRS] = std::array::from_fn(|p| load_pair(&tile.0[p]));
            for (acc, x) in acc.iter_mut().zip(&x) {
                let (q, offset) = load_block(&x.qs[b]);
                let d8 = _mm512_set1_ps(x.d[b]);
                for ((acc, &w), &dw) in acc.iter_mut().zip(&w).zip(&dw) {
                    let sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(offset, w, q));
                    *acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, d8), sums, *acc);
                }
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            for (p, &acc) in acc.iter().enumerate() {
                let mut lanes = [0f32; 16];
                // SAFETY: `lanes` is 16 writable f32; `storeu` has no alignment requirement.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
                dst[t * GROUP + 2 * p] = lane_sum(&lanes[..8]);
                dst[t * GROUP + 2 * p + 1] = lane_sum(&lanes[8..]);
            }
        }
    }

    /// One group against every row of `xq`, four rows of `x` at a time: `dst[r * 8 + lane]`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
    pub(super) fn group_avx512(group: Group<'_>, xq: &Q8Rows, dst: &mut [f32]) {
        let mut r = 0;
        while r < xq.rows {
            let dst = &mut dst[r * GROUP..];
            match xq.rows - r {
                1 => tile::<1>(group, [xq.row(r)], dst),
                2 => tile::<2>(group, [xq.row(r), xq.row(r + 1)], dst),
                3 => tile::<3>(group, [xq.row(r), xq.row(r + 1), xq.row(r + 2)], dst),
                _ => tile::<4>(
                    group,
                    [xq.row(r), xq.row(r + 1), xq.row(r + 2), xq.row(r + 3)],
                    dst,
                ),
            }
            r += 4;
        }
    }
}
