//! Vectorised row maths of both fast paths: `exp`, the erf GELU and its derivative, softmax
//! row steps, layer and RMS norm rows, and sums in lanes. Each kernel is compiled for AVX-512,
//! AVX2+FMA and the baseline, the best one picked at run time ([`multiversion`]).

use rayon::prelude::*;

use super::policy::PASS_CHUNK;

/// A normalisation as plain numbers.
pub(crate) enum RowNorm<'a> {
    /// `(x - mean) / sqrt(var + eps) * weight + bias`.
    Layer {
        weight: &'a [f32],
        bias: &'a [f32],
        eps: f32,
    },
    /// `x / sqrt(mean(x^2) + eps)`.
    Rms { eps: f32 },
}

/// [`normalize_rows`] over chunks of rows on the threads.
pub(crate) fn normalize_rows_par(x: &mut [f32], width: usize, norm: &RowNorm<'_>) {
    let rows = (PASS_CHUNK / width.max(1)).max(1);
    x.par_chunks_mut(rows * width.max(1))
        .for_each(|chunk| normalize_rows(chunk, width, norm));
}

/// Normalises each row of `width` values in place.
pub(crate) fn normalize_rows(x: &mut [f32], width: usize, norm: &RowNorm<'_>) {
    for row in x.chunks_exact_mut(width.max(1)) {
        match norm {
            RowNorm::Layer { weight, bias, eps } => {
                layer_norm_row(row, weight, bias, *eps);
            }
            RowNorm::Rms { eps } => rms_norm_row(row, *eps),
        }
    }
}

/// Compiles `fn name(args) -> ret { body }` three times (AVX-512F, AVX2+FMA, baseline) and
/// calls the best one the CPU runs (`is_x86_feature_detected!` caches its answer).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use multiversion;

/// Lanes of the partial sums and maxima (a multiple of every vector width).
pub(crate) const LANES: usize = 16;

/// Below this, `exp` is 0 in f32 (and the polynomial's scaling would underflow).
pub(crate) const EXP_MIN: f32 = -87.336_55;

/// `exp(x)` for `x <= 88`, within about 2 ulp: `x = n ln 2 + r` with `|r| <= ln 2 / 2`,
/// Cephes' degree-6 polynomial for `exp(r)`, times `2^n` built in the exponent bits; exactly 0
/// below [`EXP_MIN`]. Each step rounded once per operation (the reference of [`exp_fused`]).
#[inline(always)]
pub(crate) fn exp_approx(x: f32) -> f32 {
    exp_poly::<false>(x)
}

/// [`exp_approx`] with each multiply-add of the reduction and the polynomial fused (one
/// rounding; one instruction in the AVX2+FMA and AVX-512 builds of [`multiversion`], which the
/// bf16 inference paths run): the same polynomial, within about 2 ulp of `exp(x)` as well.
#[inline(always)]
pub(crate) fn exp_fused(x: f32) -> f32 {
    exp_poly::<true>(x)
}

/// `a b + c`: one rounding when `FUSED`, else two.
#[inline(always)]
fn mul_add<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The body of [`exp_approx`] (`FUSED` false: the operations in its original order) and
/// [`exp_fused`].
#[inline(always)]
fn exp_poly<const FUSED: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    let fma = mul_add::<FUSED>;
    let xc = x.clamp(EXP_MIN, 88.0);
    let shifted = fma(xc, LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, xc));
    let p = P[1..].iter().fold(P[0], |p, &c| fma(p, r, c));
    let e = fma(p * r, r, r) + 1.0;
    let n_int = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let scale = f32::from_bits(((n_int + 127) << 23) as u32);
    if x < EXP_MIN {
        0.0
    } else {
        e * scale
    }
}

multiversion! {
    /// Adds the mask to the row of scores (if any) and returns the row's maximum.
    pub(crate) fn add_mask_max(row: &mut [f32], mask: Option<&[f32]>) -> f32 {
        if let Some(mask) = mask {
            for (s, m) in row.iter_mut().zip(mask) {
                *s += *m;
            }
        }
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (l, &s) in lanes.iter_mut().zip(chunk) {
                *l = if s > *l { s } else { *l };
            }
        }
        let rest = chunks.remainder().iter().copied();
        lanes.into_iter().chain(rest).fold(f32::NEG_INFINITY, |a, s| if s > a { s } else { a })
    }
}

multiversion! {
    /// Replaces each score `s` of the row by `exp(s - max)` ([`exp_approx`]) and returns their
    /// sum.
    pub(crate) fn exp_sum(row: &mut [f32], max: f32) -> f32 {
        exp_sum_by(row, max, exp_approx)
    }
}

multiversion! {
    /// [`exp_sum`] by [`exp_fused`].
    pub(crate) fn exp_sum_fused(row: &mut [f32], max: f32) -> f32 {
        exp_sum_by(row, max, exp_fused)
    }
}

/// `row <- exp(row - max)` by `exp`, returning the sum in [`LANES`] partial sums.
#[inline(always)]
fn exp_sum_by(row: &mut [f32], max: f32, exp: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (l, s) in lanes.iter_mut().zip(chunk.iter_mut()) {
            *s = exp(*s - max);
            *l += *s;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for s in chunks.into_remainder() {
        *s = exp(*s - max);
        sum += *s;
    }
    sum
}

/// `(erf(z), exp(-z^2))`, erf by Abramowitz and Stegun's 7.1.26 (absolute error below
/// 1.5e-7).
#[inline(always)]
fn erf_gauss(z: f32) -> (f32, f32) {
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152) * t + 1.421_413_8) * t - 0.284_496_72) * t
        + 0.254_829_6)
        * t;
    let gauss = exp_approx(-a * a);
    let erf_abs = 1.0 - poly * gauss;
    (if z < 0.0 { -erf_abs } else { erf_abs }, gauss)
}

