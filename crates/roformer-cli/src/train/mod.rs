//! `roformer train ...`: masked-LM pre-training and classification fine-tuning, with a
//! progress bar, `metrics.jsonl`, a loss plot, checkpoints as Hugging Face directories, and
//! Ctrl-C, SIGTERM and SIGHUP writing a checkpoint before it exits.

pub(crate) mod args;
pub(crate) mod checks;
pub(crate) mod classify;
pub(crate) mod common;
pub(crate) mod fingerprint;
mod loss_plot;
pub(crate) mod mlm;
pub(crate) mod observer;
mod progress;
pub(crate) mod resume;
mod save_fault;

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

/// The training commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Pre-train a masked LM on a corpus.
    Mlm(mlm::Args),
    /// Fine-tune a sequence classifier from a checkpoint.
    Classify(classify::Args),
}

/// Runs a training command; the first Ctrl-C finishes the current step, writes a checkpoint
/// and exits cleanly (a second one exits at once). SIGTERM and SIGHUP do the same but exit with
/// an error that names the signal, since the run did not finish.
///
/// # Errors
/// The command's errors.
pub fn run(command: Command) -> anyhow::Result<()> {
    let stop = stop_flag();
    match command {
        Command::Mlm(a) => mlm::run(a, &stop),
        Command::Classify(a) => classify::run(a, &stop),
    }
}

/// A flag that the first Ctrl-C, SIGTERM or SIGHUP sets (the run finishes its step, saves and
/// stops); a second one exits at once (status 130 for Ctrl-C, 128 + the signal's number for
/// the others). [`termination_signal`] tells which of SIGTERM and SIGHUP came, if any.
pub fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A handler can only be set once per process; failing to set it only loses the clean stop.
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nstopping after this step (Ctrl-C again to quit at once)");
    });
    #[cfg(unix)]
    termination::install(Arc::clone(&stop));
    stop
}

/// The number of the SIGTERM or SIGHUP that asked the run to stop (0: none came).
static TERMINATION: AtomicI32 = AtomicI32::new(0);

/// The stop flag that SIGTERM and SIGHUP set.
static TERMINATION_FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// `SIGTERM` or `SIGHUP` when one of them asked the run to stop.
pub fn termination_signal() -> Option<&'static str> {
    match TERMINATION.load(Ordering::SeqCst) {
        0 => None,
        1 => Some("SIGHUP"),
        _ => Some("SIGTERM"),
    }
}

/// SIGTERM and SIGHUP handled like Ctrl-C, but told apart from it: the `ctrlc` crate calls one
/// handler for all three signals without saying which came, and a run stopped by a scheduler's
/// SIGTERM must not exit 0 as an interactive Ctrl-C does.
#[cfg(unix)]
mod termination {
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// POSIX's numbers, the same on every Unix.
    const SIGHUP: c_int = 1;
    const SIGTERM: c_int = 15;

    extern "C" {
        /// `signal(2)` of the C library that std links (BSD semantics: the handler stays).
        fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
        /// `write(2)`.
        fn write(fd: c_int, buf: *const u8, count: usize) -> isize;
        /// `_exit(2)`.
        fn _exit(status: c_int) -> !;
    }

    /// The handler: only async-signal-safe work (atomics, `write`, `_exit`).
    extern "C" fn on_signal(signum: c_int) {
        if super::TERMINATION.swap(signum, Ordering::SeqCst) != 0 {
            // SAFETY: `_exit` is async-signal-safe and takes any status.
            unsafe { _exit(128 + signum) }
        }
        if let Some(flag) = super::TERMINATION_FLAG.get() {
            flag.store(true, Ordering::SeqCst);
        }
        let note: &[u8] = if signum == SIGHUP {
            b"\nSIGHUP: stopping after this step (again to quit at once)\n"
        } else {
            b"\nSIGTERM: stopping after this step (again to quit at once)\n"
        };
        // SAFETY: `write` is async-signal-safe; the buffer is a static byte string of that
        // length. A failed write only loses the note.
        unsafe {
            write(2, note.as_ptr(), note.len());
        }
    }

    /// Installs the handler for SIGTERM and SIGHUP, setting `flag` (once per process).
    pub(super) fn install(flag: Arc<AtomicBool>) {
        if super::TERMINATION_FLAG.set(flag).is_err() {
            return;
        }
        for signum in [SIGTERM, SIGHUP] {
            // SAFETY: `on_signal` has the C signature of a handler and does only
            // async-signal-safe work; the flag it reads is set before it is installed. A
            // failure (SIG_ERR) leaves the default action, a kill without a checkpoint.
            unsafe {
                signal(signum, on_signal);
            }
        }
    }
}
