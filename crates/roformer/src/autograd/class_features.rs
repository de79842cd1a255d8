//! A ViT classifier's features from the normed hidden states, as one op on an f32 CPU tensor,
//! and its `*_slow` twin of candle ops (any device and dtype: the model's path before the op):
//!
//! ```text
//! forward   f[s] = [x[s, 0] ; m sum_{j=p}^{t-1} x[s, j]]     m = 1 / (t - p) (rounded to f32),
//!                                                          the sum from 0 in token order
//! backward  dx[s, 0] = df[s, :h];   dx[s, j] = m df[s, h:] (j >= p);   dx[s, j] = 0 (0 < j < p)
//! ```
//!
//! for `x` `[b, t, h]` (the CLS token, `p - 1` registers, then the patches) and `f` `[b, 2h]`.
//! The op adds and multiplies as candle's `i`, `narrow`, `mean` and `cat` do, in the same order
//! (each zero `+0`, as candle's gradient sums `0 + v` leave it), so it gives their bits; but in
//! one pass over the samples on the threads, where candle's mean of the narrowed states walks
//! their strided index on one thread, and its backward pads, zeroes and adds three `x`-sized
//! tensors on one thread.

use candle_core::{CpuStorage, CustomOp1, IndexOp, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::cpu::tensor::{f32_slice, tensor, with_f32};

/// The op's name in candle's graph and in its messages.
const NAME: &str = "class-features";

/// `[x[:, 0] ; mean(x[:, prefix..])]` of `x` `[b, t, h]` (see the module doc), `[b, 2h]`, as
/// one op on an f32 CPU tensor.
///
/// # Errors
/// `x` not of rank 3, `prefix` 0 or not below `t`; candle errors (a tensor that is not f32 on
/// the CPU).
pub(crate) fn class_features(x: &Tensor, prefix: usize) -> candle_core::Result<Tensor> {
    check(x, prefix)?;
    x.contiguous()?.apply_op1(ClassFeatures { prefix })
}

/// [`class_features`] composed of candle ops, on any device and dtype.
///
/// # Errors
/// As [`class_features`].
pub(crate) fn class_features_slow(x: &Tensor, prefix: usize) -> candle_core::Result<Tensor> {
    let t = check(x, prefix)?;
    let cls = x.i((.., 0, ..))?.contiguous()?; // [b, h]
    let patches = x.narrow(1, prefix, t - prefix)?.mean(1)?; // [b, h]
    Tensor::cat(&[&cls, &patches], 1)
}

/// `x`'s token count, once `x` is `[b, t, h]` with `0 < prefix < t`.
fn check(x: &Tensor, prefix: usize) -> candle_core::Result<usize> {
    let (_, t, _) = x.dims3()?;
    if prefix == 0 || prefix >= t {
        return Err(candle_core::Error::Msg(format!(
            "{NAME}: {prefix} prefix tokens of {t}"
        )));
    }
    Ok(t)
}

/// The op: the number of prefix tokens (the CLS token and the registers).
struct ClassFeatures {
    prefix: usize,
}

impl ClassFeatures {
    /// `(b, t, h)` of `x` and the mean's factor `m`, rounded to f32 as candle's `mean` does.
    fn sizes(&self, shape: &Shape) -> candle_core::Result<((usize, usize, usize), f32)> {
        let (b, t, h) = shape.dims3()?;
        let m = (1f64 / (t - self.prefix) as f64) as f32;
        Ok(((b, t, h), m))
    }
}

impl CustomOp1 for ClassFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l, NAME)?;
        let ((b, t, h), m) = self.sizes(l.shape())?;
        let p = self.prefix;
        let mut out = vec![0f32; b * 2 * h];
        out.par_chunks_mut(2 * h)
            .zip(x.par_chunks(t * h))
            .for_each(|(f, rows)| {
                let (cls, mean) = f.split_at_mut(h);
                cls.copy_from_slice(&rows[..h]);
                for row in rows[p * h..].chunks_exact(h) {
                    mean.iter_mut().zip(row).for_each(|(a, v)| *a += v);
                }
                mean.iter_mut().for_each(|a| *a = *a * m + 0.0);
            });
        Ok((CpuStorage::F32(out), Shape::from((b, 2 * h))))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let ((b, t, h), m) = self.sizes(x.shape())?;
        let p = self.prefix;
        let dx = with_f32(g, NAME, |g| {
            if g.len() != b * 2 * h {
                return Err(candle_core::Error::Msg(format!(
                    "{NAME} backward: gradient sizes"
                )));
            }
            let mut dx = vec![0f32; b * t * h];
            dx.par_chunks_mut(t * h)
                .zip(g.par_chunks(2 * h))
                .for_each(|(rows, g)| {
                    let (g_cls, g_mean) = g.split_at(h);
                    rows[..h]
                        .iter_mut()
                        .zip(g_cls)
                        .for_each(|(d, v)| *d = v + 0.0);
                    for row in rows[p * h..].chunks_exact_mut(h) {
                        row.iter_mut()
                            .zip(g_mean)
                            .for_each(|(d, v)| *d = v * m + 0.0);
                    }
                });
            Ok(dx)
        })?;
        Ok(Some(tensor(dx, x.shape())?))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    use super::{class_features, class_features_slow};

    /// The bits of `t`'s elements.
    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn class_features_give_the_bits_of_the_candle_ops_with_their_gradient() {
        // Odd sizes (3 samples, 7 tokens, width 5) with 1 and 3 prefix tokens and a single
        // patch: the values and the gradient of sum(f * w) to the bit, the twin's summation
        // order and rounding being the op's (see the module doc); zeros of both signs in `x`
        // and in `w`.
        let dev = Device::Cpu;
        for (t, prefix) in [(7, 1), (7, 3), (4, 3)] {
            let n = 3 * t * 5;
            let mut v: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                .collect();
            v[0] = -0.0;
            let x = Var::from_vec(v, (3, t, 5), &dev).unwrap();
            let mut wv: Vec<f32> = (0..30)
                .map(|i| ((i * 13 % 17) as f32 - 8.0) / 3.0)
                .collect();
            wv[1] = -0.0;
            wv[7] = -0.0;
            let w = Tensor::from_vec(wv, (3, 10), &dev).unwrap();
            let fast = class_features(x.as_tensor(), prefix).unwrap();
            let slow = class_features_slow(x.as_tensor(), prefix).unwrap();
            assert_eq!(fast.dims(), [3, 10]);
            assert_eq!(bits(&fast), bits(&slow), "t {t}, prefix {prefix}");
            let grad = |f: &Tensor| {
                let g = (f * &w).unwrap().sum_all().unwrap().backward().unwrap();
                bits(g.get(x.as_tensor()).unwrap())
            };
            assert_eq!(grad(&fast), grad(&slow), "t {t}, prefix {prefix}");
        }
        let x = Tensor::zeros((2, 3, 4), candle_core::DType::F32, &dev).unwrap();
        assert!(class_features(&x, 0).is_err());
        assert!(class_features(&x, 3).is_err());
    }
}
