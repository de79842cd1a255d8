//! `y = x W^T` for a Q4_1 weight `W` (`[n_out, k]`) and f32 activations `x` (`[rows, k]`) on the
//! CPU, with SIMD dot products, bit for bit equal to candle's CPU `QMatMul::forward`.
//!
//! # The arithmetic (candle's, reproduced exactly)
//!
//! A Q4_1 block holds 32 weights as `d: f16, m: f16, qs: [u8; 16]`: weight `j < 16` is
//! `d * (qs[j] & 0xF) + m`, weight `j + 16` is `d * (qs[j] >> 4) + m`.
//!
//! Each row of `x` is first quantized to Q8_1 blocks of 32 values `x_0..x_31`:
//! `amax = max |x_j|`, `d8 = amax / 127`, `id = 1 / d8` (0 when `d8 == 0`),
//! `q_j = round(x_j * id)` (ties away from zero, saturated to `i8`), `d8` stored as f16 and
//! `s8 = f16(Σ q_j) * f16(d8)` (a product of two f16 values rounded to f16).
//!
//! Then for output `(r, n)`, over the blocks `b` of row `n` of `W` and row `r` of `x`, in order:
//!
//! ```text
//! sumi_b = Σ_{j<16} (qs[j] & 0xF) * q_j + (qs[j] >> 4) * q_{j+16}        (exact, i32)
//! y[r][n] = 0;  y[r][n] += ((sumi_b as f32 * d4_b) * d8_b) + (m4_b * s8_b)   (f32, no FMA)
//! ```
//!
//! with every f16 widened to f32 exactly. The integer sums are exact in any order, so SIMD can
//! compute them freely; the float steps are done one block at a time in this order, with
//! sixteen output rows in the sixteen lanes of a 512-bit vector (eight in each 256-bit half on
//! AVX2), so every lane performs the scalar operations.
//!
//! # Layout
//!
//! [`Q4_1Matrix`] keeps the blocks re-arranged by groups of sixteen output rows: for each group
//! and block index, one 320-byte tile `[d: 16 x f16][m: 16 x f16][qs: 4 x 64 bytes]` whose
//! 64-byte chunk `j` holds bytes `4j..4j + 4` of the `qs` of each of the sixteen rows (row `l`
//! at byte `4l`): their low nibbles are the row's weights `4j..4j + 4`, their high ones its
//! weights `16 + 4j..16 + 4j + 4`. Each 32-bit lane of a chunk is one row, so multiplying a
//! chunk's nibbles by four activations broadcast to every lane adds four products to each
//! row's block sum in its own lane: eight such products leave the sixteen block sums in row
//! order, with no horizontal add. The last group is padded with zero rows, whose results are
//! dropped. Up to eight rows of `x` go through a group together, sharing each load and split
//! of its nibbles. AVX2 runs a tile as two halves of eight rows (its first and second 32 bytes
//! of each chunk, scale and minimum), four rows of `x` at a time (its sixteen vector registers
//! would not hold eight).
//!
//! # Threads
//!
//! The groups of sixteen output rows are spread over candle's barrier pool by the crate's
//! `groups` module; each output is computed whole by one thread, so the split never changes a
//! bit.

use std::fmt;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use half::f16;

use crate::error::{LlamaError, Result};
use crate::groups::{count_rows, forward_tensor, product_by_groups, weight_blocks, weight_shape};

/// Values per Q4_1 (and Q8_1) block.
pub const BLOCK_VALUES: usize = 32;
/// Bytes per Q4_1 block (`d`, `m` as f16, then 16 bytes of nibbles).
pub const BLOCK_BYTES: usize = 20;
/// Output rows per tile (a group).
const GROUP: usize = 16;
/// Output rows per half tile (AVX2's vectors).
const HALF: usize = GROUP / 2;

/// The instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Scalar,
    /// x86-64 AVX2 (with F16C): `vpmaddubsw` / `vpmaddwd` block sums.
    Avx2,
    /// x86-64 AVX-512 VNNI on 512-bit vectors (AVX-512F and BW, with AVX2 and F16C):
    /// `vpdpbusd` block sums.
    Avx512Vnni,
}

