//! Optimisation for training: gradients by parameter name, AdamW with `torch.optim.AdamW`
//! semantics, and Hugging Face's warm-up learning-rate schedules.
//!
//! Parameters are candle [`Var`](candle_core::Var)s named by their Hugging Face tensor names
//! (`roformer.encoder.layer.0.attention.self.query.weight`, `cls.predictions.bias`, …).
//! A training step reads:
//!
//! ```no_run
//! # use roformer::optim::{AdamW, AdamWConfig, Decay, Gradients, LrSchedule, Result};
//! # fn micro_batch_loss(i: usize) -> candle_core::Result<candle_core::Tensor> { unimplemented!() }
//! # fn train(params: Vec<(String, candle_core::Var)>) -> Result<()> {
//! let schedule = LrSchedule::new(1e-4, 100, 1000, Decay::Linear)?;
//! let mut opt = AdamW::new(params.clone(), AdamWConfig::with_lr(1e-4))?;
//! while opt.steps() < schedule.total_steps {
//!     let mut grads = Gradients::new();
//!     for i in 0..2 {
//!         let store = micro_batch_loss(i)?.backward()?;
//!         grads.accumulate(&Gradients::from_store(&store, &params)?)?;
//!     }
//!     grads.scale(0.5); // each micro-batch loss is a mean
//!     grads.check_finite()?; // stop on NaN / infinity
//!     let _pre_clip_norm = grads.clip_global_norm(1.0)?;
//!     opt.step(&grads, schedule.lr_at(opt.steps()))?;
//! }
//! # Ok(()) }
//! ```
//!
//! Everything runs on CPU `f32` slices, one fused pass per operation, in parallel (rayon) over
//! chunks of large tensors, with fixed summation orders (results do not depend on the thread
//! count). Parameters of another dtype or device are not refused: their values go through a
//! CPU `f32` copy and are written back with `Var::set` (slower; a lower-precision dtype rounds
//! the updated values).

mod adamw;
mod cpu;
mod error;
mod gradients;
mod schedule;

#[cfg(test)]
mod tests;

pub use adamw::{decays, AdamW, AdamWConfig};
pub use error::{OptimError, Result};
pub use gradients::{Gradients, CLIP_EPS};
pub use schedule::{Decay, LrSchedule};
