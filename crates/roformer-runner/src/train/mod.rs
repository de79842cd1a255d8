//! A training run as the `roformer` binary and the experiments show and record it.

pub mod checks;
pub mod classify;
pub mod fingerprint;
mod loss_plot;
pub mod masked_lm;
pub mod observer;
pub mod out_dir;
mod progress;
pub mod record;
pub mod signals;
pub mod vision;

pub use signals::{stop_flag, termination_signal};