multiversion! {
    /// `x <- 0.5 x (1 + erf(x / sqrt 2))` (transformers' `gelu`), erf by [`erf_gauss`].
    pub(crate) fn gelu_erf(x: &mut [f32]) {
        for v in x.iter_mut() {
            let (erf, _) = erf_gauss(*v * std::f32::consts::FRAC_1_SQRT_2);
            *v = 0.5 * *v * (1.0 + erf);
        }
    }
}

/// `Q(t)` of `erfc(a) = t exp(-a^2) Q(t)`, `t = 1 / (1 + a / 2)`, `a >= 0`, lowest power
/// first: our degree-5 fit of `erfc(a) exp(a^2) / t` (weighted least squares in f64 iterated
/// towards the smallest largest relative error over `a` in [0, 10]), within 2.6e-5 (2^-15.2)
/// of erfc relatively everywhere on it. (Numerical Recipes' `erfcc` has this form, the
/// polynomial inside the exponential.)
const ERFC_Q: [f32; 6] = [
    2.812_644_6e-1,
    2.937_806_7e-1,
    1.874_652e-1,
    3.063_756_6e-1,
    -1.163_785_7e-2,
    -5.727_376e-2,
];

multiversion! {
    /// `x <- x Phi(x)`, `Phi(x) = erfc(-x / sqrt 2) / 2` (transformers' exact `gelu`, as
    /// [`gelu_erf`]) with erfc by [`ERFC_Q`] and [`exp_fused`]: `Phi = e` for `x < 0` and
    /// `1 - e` otherwise, `e = erfc(|x| / sqrt 2) / 2`, so the negative tail keeps its relative
    /// accuracy (no `1 + erf` cancels), within 2^-14 of gelu relatively wherever the result is
    /// a normal f32: far inside bf16's rounding (2^-9), for the bf16 inference path. Cheaper
    /// than [`gelu_erf`] (the reference): fused multiply-adds and one polynomial fewer.
    pub(crate) fn gelu_erf_fast(x: &mut [f32]) {
        for v in x.iter_mut() {
            let a = (*v * std::f32::consts::FRAC_1_SQRT_2).abs();
            // erfc(10) is 2e-45: 0 in f32 (and a^2 stays finite).
            let a = if a > 10.0 { 10.0 } else { a };
            let t = 1.0 / 0.5f32.mul_add(a, 1.0);
            let q = ERFC_Q[..5].iter().rev().fold(ERFC_Q[5], |q, &c| q.mul_add(t, c));
            let e = 0.5 * t * q * exp_fused(-a * a);
            *v *= if *v < 0.0 { e } else { 1.0 - e };
        }
    }
}

multiversion! {
    /// `d = g * gelu'(u)` with `gelu'(u) = Phi(u) + u phi(u)` (erf by [`erf_gauss`], as the
    /// forward).
    pub(crate) fn gelu_backward(d: &mut [f32], g: &[f32], u: &[f32]) {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        for ((d, &g), &x) in d.iter_mut().zip(g).zip(u) {
            // exp(-x^2 / 2) = exp(-z^2), computed with erf.
            let (erf, gauss) = erf_gauss(x * std::f32::consts::FRAC_1_SQRT_2);
            *d = g * (0.5 * (1.0 + erf) + x * INV_SQRT_2PI * gauss);
        }
    }
}

multiversion! {
    /// `a = gelu(x)` and `u <- gelu'(x) = Phi(x) + x phi(x)` for `x = u + bias` (a dense
    /// layer's product and its bias, element by element) in one pass (one erf per element,
    /// by [`erf_gauss`], as [`gelu_erf`] and [`gelu_backward`]): the slope a backward then
    /// only multiplies by.
    pub(crate) fn gelu_erf_with_slope(u: &mut [f32], bias: &[f32], a: &mut [f32]) {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        for ((u, b), a) in u.iter_mut().zip(bias).zip(a.iter_mut()) {
            let x = *u + *b;
            let (erf, gauss) = erf_gauss(x * std::f32::consts::FRAC_1_SQRT_2);
            let phi = 0.5 * (1.0 + erf);
            *a = x * phi;
            *u = phi + x * INV_SQRT_2PI * gauss;
        }
    }
}

multiversion! {
    /// `row <- (row - mean) / sqrt(var + eps) * weight + bias` (biased variance, two passes);
    /// returns `(mean, 1 / sqrt(var + eps))`.
    pub(crate) fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) -> (f32, f32) {
        let n = row.len() as f32;
        let mean = lane_sum(row, |x| x) / n;
        let var = lane_sum(row, |x| (x - mean) * (x - mean)) / n;
        let inv = 1.0 / (var + eps).sqrt();
        for ((x, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *x = (*x - mean) * inv * *w + *b;
        }
        (mean, inv)
    }
}

multiversion! {
    /// `row <- row / sqrt(mean(row^2) + eps)`.
    pub(crate) fn rms_norm_row(row: &mut [f32], eps: f32) {
        let mean_square = lane_sum(row, |x| x * x) / row.len() as f32;
        let inv = 1.0 / (mean_square + eps).sqrt();
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `sum f(x)` over `row` in [`LANES`] partial sums.
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l += f(x);
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().map(|&x| f(x)).sum::<f32>()
}
