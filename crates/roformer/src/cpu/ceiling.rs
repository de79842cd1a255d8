//! The arithmetic ceiling of one core: loops of independent multiply-adds, one instruction
//! kind each, timed on the calling thread. No product kernel can beat its instruction's
//! ceiling, so a kernel's rate over its ceiling is how much of the hardware it uses.
//!
//! ```text
//! GFLOP/s = instructions * FLOP per instruction / seconds / 1e9
//! vfmadd (256-bit f32):  8 lanes x 1 multiply-add x 2 = 16 FLOP
//! vfmadd (512-bit f32): 16 lanes x 1 multiply-add x 2 = 32 FLOP
//! vdpbf16ps (512-bit):  16 lanes x 2 multiply-adds x 2 = 64 FLOP (pairs of bf16, f32 sums)
//! ```
//!
//! Each loop keeps [`CHAINS`] accumulators, more than latency times issue rate on the CPUs
//! this runs on (4-6 cycles, one or two a cycle), so every pipe is busy.

/// Independent accumulators of a ceiling loop.
const CHAINS: usize = 12;

/// The measured ceiling of one instruction on one core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    /// The instruction and its width, as the vendors' manuals name it.
    pub instruction: &'static str,
    /// FLOP per instruction (a multiply-add counts two).
    pub flop_per_instruction: u32,
    /// GFLOP/s measured on the calling thread.
    pub gflops: f64,
}

/// The ceilings of the multiply-add instructions this CPU has (f32 FMA at 256 and 512 bits,
/// the bf16 dot product at 512 bits), each timed over `instructions` instructions (rounded
/// down to a multiple of the loop's twelve accumulators, at least one round). Empty off
/// x86_64.
pub fn ceilings(instructions: u64) -> Vec<Ceiling> {
    let rounds = (instructions / CHAINS as u64).max(1);
    #[cfg(target_arch = "x86_64")]
    return x86::measured(rounds);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = rounds;
        Vec::new()
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;
    use std::time::Instant;

    use super::{Ceiling, CHAINS};

    /// The ceilings of the instructions this CPU has, each over `rounds` rounds.
    pub(super) fn measured(rounds: u64) -> Vec<Ceiling> {
        use std::arch::is_x86_feature_detected as has;
        let timed = |instruction, flop_per_instruction: u32, seconds: f64| Ceiling {
            instruction,
            flop_per_instruction,
            gflops: (rounds * CHAINS as u64) as f64 * f64::from(flop_per_instruction)
                / seconds.max(f64::MIN_POSITIVE)
                / 1e9,
        };
        let mut found = Vec::new();
        if has!("avx2") && has!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            let seconds = unsafe { fma256(rounds) };
            found.push(timed("vfmadd231ps ymm (f32)", 16, seconds));
        }
        if has!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            let seconds = unsafe { fma512(rounds) };
            found.push(timed("vfmadd231ps zmm (f32)", 32, seconds));
        }
        if has!("avx512f") && has!("avx512bf16") {
            // SAFETY: the CPU has AVX-512F and AVX512-BF16.
            let seconds = unsafe { dpbf16_512(rounds) };
            found.push(timed("vdpbf16ps zmm (bf16 pairs)", 64, seconds));
        }
        found
    }

    /// Seconds for `rounds` rounds of `op` on each of [`CHAINS`] accumulators that start at
    /// `zero`. Inlined into each caller, so `op` compiles with the caller's target features.
    #[inline(always)]
    fn chains<V: Copy>(rounds: u64, zero: V, op: impl Fn(V) -> V) -> f64 {
        let mut acc = [zero; CHAINS];
        let start = Instant::now();
        for _ in 0..rounds {
            for a in acc.iter_mut() {
                *a = op(*a);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        black_box(acc);
        seconds
    }

    /// Seconds for `rounds` rounds of [`CHAINS`] independent 256-bit f32 FMAs.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma256(rounds: u64) -> f64 {
        let (x, y) = (
            black_box(_mm256_set1_ps(0.5)),
            black_box(_mm256_set1_ps(0.25)),
        );
        chains(rounds, _mm256_set1_ps(0.0), |a| _mm256_fmadd_ps(a, x, y))
    }

    /// Seconds for `rounds` rounds of [`CHAINS`] independent 512-bit f32 FMAs.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma512(rounds: u64) -> f64 {
        let (x, y) = (
            black_box(_mm512_set1_ps(0.5)),
            black_box(_mm512_set1_ps(0.25)),
        );
        chains(rounds, _mm512_set1_ps(0.0), |a| _mm512_fmadd_ps(a, x, y))
    }

    /// Seconds for `rounds` rounds of [`CHAINS`] independent 512-bit `vdpbf16ps`.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn dpbf16_512(rounds: u64) -> f64 {
        // Pairs of bf16 0.5 (0x3f00): each instruction adds 0.5 to every lane.
        let half: __m512bh = std::mem::transmute(black_box(_mm512_set1_epi32(0x3f00_3f00)));
        chains(rounds, _mm512_set1_ps(0.0), |a| {
            _mm512_dpbf16_ps(a, half, half)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_instruction_the_cpu_has_with_a_finite_positive_rate() {
        let found = ceilings(1200);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let expected = usize::from(has!("avx2") && has!("fma"))
                + usize::from(has!("avx512f"))
                + usize::from(has!("avx512f") && has!("avx512bf16"));
            assert_eq!(found.len(), expected);
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert!(found.is_empty());
        for c in &found {
            assert!(c.gflops.is_finite() && c.gflops > 0.0, "{c:?}");
            assert!([16, 32, 64].contains(&c.flop_per_instruction), "{c:?}");
        }
    }
}
