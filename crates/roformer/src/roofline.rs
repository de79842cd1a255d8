//! How close the matrix products come to the hardware: each multiply-add instruction's
//! ceiling on one core ([`ceilings`]), and one product of the CPU layer, f32 or bf16, to time
//! against it ([`ProductCase`]). `roformer bench products` reports both.
//!
//! ```text
//! share of the ceiling = product GFLOP/s / (ceiling GFLOP/s x threads)
//! product FLOP         = 2 m n k
//! ```

pub use crate::cpu::ceiling::{ceilings, Ceiling};

use crate::cpu::bf16::{self, onednn, pack_panels, packed_len, Kernel, PackedA, PackedB, MR};
use crate::cpu::product::{product_on, product_prepacked};
use crate::cpu::{Dst, Mat, Precision};
use crate::error::ModelError;
use crate::memory::check_fits;

/// The oneDNN version loaded here (`major.minor.patch`), where it can run the bf16 products
/// ([`ProductCase::run_onednn`]).
pub fn onednn_version() -> Option<&'static str> {
    bf16::native()?;
    onednn::version().ok()
}

/// The bf16 products' kernels here: our AVX512-BF16 kernel, and oneDNN where it loads
/// (its version, the implementation it picks for a `256 x 256 x 256` product such as
/// `brg:avx512_core_bf16` or `brg:avx512_core_amx`, and whether it is the default), or why
/// not. `None` where the CPU has no native bf16 dot product.
pub fn bf16_kernels() -> Option<String> {
    let native = bf16::native()?;
    let onednn = match onednn::version() {
        Ok(version) => format!(
            "oneDNN {version} ({}){}",
            onednn::implementation(256, 256, 256).unwrap_or_else(|| "no matmul".into()),
            if native == Kernel::OneDnn {
                ", the default"
            } else {
                ", on request (ROFORMER_ONEDNN=1)"
            }
        ),
        Err(why) => why.to_owned(),
    };
    Some(format!("ours (AVX512-BF16); {onednn}"))
}

/// How an operand is stored: as its own rows, or as the rows of its transpose (the `k` of
/// each row or column is then strided, as the weight gradients' operands are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// Row-major: element `(i, j)` at `i * cols + j`.
    Rows,
    /// The transpose is row-major: element `(i, j)` at `j * rows + i`.
    Transposed,
}

/// The operands and output of `C = A B` for an `m x k` `A` and a `k x n` `B`, filled with
/// values in [-1, 1), for timing the product of both fast paths (`crate::cpu::product`).
#[derive(Debug)]
pub struct ProductCase {
    m: usize,
    n: usize,
    k: usize,
    storage: (Storage, Storage),
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    /// The operands packed once for [`ProductCase::run_prepacked`] (`A`'s words, whether in
    /// rows, and `B`), on its first call.
    packed: Option<(Vec<u32>, bool, PackedB)>,
}

impl ProductCase {
    /// The case `(m, n, k)` with `A` and `B` stored as `storage` says.
    ///
    /// # Errors
    /// [`ModelError::Input`] when a size is zero, or the operands, the output and their bf16
    /// packing (`6 (mk + kn) + 4 mn` bytes) would not fit in the memory available now
    /// ([`crate::memory::check_fits`]), so that a size asked for is refused, not an abort.
    pub fn new(
        (m, n, k): (usize, usize, usize),
        storage: (Storage, Storage),
    ) -> Result<ProductCase, ModelError> {
        let len = |rows: usize, cols: usize| {
            rows.checked_mul(cols)
                .filter(|&l| l > 0 && l <= isize::MAX as usize / 4)
                .ok_or_else(|| {
                    ModelError::Input(format!(
                        "product {m}x{n}x{k}: sizes must be at least 1 and fit in memory"
                    ))
                })
        };
        let (la, lb, lc) = (len(m, k)?, len(k, n)?, len(m, n)?);
        let needs = (la as u64 + lb as u64)
            .saturating_mul(6)
            .saturating_add((lc as u64).saturating_mul(4));
        check_fits(|| format!("product {m}x{n}x{k}"), needs)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        Ok(ProductCase {
            m,
            n,
            k,
            storage,
            a: filled(la, 1),
            b: filled(lb, 2),
            c: vec![0.0; lc],
            packed: None,
        })
    }

