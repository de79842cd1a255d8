//! aarch64 Advanced SIMD (NEON) kernels: 4 f32 lanes; f16 through FCVTL/FCVTN (base AArch64
//! instructions, rounding per FPCR: to nearest even by default, as the scalar conversion),
//! bf16 by integer shifts and rounding.

use std::arch::aarch64::*;
use std::arch::asm;

use half::{bf16, f16};

use super::simd::{self, Simd};
use super::Geom;
use crate::element::Element;

/// The Advanced SIMD instruction set.
pub(super) struct Neon;

impl Simd for Neon {
    type V = float32x4_t;
    const LANES: usize = 4;

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load_f32(p: *const f32) -> float32x4_t {
        // SAFETY: `p` is valid for 4 f32 (trait contract).
        unsafe { vld1q_f32(p) }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load_f16(p: *const f16) -> float32x4_t {
        // SAFETY: `p` is valid for 4 f16 = 8 bytes.
        let halves = unsafe { vld1_u16(p.cast()) };
        let out: float32x4_t;
        // SAFETY: FCVTL (f16 -> f32, exact) is a base AArch64 SIMD instruction; it touches only
        // the two registers named.
        unsafe {
            asm!(
                "fcvtl {out:v}.4s, {inp:v}.4h",
                inp = in(vreg) halves,
                out = lateout(vreg) out,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        out
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load_bf16(p: *const bf16) -> float32x4_t {
        // SAFETY: `p` is valid for 4 bf16 = 8 bytes.
        let bits = unsafe { vld1_u16(p.cast()) };
        vreinterpretq_f32_u32(vshll_n_u16::<16>(bits))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn store_f32(p: *mut f32, v: float32x4_t) {
        // SAFETY: `p` is valid for 4 f32.
        unsafe { vst1q_f32(p, v) }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn store_f16(p: *mut f16, v: float32x4_t) {
        let halves: uint16x4_t;
        // SAFETY: FCVTN (f32 -> f16, rounded per FPCR) is a base AArch64 SIMD instruction; it
        // touches only the two registers named.
        unsafe {
            asm!(
                "fcvtn {out:v}.4h, {inp:v}.4s",
                inp = in(vreg) v,
                out = lateout(vreg) halves,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        // SAFETY: `p` is valid for 4 f16 = 8 bytes.
        unsafe { vst1_u16(p.cast(), halves) }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn store_bf16(p: *mut bf16, v: float32x4_t) {
        let bits = vreinterpretq_u32_f32(v);
        // Round to nearest even: add 0x7fff plus the lowest kept bit, then keep the top half.
        let lsb = vandq_u32(vshrq_n_u32::<16>(bits), vdupq_n_u32(1));
        let bias = vaddq_u32(lsb, vdupq_n_u32(0x7fff));
        let rounded = vshrq_n_u32::<16>(vaddq_u32(bits, bias));
        // NaN: keep the top half and set the quiet bit, as half::bf16::from_f32 does.
        let magnitude = vandq_u32(bits, vdupq_n_u32(0x7fff_ffff));
        let nan = vcgtq_u32(magnitude, vdupq_n_u32(0x7f80_0000));
        let quiet = vorrq_u32(vshrq_n_u32::<16>(bits), vdupq_n_u32(0x40));
        let out = vmovn_u32(vbslq_u32(nan, quiet, rounded));
        // SAFETY: `p` is valid for 4 bf16 = 8 bytes.
        unsafe { vst1_u16(p.cast(), out) }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vmulq_f32(a, b)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vaddq_f32(a, b)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn sub(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vsubq_f32(a, b)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn swap_pairs(v: float32x4_t) -> float32x4_t {
        // Reverse the two f32 of each 64-bit half: (1, 0, 3, 2).
        vrev64q_f32(v)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: PRFM is a hint: it never faults and has no architectural effect, whatever
        // address it is given.
        unsafe {
            asm!(
                "prfm pldl1keep, [{p}]",
                p = in(reg) p,
                options(nostack, readonly, preserves_flags)
            );
        }
    }
}

/// The NEON chunk kernel.
///
/// # Safety
/// As [`super::ChunkFn`], and the CPU supports NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rotate_chunk<T: Element>(
    src: *const T,
    dst: *mut T,
    n_rows: usize,
    g: &Geom,
    cos: *const f32,
    sin: *const f32,
) {
    // SAFETY: forwarded contract; this function's target features are `Neon`'s.
    unsafe { simd::rotate_chunk::<Neon, T>(src, dst, n_rows, g, cos, sin) }
}
