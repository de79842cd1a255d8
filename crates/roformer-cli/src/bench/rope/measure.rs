//! One case measured: its data, the agreement check, and round-robin timing of every
//! implementation.

use anyhow::{bail, Result};
use candle_core::{Device, Tensor, WithDType};
use rotary::{DType, Element, Layout};

use super::cases::Case;
use super::impls::{par_copy, Impl, Ours};
use super::report::Record;
use crate::bench::timing::{round_robin, Budget};

/// Uniform values in [-1, 1) from a fixed xorshift stream.
fn random_data<T: Element>(n: usize, seed: u64) -> Vec<T> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            T::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// The data of one case and the candle inputs made from it.
struct Bench<'a, T> {
    case: Case,
    ours: &'a Ours,
    /// Rotated in place by the fused call, round after round.
    fused: (Vec<T>, Vec<T>),
    /// Read by the out-of-place call and by memcpy.
    src: (Vec<T>, Vec<T>),
    out: (Vec<T>, Vec<T>),
    copy: (Vec<T>, Vec<T>),
    candle_qk: (Tensor, Tensor),
    candle_cs: (Tensor, Tensor),
}

impl<'a, T: Element + WithDType> Bench<'a, T> {
    fn new(case: Case, ours: &'a Ours) -> Result<Self> {
        let [b, h, t, d] = case.dims;
        let n = case.elements();
        let src = (random_data::<T>(n, 1), random_data::<T>(n, 2));
        let cpu = &Device::Cpu;
        let candle_qk = (
            Tensor::from_slice(&src.0, (b, h, t, d), cpu)?,
            Tensor::from_slice(&src.1, (b, h, t, d), cpu)?,
        );
        // cos/sin [seq, d/2]: our rotation's, from f64 angles rounded once to f32.
        let (cos, sin) = ours.pair_coefficients(case.layout, t)?;
        let to_t = |v: Vec<f32>| -> Vec<T> {
            v.into_iter()
                .map(|c| <T as WithDType>::from_f64(f64::from(c)))
                .collect()
        };
        let candle_cs = (
            Tensor::from_vec(to_t(cos), (t, d / 2), cpu)?,
            Tensor::from_vec(to_t(sin), (t, d / 2), cpu)?,
        );
        Ok(Bench {
            case,
            ours,
            fused: src.clone(),
            out: (vec![T::default(); n], vec![T::default(); n]),
            copy: (vec![T::default(); n], vec![T::default(); n]),
            src,
            candle_qk,
            candle_cs,
        })
    }

    /// candle-nn's `rope_i` or `rope` on q and k.
    fn candle(&self) -> Result<(Tensor, Tensor)> {
        let f = match self.case.layout {
            Layout::Interleaved => candle_nn::rotary_emb::rope_i,
            Layout::Half => candle_nn::rotary_emb::rope,
        };
        self.candle_call(f)
    }

    /// Our drop-in for them, `rotary::candle::rope_i` or `rope`, on q and k.
    fn drop_in(&self) -> Result<(Tensor, Tensor)> {
        let f = match self.case.layout {
            Layout::Interleaved => rotary::candle::rope_i,
            Layout::Half => rotary::candle::rope,
        };
        self.candle_call(f)
    }

    fn candle_call(&self, f: CandleRope) -> Result<(Tensor, Tensor)> {
        let (q, k) = &self.candle_qk;
        let (cos, sin) = &self.candle_cs;
        Ok((f(q, cos, sin)?, f(k, cos, sin)?))
    }

    fn call(&mut self, which: Impl) -> Result<()> {
        let shape = self.case.shape();
        match which {
            Impl::Fused => self.ours.fused(&mut self.fused.0, &mut self.fused.1, shape),
            Impl::OutOfPlace => self.ours.out_of_place(
                (&self.src.0, &self.src.1),
                (&mut self.out.0, &mut self.out.1),
                shape,
            ),
            Impl::Memcpy => {
                par_copy(&self.src.0, &mut self.copy.0);
                par_copy(&self.src.1, &mut self.copy.1);
                Ok(())
            }
            Impl::Candle => self.candle().map(drop),
            Impl::DropIn => self.drop_in().map(drop),
        }
    }

    /// Checks that our out-of-place result and candle's agree, so that both sides compute the
    /// same rotation: within 1e-5 for f32 (both round f64 cos/sin once), 1/16 for 16-bit types
    /// (candle rounds every intermediate to the storage type; values are below 1.5). The
    /// drop-in, given candle's very inputs, must equal candle bit for bit in f32 (the same
    /// arithmetic) and within 1/16 in 16-bit types.
    fn check_agreement(&mut self) -> Result<()> {
        self.call(Impl::OutOfPlace)?;
        let (cq, ck) = self.candle()?;
        let tolerance = match self.case.dtype {
            DType::F32 => 1e-5,
            DType::F16 | DType::BF16 => 1.0 / 16.0,
        };
        let (dq, dk) = self.drop_in()?;
        let drop_in_tolerance = match self.case.dtype {
            DType::F32 => 0.0,
            DType::F16 | DType::BF16 => 1.0 / 16.0,
        };
        let (dq, dk): (Vec<T>, Vec<T>) =
            (dq.flatten_all()?.to_vec1()?, dk.flatten_all()?.to_vec1()?);
        for (ours, theirs) in [(&self.out.0, &cq), (&self.out.1, &ck)] {
            disagreement("rotary", ours, theirs, tolerance, self.case)?;
        }
        for (ours, theirs) in [(&dq, &cq), (&dk, &ck)] {
            disagreement("the drop-in", ours, theirs, drop_in_tolerance, self.case)?;
        }
        Ok(())
    }
}

/// The type of candle-nn's `rope_i` and `rope` and of our drop-ins for them.
type CandleRope = fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>;

/// An error when `ours` and candle's `theirs` differ by more than `tolerance` anywhere.
fn disagreement<T: Element + WithDType>(
    who: &str,
    ours: &[T],
    theirs: &Tensor,
    tolerance: f32,
    case: Case,
) -> Result<()> {
    let theirs: Vec<T> = theirs.flatten_all()?.to_vec1()?;
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a.to_f32() - Element::to_f32(*b)).abs())
        .fold(0f32, f32::max);
    if worst.is_nan() || worst > tolerance {
        bail!("{who} and candle disagree by {worst} on {case:?} (tolerance {tolerance})");
    }
    Ok(())
}

/// Runs one case with element type `T`.
fn run_case<T: Element + WithDType>(case: Case, budget: &Budget) -> Result<Vec<Record>> {
    let ours = Ours::build(&case)?;
    let mut bench = Bench::<T>::new(case, &ours)?;
    bench.check_agreement()?;
    let stats = round_robin(Impl::ALL.len(), budget, |i| bench.call(Impl::ALL[i]))?;
    Ok(Impl::ALL
        .into_iter()
        .zip(stats)
        .map(|(which, stats)| Record { case, which, stats })
        .collect())
}

pub(super) fn run_any(case: Case, budget: &Budget) -> Result<Vec<Record>> {
    match case.dtype {
        DType::F32 => run_case::<f32>(case, budget),
        DType::F16 => run_case::<half::f16>(case, budget),
        DType::BF16 => run_case::<half::bf16>(case, budget),
    }
}