    /// `2 m n k`, the FLOP of one product.
    pub fn flop(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Runs `C = A B` once in `precision` (f32 where the CPU has no native bf16 dot
    /// product), on rayon's threads when `parallel`, else on the calling thread.
    ///
    /// # Errors
    /// Only if the product finds an operand outside its buffer (never, by construction).
    pub fn run(&mut self, precision: Precision, parallel: bool) -> Result<(), ModelError> {
        self.run_on(precision.bf16_kernel(), parallel)
    }

    /// Runs `C = A B` once in bf16 through oneDNN's matmul where it takes the product (our
    /// kernel otherwise), whether or not oneDNN is this machine's default; f32 where the CPU
    /// has no native bf16 dot product.
    ///
    /// # Errors
    /// As [`ProductCase::run`].
    pub fn run_onednn(&mut self, parallel: bool) -> Result<(), ModelError> {
        let kernel = bf16::native().map(|_| Kernel::OneDnn);
        self.run_on(kernel, parallel)
    }

    fn run_on(&mut self, kernel: Option<Kernel>, parallel: bool) -> Result<(), ModelError> {
        let (m, n, k) = (self.m, self.n, self.k);
        let a = view(&self.a, (m, k), self.storage.0);
        let b = view(&self.b, (k, n), self.storage.1);
        product_on(
            (m, n, k),
            Dst::Slice(&mut self.c),
            (0, n),
            false,
            (a, b),
            1.0,
            parallel,
            kernel,
        )?;
        Ok(())
    }

    /// Runs `C = A B` once in bf16 on operands packed ahead, once, as a training step's kept
    /// activations are packed by the pass that makes them (`A` as rows of pair words when its
    /// rows are contiguous, else in interleaved panels; `B` in panels of its columns): the
    /// kernel alone, without the packing that [`ProductCase::run`] times with it. f32 (as
    /// `run`) where the CPU has no native bf16 dot product.
    ///
    /// # Errors
    /// As [`ProductCase::run`].
    pub fn run_prepacked(&mut self, parallel: bool) -> Result<(), ModelError> {
        if bf16::native().is_none() {
            return self.run(Precision::F32, parallel);
        }
        let (m, n, k) = (self.m, self.n, self.k);
        let (a_words, rows, b) = self.packed.get_or_insert_with(|| {
            let mut words = vec![0; packed_len(m, k, MR)];
            let a = view(&self.a, (m, k), self.storage.0);
            let rows = pack_panels(a, (m, k), MR, (parallel, true), &mut words);
            let b = PackedB::new(view(&self.b, (k, n), self.storage.1), k, n, parallel);
            (words, rows, b)
        });
        let a = PackedA::from_words(a_words, m, k, *rows)
            .ok_or_else(|| ModelError::Input(format!("product {m}x{n}x{k}: packed words")))?;
        product_prepacked(
            Dst::Slice(&mut self.c),
            (0, n),
            false,
            (a, b.view()),
            1.0,
            parallel,
        )?;
        Ok(())
    }

    /// The last product's output, `m x n` row-major.
    pub fn output(&self) -> &[f32] {
        &self.c
    }
}

/// The `rows x cols` matrix stored in `data` as `storage` says.
fn view(data: &[f32], (rows, cols): (usize, usize), storage: Storage) -> Mat<'_> {
    match storage {
        Storage::Rows => Mat::rows(data, cols),
        Storage::Transposed => Mat::rows(data, rows).t(),
    }
}

/// `len` values in [-1, 1) from a linear congruential generator seeded by `seed`.
fn filled(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(i, j)` of `A B` in f64 from the case's stored operands.
    fn reference(case: &ProductCase, i: usize, j: usize) -> (f64, f64) {
        let at = |data: &[f32], rows: usize, cols: usize, s: Storage, r: usize, c: usize| {
            f64::from(match s {
                Storage::Rows => data[r * cols + c],
                Storage::Transposed => data[c * rows + r],
            })
        };
        (0..case.k).fold((0.0, 0.0), |(sum, abs), kk| {
            let x = at(&case.a, case.m, case.k, case.storage.0, i, kk);
            let y = at(&case.b, case.k, case.n, case.storage.1, kk, j);
            (sum + x * y, abs + (x * y).abs())
        })
    }

    #[test]
    fn each_storage_and_precision_computes_the_product() {
        use Storage::{Rows, Transposed};
        for storage in [(Rows, Rows), (Rows, Transposed), (Transposed, Rows)] {
            for (precision, prepacked) in [
                (Precision::F32, false),
                (Precision::Bf16, false),
                (Precision::Bf16, true),
            ] {
                let mut case = ProductCase::new((13, 35, 70), storage).unwrap();
                if prepacked {
                    case.run_prepacked(true).unwrap();
                    // The second run reuses the packed operands and writes every output.
                    case.c.fill(f32::NAN);
                    case.run_prepacked(true).unwrap();
                } else {
                    case.run(precision, true).unwrap();
                }
                // bf16 rounds each operand within 2^-9 relative: within 2^-7 sum|ab| (with
                // f32 summation's error far below); f32 within (k + 2) 2^-24 sum|ab|.
                let tolerance = match precision.effective() {
                    Precision::Bf16 => 2f64.powi(-7),
                    Precision::F32 => 72.0 * 2f64.powi(-24),
                };
                for i in 0..13 {
                    for j in 0..35 {
                        let (exact, abs) = reference(&case, i, j);
                        let got = f64::from(case.output()[i * 35 + j]);
                        assert!(
                            (got - exact).abs() <= tolerance * abs,
                            "{storage:?} {precision} ({i}, {j}): {got} vs {exact}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sizes_are_checked() {
        let rows = (Storage::Rows, Storage::Rows);
        assert!(ProductCase::new((0, 4, 4), rows).is_err());
        assert!(ProductCase::new((usize::MAX, 2, 4), rows).is_err());
        // 2^25 x 2^25 f32 outputs are 4 PiB: refused before any allocation.
        let err = ProductCase::new((1 << 25, 1 << 25, 1), rows).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        assert_eq!(ProductCase::new((2, 3, 4), rows).unwrap().flop(), 48.0);
    }
}
