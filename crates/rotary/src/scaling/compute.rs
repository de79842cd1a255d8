//! The formulas of each scaling, in f64, following transformers' `modeling_rope_utils`.

use std::f64::consts::PI;

use super::{Llama3, LongRope, RopeSpec, ScaledFreqs, Scaling, Yarn};

/// `base^(-2i / dim)` for `i < ceil(dim / 2)`.
fn base_freqs(base: f64, dim: usize) -> Vec<f64> {
    let d = dim as f64;
    (0..dim.div_ceil(2))
        .map(|i| 1.0 / base.powf((2 * i) as f64 / d))
        .collect()
}

/// The frequencies and attention factor of `spec` at `seq_len`.
pub(super) fn freqs(spec: &RopeSpec, seq_len: Option<usize>) -> ScaledFreqs {
    let (dim, base) = (spec.dim, spec.base);
    let (inv_freq, attention_factor) = match &spec.scaling {
        Scaling::Default => (base_freqs(base, dim), 1.0),
        Scaling::Linear { factor } => {
            let inv = base_freqs(base, dim).into_iter().map(|w| w / factor);
            (inv.collect(), 1.0)
        }
        Scaling::NtkAware { factor } => {
            let d = dim as f64;
            (base_freqs(base * factor.powf(d / (d - 2.0)), dim), 1.0)
        }
        Scaling::Dynamic {
            factor,
            max_position_embeddings: max_pos,
        } => (dynamic(base, dim, *factor, *max_pos, seq_len), 1.0),
        Scaling::Yarn(y) => yarn(base, dim, y),
        Scaling::Llama3(l) => (llama3(base, dim, l), 1.0),
        Scaling::LongRope(l) => longrope(base, dim, l, seq_len),
    };
    ScaledFreqs {
        inv_freq,
        attention_factor,
    }
}

/// Dynamic NTK: `base' = base (factor s / L - (factor - 1))^(dim / (dim - 2))` with
/// `s = max(seq_len, L)`.
fn dynamic(base: f64, dim: usize, factor: f64, max_pos: f64, seq_len: Option<usize>) -> Vec<f64> {
    let s = seq_len.map_or(max_pos, |s| (s as f64).max(max_pos));
    let d = dim as f64;
    let scaled = base * (factor * s / max_pos - (factor - 1.0)).powf(d / (d - 2.0));
    base_freqs(scaled, dim)
}

/// YaRN's attention factor `0.1 mscale ln(scale) + 1` (1 for `scale <= 1`).
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// YaRN: frequencies that turn fewer than `beta_slow` times over `L_orig` are interpolated
/// (divided by `factor`), those that turn more than `beta_fast` times are kept, with a linear
/// ramp over the dimension index in between.
fn yarn(base: f64, dim: usize, y: &Yarn) -> (Vec<f64>, f64) {
    let attention_factor = match (y.attention_factor, y.mscale, y.mscale_all_dim) {
        (Some(a), _, _) => a,
        (None, Some(m), Some(m_all)) if m != 0.0 && m_all != 0.0 => {
            yarn_mscale(y.factor, m) / yarn_mscale(y.factor, m_all)
        }
        _ => yarn_mscale(y.factor, 1.0),
    };
    let d = dim as f64;
    // The dimension index at which a frequency turns `rotations` times over L_orig.
    let correction_dim = |rotations: f64| {
        d * (y.original_max_position_embeddings / (rotations * 2.0 * PI)).ln() / (2.0 * base.ln())
    };
    let (mut low, mut high) = (correction_dim(y.beta_fast), correction_dim(y.beta_slow));
    if y.truncate {
        low = low.floor();
        high = high.ceil();
    }
    let low = low.max(0.0);
    let mut high = high.min(d - 1.0);
    if low == high {
        high += 0.001;
    }
    let inv = base_freqs(base, dim)
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation = 1.0 - ramp;
            w / y.factor * (1.0 - extrapolation) + w * extrapolation
        })
        .collect();
    (inv, attention_factor)
}

/// Llama 3.1: wavelengths `2 pi / theta_i` below `L_orig / high_freq_factor` are kept, those
/// above `L_orig / low_freq_factor` divided by `factor`, and those between blended with
/// `smooth = (L_orig / wavelength - low) / (high - low)`.
fn llama3(base: f64, dim: usize, l: &Llama3) -> Vec<f64> {
    let old = l.original_max_position_embeddings;
    let low_wavelen = old / l.low_freq_factor;
    let high_wavelen = old / l.high_freq_factor;
    base_freqs(base, dim)
        .into_iter()
        .map(|w| {
            let wavelen = 2.0 * PI / w;
            if wavelen < high_wavelen {
                w
            } else if wavelen > low_wavelen {
                w / l.factor
            } else {
                let smooth =
                    (old / wavelen - l.low_freq_factor) / (l.high_freq_factor - l.low_freq_factor);
                (1.0 - smooth) * w / l.factor + smooth * w
            }
        })
        .collect()
}

/// LongRoPE: `theta_i / f_i` with the long factors past `L_orig`, the short ones otherwise;
/// attention factor `sqrt(1 + ln(factor) / ln(L_orig))` unless given (1 for `factor <= 1`).
fn longrope(base: f64, dim: usize, l: &LongRope, seq_len: Option<usize>) -> (Vec<f64>, f64) {
    let attention_factor = l.attention_factor.unwrap_or_else(|| {
        if l.factor <= 1.0 {
            1.0
        } else {
            (1.0 + l.factor.ln() / l.original_max_position_embeddings.ln()).sqrt()
        }
    });
    let long = seq_len.is_some_and(|s| s as f64 > l.original_max_position_embeddings);
    let ext = if long {
        &l.long_factor
    } else {
        &l.short_factor
    };
    let inv = base_freqs(base, dim)
        .into_iter()
        .zip(ext)
        .map(|(w, f)| w / f)
        .collect();
    (inv, attention_factor)
}