impl Isa {
    /// The fastest instruction set this CPU supports (checked at run time).
    pub fn detect() -> Isa {
        [Isa::Avx512Vnni, Isa::Avx2]
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU can run `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("f16c")
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512Vnni => false,
        }
    }
}

/// A Q4_1 weight `W` of shape `[n_out, k]` (`k` a multiple of 32), ready for `y = x W^T`.
///
/// Output `y[r][n] = Σ_b ((sumi_b * d4_b) * d8_b + m4_b * s8_b)`, accumulated block by block in
/// f32, where `sumi_b` is the exact integer dot product of block `b` of row `n` (4-bit values)
/// with block `b` of row `r` of `x` quantized to Q8_1 (`d8_b`, `s8_b` its scale and scaled sum)
/// and `d4_b`, `m4_b` the weight block's scale and minimum: the same value, bit for bit, as
/// candle's CPU `QMatMul::forward` (see the [module documentation](self)).
#[derive(Clone)]
pub struct Q4_1Matrix {
    n_out: usize,
    k: usize,
    /// Blocks per row, `k / 32`.
    blocks: usize,
    /// `ceil(n_out / 16)` groups of `blocks` tiles, group after group.
    tiles: Vec<Tile>,
    isa: Isa,
}

impl fmt::Debug for Q4_1Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Q4_1Matrix")
            .field("n_out", &self.n_out)
            .field("k", &self.k)
            .field("isa", &self.isa)
            .finish_non_exhaustive()
    }
}

impl Q4_1Matrix {
    /// Reads the blocks of a Q4_1 `QTensor` of shape `[n_out, k]`.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when the tensor is not Q4_1, not two-dimensional, or its
    /// rows are not a whole number of 32-value blocks; candle errors reading its bytes.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Self> {
        let (n_out, k) = weight_shape(tensor, GgmlDType::Q4_1, "Q4_1")?;
        let data = tensor.data()?;
        Self::from_blocks(&data, n_out, k)
    }

    /// Reads `n_out` rows of `k / 32` Q4_1 blocks of 20 bytes each (`d`, `m` as f16 in native
    /// byte order, then 16 bytes of nibbles), row after row.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when `k` is not a multiple of 32 or `bytes` is not
    /// `n_out * k / 32 * 20` bytes long.
    pub fn from_blocks(bytes: &[u8], n_out: usize, k: usize) -> Result<Self> {
        let blocks = weight_blocks(bytes, (n_out, k), (BLOCK_VALUES, BLOCK_BYTES), "Q4_1")?;
        let groups = n_out.div_ceil(GROUP);
        let mut tiles = vec![Tile::ZERO; groups * blocks];
        if blocks > 0 {
            for (n, row) in bytes.chunks_exact(blocks * BLOCK_BYTES).enumerate() {
                let (group, lane) = (n / GROUP, n % GROUP);
                let group_tiles = &mut tiles[group * blocks..(group + 1) * blocks];
                for (tile, block) in group_tiles.iter_mut().zip(row.chunks_exact(BLOCK_BYTES)) {
                    tile.set(lane, block);
                }
            }
        }
        Ok(Q4_1Matrix {
            n_out,
            k,
            blocks,
            tiles,
            isa: Isa::detect(),
        })
    }

    /// The rows of `parts` one after the other: `W = [W_1; W_2; ...]`, so that `x W^T` is the
    /// outputs of every part side by side, each output the same bits as its part's (every
    /// output is computed on its own).
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when there is no part, the parts have different `k`, or a
    /// part before the last has a number of rows that is not a multiple of 16 (its last tile
    /// would be padded).
    pub fn stack(parts: &[&Q4_1Matrix]) -> Result<Q4_1Matrix> {
        let Some((first, _)) = parts.split_first() else {
            return Err(LlamaError::Unsupported("no Q4_1 matrix to stack".into()));
        };
        let uneven = parts[..parts.len() - 1]
            .iter()
            .any(|p| !p.n_out.is_multiple_of(GROUP));
        if uneven || parts.iter().any(|p| p.k != first.k) {
            let shapes: Vec<_> = parts.iter().map(|p| [p.n_out, p.k]).collect();
            return Err(LlamaError::Unsupported(format!(
                "Q4_1 matrices of shapes {shapes:?} do not stack (one k, whole groups of 16 rows)"
            )));
        }
        Ok(Q4_1Matrix {
            n_out: parts.iter().map(|p| p.n_out).sum(),
            k: first.k,
            blocks: first.blocks,
            tiles: parts.iter().flat_map(|p| p.tiles.iter().copied()).collect(),
            isa: first.isa,
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

    /// The instruction set [`Q4_1Matrix::forward`] uses on this CPU.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `y = x W^T` for f32 `x` of shape `[..., k]` on the CPU; `y` has shape `[..., n_out]`.
    /// Bit for bit candle's `QMatMul::forward` (see [`Q4_1Matrix`] for the formula).
    ///
    /// # Errors
    /// [`LlamaError::Request`] for an input that is not f32, not on the CPU, has no dimension
    /// or whose last dimension is not `k`; candle errors otherwise.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, self.isa)
    }

    /// [`Q4_1Matrix::forward`] on a chosen instruction set (all give the same bits; for tests
    /// and benchmarks).
    ///
    /// # Errors
    /// As [`Q4_1Matrix::forward`], and [`LlamaError::Unsupported`] when this CPU lacks `isa`.
    pub fn forward_with(&self, x: &Tensor, isa: Isa) -> Result<Tensor> {
        forward_tensor(x, self.k, self.n_out, "Q4_1", |x, out| {
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

    /// [`Q4_1Matrix::matmul`] on a chosen instruction set.
    ///
    /// # Errors
    /// As [`Q4_1Matrix::matmul`], and [`LlamaError::Unsupported`] when this CPU lacks `isa`.
    pub fn matmul_with(&self, x: &[f32], out: &mut [f32], isa: Isa) -> Result<()> {
        if !isa.is_available() {
            return Err(LlamaError::Unsupported(format!(
                "this CPU cannot run the {isa:?} Q4_1 kernel"
            )));
        }
        let rows = count_rows(x.len(), out.len(), self.k, self.n_out, "Q4_1")?;
        if rows == 0 || self.n_out == 0 {
            return Ok(());
        }
        let xq = Q8Rows::quantize(x, rows, self.blocks, isa);
        product_by_groups::<GROUP, _>(rows, self.n_out, self.k, out, |group, dst| {
            let tiles = &self.tiles[group * self.blocks..(group + 1) * self.blocks];
            group_product(isa, tiles, &xq, dst);
        });
        Ok(())
    }
}

/// Rows of `x` (`[rows, k]`, `k` a multiple of 32) quantized to Q8_1 on `isa`, as the blocks
/// candle's `BlockQ8_1::from_float` writes (36 bytes each: `d` and `s` as f16 in native byte
/// order, then the 32 values as i8): the first step of every product, exposed for tests.
///
/// # Errors
/// [`LlamaError::Request`] when `x.len()` is not a multiple of 32, [`LlamaError::Unsupported`]
/// when this CPU lacks `isa`.
#[doc(hidden)]
pub fn q8_1_blocks(x: &[f32], isa: Isa) -> Result<Vec<u8>> {
    if !isa.is_available() {
        return Err(LlamaError::Unsupported(format!(
            "this CPU cannot run the {isa:?} Q4_1 kernel"
        )));
    }
    if !x.len().is_multiple_of(BLOCK_VALUES) {
        return Err(LlamaError::Request(format!(
            "{} values are not whole 32-value blocks",
            x.len()
        )));
    }
    let xq = Q8Rows::quantize(x, 1, x.len() / BLOCK_VALUES, isa);
    let mut out = Vec::with_capacity(xq.blocks.len() * 36);
    for q in &xq.blocks {
        out.extend(f16::from_f32(q.d).to_ne_bytes());
        out.extend(f16::from_f32(q.s).to_ne_bytes());
        out.extend(q.q.iter().map(|&v| v as u8));
    }
    Ok(out)
}

/// One block of each of sixteen output rows (`lane` 0..16), 320 bytes; every field by halves
/// of eight lanes (AVX2's vectors), the two halves side by side, so that a whole field is one
/// 512-bit vector. (Aligning tiles to cache lines made no measurable difference to the
/// products, and the aligned allocations raised the peak memory of loading SmolLM2 by 28 MB.)
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Tile {
    /// The scales `d` as f16, native byte order, lane after lane.
    d: [[u8; 2 * HALF]; 2],
    /// The minima `m` as f16, native byte order, lane after lane.
    m: [[u8; 2 * HALF]; 2],
    /// Chunk `j`: bytes `4j..4j + 4` of the 16 nibble bytes of each lane, lane after lane.
    qs: [[[u8; 4 * HALF]; 2]; 4],
}

impl Tile {
    const ZERO: Tile = Tile {
        d: [[0; 2 * HALF]; 2],
        m: [[0; 2 * HALF]; 2],
        qs: [[[0; 4 * HALF]; 2]; 4],
    };

    /// Stores a 20-byte Q4_1 block (`d`, `m`, 16 nibble bytes) as lane `lane`.
    fn set(&mut self, lane: usize, block: &[u8]) {
        let (half, at) = (lane / HALF, lane % HALF);
        self.d[half][2 * at..2 * at + 2].copy_from_slice(&block[0..2]);
        self.m[half][2 * at..2 * at + 2].copy_from_slice(&block[2..4]);
        for (chunk, four) in self.qs.iter_mut().zip(block[4..20].chunks_exact(4)) {
            chunk[half][4 * at..4 * at + 4].copy_from_slice(four);
        }
    }

    /// Lane `lane`'s scale and minimum, widened to f32, and its 16 nibble bytes.
    fn lane(&self, lane: usize) -> (f32, f32, [u8; 16]) {
        let (half, at) = (lane / HALF, lane % HALF);
        let (d, m) = (&self.d[half], &self.m[half]);
        let d = f16::from_ne_bytes([d[2 * at], d[2 * at + 1]]);
        let m = f16::from_ne_bytes([m[2 * at], m[2 * at + 1]]);
        let nibbles = std::array::from_fn(|i| self.qs[i / 4][half][4 * at + i % 4]);
        (d.to_f32(), m.to_f32(), nibbles)
    }
}

/// A Q8_1 block as the kernels read it: the 32 values `q_0..q_31` in order, and its scales
/// widened to f32.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Q8Block {
    q: [i8; 32],
    /// `f32(f16(amax / 127))`.
    d: f32,
    /// `f32(f16(Σ q) * f16(d))`.
    s: f32,
}

/// Rows of `x` quantized to Q8_1 as candle does.
struct Q8Rows {
    rows: usize,
    /// Blocks per row.
    per_row: usize,
    /// `[rows][per_row]` blocks.
    blocks: Vec<Q8Block>,
}

impl Q8Rows {
    /// Candle's `BlockQ8_1::from_float` on each row of `x` (`[rows, per_row * 32]`).
    fn quantize(x: &[f32], rows: usize, per_row: usize, isa: Isa) -> Q8Rows {
        let zero = Q8Block {
            q: [0; 32],
            d: 0.0,
            s: 0.0,
        };
        let mut blocks = vec![zero; rows * per_row];
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512Vnni => {
                // SAFETY: both instruction sets include AVX2, and the callers (`matmul_with`,
                // `q8_1_blocks`) checked that this CPU has `isa`.
                unsafe { x86::quantize_blocks(x, &mut blocks) }
            }
            _ => quantize_blocks(x, &mut blocks),
        }
        Q8Rows {
            rows,
            per_row,
            blocks,
        }
    }

    /// Row `r`'s blocks.
    fn row(&self, r: usize) -> &[Q8Block] {
        &self.blocks[r * self.per_row..(r + 1) * self.per_row]
    }

    /// Rows `r..r + T`.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn rows_from<const T: usize>(&self, r: usize) -> [&[Q8Block]; T] {
        std::array::from_fn(|i| self.row(r + i))
    }
}

/// Quantizes 32-value blocks of `x` to Q8_1 as candle's `BlockQ8_1::from_float` does: `amax`,
/// `d = amax / 127`, `q = round(x / d)` (ties away from zero, saturated, NaN to 0), `d` and
/// `s = f16(Σ q) * f16(d)` kept as f16 values widened to f32.
#[inline(always)]
fn quantize_blocks(x: &[f32], blocks: &mut [Q8Block]) {
    for (values, block) in x.chunks_exact(BLOCK_VALUES).zip(blocks) {
        let amax = values.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let scale = amax / 127.0;
        let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        // `as` saturates and maps NaN to 0, as in candle.
        for (q, &v) in block.q.iter_mut().zip(values) {
            *q = (v * inverse).round() as i8;
        }
        let sum: i32 = block.q.iter().map(|&q| i32::from(q)).sum();
        let scale16 = f16::from_f32(scale);
        block.d = scale16.to_f32();
        block.s = (f16::from_f32(sum as f32) * scale16).to_f32();
    }
}

/// One group of sixteen output rows against every row of `xq`: `dst[r * 16 + lane]`.
fn group_product(isa: Isa, tiles: &[Tile], xq: &Q8Rows, dst: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `matmul_with` only gets here when `Isa::Avx2.is_available()`, i.e. the
            // CPU has AVX2 and F16C, the features `group_avx2` is compiled for.
            unsafe { x86::group_avx2(tiles, xq, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // SAFETY: only reached when `Isa::Avx512Vnni.is_available()`: the CPU has AVX2,
            // F16C, AVX-512F, AVX-512BW and AVX-512 VNNI, the features of `group_vnni`.
            unsafe { x86::group_vnni(tiles, xq, dst) }
        }
        _ => {
            for (r, dst) in dst.chunks_exact_mut(GROUP).enumerate().take(xq.rows) {
                group_scalar(tiles, xq.row(r), dst);
            }
        }
    }
}

/// The scalar kernel: sixteen outputs of one row of `x`, candle's loop per output.
fn group_scalar(tiles: &[Tile], x: &[Q8Block], dst: &mut [f32]) {
    let mut acc = [0f32; GROUP];
    for (tile, q) in tiles.iter().zip(x) {
        for (lane, acc) in acc.iter_mut().enumerate() {
            let (d4, m4, nibbles) = tile.lane(lane);
            let mut sumi = 0i32;
            let (lo, hi) = q.q.split_at(16);
            for ((&byte, &lo), &hi) in nibbles.iter().zip(lo).zip(hi) {
                sumi +=
                    i32::from(byte & 0x0F) * i32::from(lo) + i32::from(byte >> 4) * i32::from(hi);
            }
            *acc += sumi as f32 * d4 * q.d + m4 * q.s;
        }
    }
    dst[..GROUP].copy_from_slice(&acc);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels. Per tile (one block of sixteen rows): four 512-bit loads of nibbles
    //! (chunk `j`: bytes `4j..4j + 4` of each row, one row a lane), split by `vpandd` /
    //! `vpsrlw`; for each row of `x`, the low nibbles multiplied by its values `4j..4j + 4` and
    //! the high ones by `16 + 4j..16 + 4j + 4`, each four broadcast to every lane, summed into
    //! the sixteen block sums lane by lane. The float step: `vcvtdq2ps`, `vcvtph2ps` for the
    //! scales and minima, then `vmulps` / `vaddps` in candle's order. Up to eight rows of `x`
    //! share each nibble load and split. AVX2 does the same on each half of a tile (eight rows,
    //! 256-bit vectors), four rows of `x` at a time.

    use std::arch::x86_64::*;

    use half::f16;

    use super::{Q8Block, Q8Rows, Tile, GROUP, HALF};

    /// [`super::quantize_blocks`] on AVX2, with the same results: per block, `amax` by
    /// `vmaxps` (a NaN `|x|` leaves the running maximum unchanged, as `f32::max` does; the
    /// maximum of the other values does not depend on the order), `x * (1 / d)` by `vmulps`,
    /// rounding half away from zero as `t = trunc(y)`, `t + copysign(1, y)` where
    /// `|y - t| >= 0.5` (both exact), then NaN to 0, clamping to `[-128, 127]` and packing to
    /// bytes (`as i8`). The f16 steps are the `half` crate's, as in candle.
    #[target_feature(enable = "avx2")]
    pub(super) fn quantize_blocks(x: &[f32], blocks: &mut [Q8Block]) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        for (values, block) in x.chunks_exact(super::BLOCK_VALUES).zip(blocks) {
            let mut v = [_mm256_setzero_ps(); 4];
            for (i, v) in v.iter_mut().enumerate() {
                let eight = &values[8 * i..8 * i + 8];
                // SAFETY: `eight` is 8 readable f32; `loadu` has no alignment requirement.
                *v = unsafe { _mm256_loadu_ps(eight.as_ptr()) };
            }
            // The second operand of `vmaxps` is returned when the first is NaN: keep the
            // running maximum (never NaN) there.
            let mut amax = _mm256_setzero_ps();
            for &v in &v {
                amax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), amax);
            }
            let amax = horizontal_max(amax);
            let scale = amax / 127.0;
            let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let inverse = _mm256_set1_ps(inverse);
            let mut ints = [_mm256_setzero_si256(); 4];
            for (int, &v) in ints.iter_mut().zip(&v) {
                *int = round_to_i8(_mm256_mul_ps(v, inverse));
            }
            let sum = _mm256_add_epi32(
                _mm256_add_epi32(ints[0], ints[1]),
                _mm256_add_epi32(ints[2], ints[3]),
            );
            let sum = horizontal_sum(sum);
            // i32 to i16 to i8 (no saturation: already in range), interleaved by 128-bit
            // halves: the dwords hold values [0..4, 8..12, 16..20, 24..28, 4..8, 12..16,
            // 20..24, 28..32]; put them back in order.
            let words = [
                _mm256_packs_epi32(ints[0], ints[1]),
                _mm256_packs_epi32(ints[2], ints[3]),
            ];
            let bytes = _mm256_packs_epi16(words[0], words[1]);
            let bytes =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // SAFETY: `block.q` is 32 writable bytes; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(block.q.as_mut_ptr().cast(), bytes) }
            let scale16 = f16::from_f32(scale);
            block.d = scale16.to_f32();
            block.s = (f16::from_f32(sum as f32) * scale16).to_f32();
        }
    }

    /// The largest of eight values, none of them NaN.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn horizontal_max(v: __m256) -> f32 {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        _mm_cvtss_f32(m)
    }

    /// The sum of eight i32 (no overflow here: at most 32 * 128 in magnitude).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn horizontal_sum(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
        _mm_cvtsi128_si32(s)
    }

    /// `y.round() as i8` lane by lane: rounding half away from zero, NaN to 0, saturating.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn round_to_i8(y: __m256) -> __m256i {
        let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
        let t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        // `y - t` is exact; for infinite `y` it is NaN and the comparison false.
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(y, t));
        let up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5), _CMP_GE_OQ);
        let one = _mm256_or_ps(_mm256_set1_ps(1.0), _mm256_and_ps(y, sign));
        let r = _mm256_add_ps(t, _mm256_and_ps(up, one));
        // NaN to 0, then clamp (no NaN left, so operand order does not matter).
        let r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
        let r = _mm256_min_ps(
            _mm256_max_ps(r, _mm256_set1_ps(-128.0)),
            _mm256_set1_ps(127.0),
        );
        _mm256_cvttps_epi32(r)
    }

    /// 32 bytes as a vector.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load_u8(bytes: &[u8; 32]) -> __m256i {
        // SAFETY: `bytes` is 32 readable bytes; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
    }

    /// Eight f16 (native byte order) widened to f32, exactly.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn load_f16x8(bytes: &[u8; 16]) -> __m256 {
        // SAFETY: `bytes` is 16 readable bytes; `loadu` has no alignment requirement.
        let raw = unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) };
        _mm256_cvtph_ps(raw)
    }

    /// Sixteen f16 (native byte order, two halves of eight) widened to f32, exactly.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_f16x16(halves: &[[u8; 16]; 2]) -> __m512 {
        // SAFETY: `halves` is 32 contiguous readable bytes; `loadu` has no alignment
        // requirement.
        let raw = unsafe { _mm256_loadu_si256(halves.as_ptr().cast()) };
        _mm512_cvtph_ps(raw)
    }

    /// The low and high nibbles of half a tile chunk, as bytes 0..16.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn nibbles(chunk: &[u8; 32]) -> (__m256i, __m256i) {
        let v = load_u8(chunk);
        let mask = _mm256_set1_epi8(0x0F);
        (
            _mm256_and_si256(v, mask),
            _mm256_and_si256(_mm256_srli_epi16(v, 4), mask),
        )
    }

    /// The low and high nibbles of a whole tile chunk (its two halves), as bytes 0..16.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn nibbles_x16(chunk: &[[u8; 32]; 2]) -> (__m512i, __m512i) {
        // SAFETY: `chunk` is 64 contiguous readable bytes; `loadu` has no alignment
        // requirement.
        let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
        let mask = _mm512_set1_epi8(0x0F);
        (
            _mm512_and_si512(v, mask),
            _mm512_and_si512(_mm512_srli_epi16(v, 4), mask),
        )
    }

    /// `acc + (((sumi * d4) * d8) + (m4 * s8))`, lane by lane, in candle's order (no FMA).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn accumulate(acc: __m256, sumi: __m256i, d4: __m256, m4: __m256, d8: f32, s8: f32) -> __m256 {
        let sumi = _mm256_cvtepi32_ps(sumi);
        let scaled = _mm256_mul_ps(_mm256_mul_ps(sumi, d4), _mm256_set1_ps(d8));
        let offset = _mm256_mul_ps(m4, _mm256_set1_ps(s8));
        _mm256_add_ps(acc, _mm256_add_ps(scaled, offset))
    }

    /// [`accumulate`] on sixteen lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn accumulate_x16(
        acc: __m512,
        sumi: __m512i,
        d4: __m512,
        m4: __m512,
        d8: f32,
        s8: f32,
    ) -> __m512 {
        let sumi = _mm512_cvtepi32_ps(sumi);
        let scaled = _mm512_mul_ps(_mm512_mul_ps(sumi, d4), _mm512_set1_ps(d8));
        let offset = _mm512_mul_ps(m4, _mm512_set1_ps(s8));
        _mm512_add_ps(acc, _mm512_add_ps(scaled, offset))
    }

    /// Values `4j..4j + 4` (`high`: `16 + 4j..16 + 4j + 4`) of `q` as one 32-bit lane.
    #[inline(always)]
    fn four(q: &Q8Block, j: usize, high: bool) -> i32 {
        let at = 4 * j + if high { 16 } else { 0 };
        i32::from_ne_bytes([q.q[at], q.q[at + 1], q.q[at + 2], q.q[at + 3]].map(|v| v as u8))
    }

    /// `sums` plus, in each lane, the products of chunk `j`'s low nibbles (`lo`) and high ones
    /// (`hi`) with their four values of `q`: `vpmaddubsw` (u8 x i8 pairs to i16, at most
    /// 2 * 15 * 128 in magnitude: no saturation), the two added in i16 (at most 7680),
    /// `vpmaddwd` by ones to i32, added to `sums`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn dot_avx2(sums: __m256i, lo: __m256i, hi: __m256i, q: &Q8Block, j: usize) -> __m256i {
        let low = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(four(q, j, false)));
        let high = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(four(q, j, true)));
        let pairs = _mm256_madd_epi16(_mm256_add_epi16(low, high), _mm256_set1_epi16(1));
        _mm256_add_epi32(sums, pairs)
    }

    /// As [`dot_avx2`] on sixteen lanes, by two `vpdpbusd` (u8 x i8 quadruples summed into
    /// i32, exactly).
    #[inline]
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn dot_vnni(sums: __m512i, lo: __m512i, hi: __m512i, q: &Q8Block, j: usize) -> __m512i {
        let sums = _mm512_dpbusd_epi32(sums, lo, _mm512_set1_epi32(four(q, j, false)));
        _mm512_dpbusd_epi32(sums, hi, _mm512_set1_epi32(four(q, j, true)))
    }

    /// Half `half` of each tile (its rows `8 half..8 half + 8`) against `T` rows of `x`:
    /// `dst[t * 16 + 8 half + lane]`. Each row's block sums are two independent sums (of
    /// chunks 0 and 2, 1 and 3), then added, so that the rows' work overlaps.
    #[target_feature(enable = "avx2,f16c")]
    fn tile_avx2<const T: usize>(tiles: &[Tile], half: usize, x: [&[Q8Block]; T], dst: &mut [f32]) {
        // As long as `tiles`: no bounds checks below.
        let x = x.map(|x| &x[..tiles.len()]);
        let mut acc = [_mm256_setzero_ps(); T];
        for (b, tile) in tiles.iter().enumerate() {
            let mut sums = [[_mm256_setzero_si256(); 2]; T];
            for (j, chunk) in tile.qs.iter().enumerate() {
                let (lo, hi) = nibbles(&chunk[half]);
                for (sums, x) in sums.iter_mut().zip(&x) {
                    sums[j % 2] = dot_avx2(sums[j % 2], lo, hi, &x[b], j);
                }
            }
            let d4 = load_f16x8(&tile.d[half]);
            let m4 = load_f16x8(&tile.m[half]);
            for ((acc, sums), x) in acc.iter_mut().zip(sums).zip(&x) {
                let sums = _mm256_add_epi32(sums[0], sums[1]);
                *acc = accumulate(*acc, sums, d4, m4, x[b].d, x[b].s);
            }
        }
        for (t, acc) in acc.into_iter().enumerate() {
            let dst = &mut dst[t * GROUP + HALF * half..][..HALF];
            // SAFETY: `dst` is eight writable f32 (the slice above checks the length);
            // `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), acc) }
        }
    }

    /// Each tile whole against `T` rows of `x`: `dst[t * 16 + lane]`. Each row's block sums are
    /// two independent sums (of chunks 0 and 2, 1 and 3), then added: chains of four
    /// `vpdpbusd`, sixteen of them a tile at eight rows, so that the rows' work overlaps.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn tile_vnni<const T: usize>(tiles: &[Tile], x: [&[Q8Block]; T], dst: &mut [f32]) {
        // As long as `tiles`: no bounds checks below.
        let x = x.map(|x| &x[..tiles.len()]);
        let mut acc = [_mm512_setzero_ps(); T];
        for (b, tile) in tiles.iter().enumerate() {
            let mut sums = [[_mm512_setzero_si512(); 2]; T];
            for (j, chunk) in tile.qs.iter().enumerate() {
                let (lo, hi) = nibbles_x16(chunk);
                for (sums, x) in sums.iter_mut().zip(&x) {
                    sums[j % 2] = dot_vnni(sums[j % 2], lo, hi, &x[b], j);
                }
            }
            let d4 = load_f16x16(&tile.d);
            let m4 = load_f16x16(&tile.m);
            for ((acc, sums), x) in acc.iter_mut().zip(sums).zip(&x) {
                let sums = _mm512_add_epi32(sums[0], sums[1]);
                *acc = accumulate_x16(*acc, sums, d4, m4, x[b].d, x[b].s);
            }
        }
        for (t, acc) in acc.into_iter().enumerate() {
            let dst = &mut dst[t * GROUP..][..GROUP];
            // SAFETY: `dst` is sixteen writable f32 (the slice above checks the length);
            // `storeu` has no alignment requirement.
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), acc) }
        }
    }

    /// Calls `$tile::<T>($($arg,)* rows, dst)` over every row of `$xq`, up to `$most` rows
    /// (4 or 8) at a time, `rows` being the next `T` rows and `dst` their outputs on.
    macro_rules! in_passes {
        ($xq:expr, $dst:expr, $most:literal, $tile:ident($($arg:expr),*)) => {{
            let (xq, dst): (&Q8Rows, &mut [f32]) = ($xq, $dst);
            let mut r = 0;
            while r < xq.rows {
                let dst = &mut dst[r * GROUP..];
                r += match (xq.rows - r).min($most) {
                    1 => {
                        $tile::<1>($($arg,)* xq.rows_from(r), dst);
                        1
                    }
                    2 => {
                        $tile::<2>($($arg,)* xq.rows_from(r), dst);
                        2
                    }
                    3 => {
                        $tile::<3>($($arg,)* xq.rows_from(r), dst);
                        3
                    }
                    4..8 => {
                        $tile::<4>($($arg,)* xq.rows_from(r), dst);
                        4
                    }
                    _ => {
                        $tile::<8>($($arg,)* xq.rows_from(r), dst);
                        8
                    }
                };
            }
        }};
    }

    /// One group of sixteen output rows against every row of `xq`, half by half, four rows of
    /// `x` at a time: `dst[r * 16 + lane]`.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn group_avx2(tiles: &[Tile], xq: &Q8Rows, dst: &mut [f32]) {
        for half in 0..2 {
            in_passes!(xq, &mut *dst, 4, tile_avx2(tiles, half));
        }
    }

    /// One group of sixteen output rows against every row of `xq`, up to eight rows of `x` at a
    /// time: `dst[r * 16 + lane]`.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) fn group_vnni(tiles: &[Tile], xq: &Q8Rows, dst: &mut [f32]) {
        in_passes!(xq, dst, 8, tile_vnni(tiles));
    }
}
