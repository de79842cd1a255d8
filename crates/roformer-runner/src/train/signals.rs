//! Stop requests of a training run: Ctrl-C (SIGINT), SIGTERM and SIGHUP.
//!
//! - **The first stop signal** sets the run's stop flag: the run stops at its next micro-batch
//!   or evaluation batch and saves its last completed step ([`roformer::train::run`]).
//! - **Duplicates are one request.** Any stop signal that comes within [`DUPLICATE_WINDOW_NS`]
//!   (1 s) of the first is part of the same request and changes nothing: coreutils `timeout`
//!   sends SIGTERM to its child and then to its process group, batch schedulers and shells
//!   signal a whole process group, and a wrapper passes on the Ctrl-C that the terminal has
//!   already sent to the whole foreground group, so one request often arrives two or three
//!   times, microseconds apart.
//! - **A plainly second request quits at once**: a stop signal 1 s or more after the first, or
//!   a second Ctrl-C typed at the terminal (a SIGINT that the kernel sends for the terminal,
//!   `si_code` `SI_KERNEL` on Linux; a person cannot type two within microseconds, so it needs
//!   no interval). The status is 130 for SIGINT, 128 + the signal's number for the others.
//! - **Even a forced exit keeps the last checkpoint.** A save replaces `checkpoint/` only by
//!   two renames once the new version is whole on disk; a forced exit that comes between them
//!   waits for the second (microseconds, [`rename_guard`]), so `checkpoint/` is always either
//!   the previous checkpoint or the new one. The note says which step's checkpoint is on disk,
//!   or that nothing was saved.
//!
//! The handler does only async-signal-safe work: atomics, `clock_gettime`, `write` and
//! `_exit`. On platforms other than Unix, Ctrl-C alone is handled (through the `ctrlc`
//! crate), the first stopping the run and the second quitting.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use roformer::train::checkpoint::SaveStep;

/// Stop signals that come within this many nanoseconds of the first are the same request.
pub const DUPLICATE_WINDOW_NS: u64 = 1_000_000_000;

/// The run's stop flag, set by the first request.
static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The number of the first stop signal (0: none yet).
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// `CLOCK_MONOTONIC` in nanoseconds (at least 1) when the first request came; 0: none yet.
static FIRST_AT: AtomicU64 = AtomicU64::new(0);

/// No checkpoint saved (the value of [`SAVED_STEP`]).
const NOTHING_SAVED: u64 = u64::MAX;

/// The step of the checkpoint on disk, for the note of a forced exit.
static SAVED_STEP: AtomicU64 = AtomicU64::new(NOTHING_SAVED);

/// Set while a save renames its directories: a forced exit waits for the renames.
static IN_RENAMES: AtomicBool = AtomicBool::new(false);

/// The status of a forced exit that waits for the renames to end (0: none).
static PENDING_EXIT: AtomicI32 = AtomicI32::new(0);

/// What a stop signal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first request: stop the run.
    First,
    /// The same request again, within [`DUPLICATE_WINDOW_NS`] of the first: nothing to do.
    Duplicate,
    /// A second request: quit at once.
    Force,
}

/// Judges a stop signal that came at `now` (monotonic nanoseconds), the first request having
/// come at `first_at` (`None`: this is the first); `typed` when it is a Ctrl-C typed at the
/// terminal.
pub fn judge(first_at: Option<u64>, now: u64, typed: bool) -> Verdict {
    match first_at {
        None => Verdict::First,
        Some(_) if typed => Verdict::Force,
        Some(at) if now.saturating_sub(at) < DUPLICATE_WINDOW_NS => Verdict::Duplicate,
        Some(_) => Verdict::Force,
    }
}

/// Installs the handlers (once per process) and returns the run's stop flag, which the first
/// Ctrl-C, SIGTERM or SIGHUP sets.
pub fn stop_flag() -> Arc<AtomicBool> {
    let fresh = Arc::new(AtomicBool::new(false));
    match FLAG.set(Arc::clone(&fresh)) {
        Ok(()) => {
            install(Arc::clone(&fresh));
            fresh
        }
        // Installed before: the same flag.
        Err(_) => FLAG.get().map_or(fresh, Arc::clone),
    }
}

/// `SIGTERM` or `SIGHUP` when one of them asked the run to stop first (a Ctrl-C stop exits 0,
/// these exit with an error).
pub fn termination_signal() -> Option<&'static str> {
    match FIRST_SIGNAL.load(Ordering::SeqCst) {
        1 => Some("SIGHUP"),
        15 => Some("SIGTERM"),
        _ => None,
    }
}

/// Records that the checkpoint of `step` is on disk (named by the note of a forced exit).
pub fn note_saved(step: u64) {
    SAVED_STEP.store(step, Ordering::SeqCst);
}

/// Wraps a trainer's save hook: from the end of a save's writing ([`SaveStep::Written`]) to
/// its second rename ([`SaveStep::Renamed`]) a forced exit waits, and happens right after the
/// renames. `inner` (the CLI's test hooks of a save) runs at every step too: before
/// the wait begins, and after it ends.
pub fn rename_guard<'a>(inner: Option<&'a dyn Fn(u64, SaveStep)>) -> impl Fn(u64, SaveStep) + 'a {
    move |step, point| {
        if point == SaveStep::Renamed {
            // The new checkpoint is in place: a forced exit now keeps it, and says so.
            note_saved(step);
            leave_renames();
        }
        if let Some(hook) = inner {
            hook(step, point);
        }
        if point == SaveStep::Written {
            IN_RENAMES.store(true, Ordering::SeqCst);
        }
    }
}

/// Ends the renames' wait: a forced exit that came during them happens now. Also called when
/// a run ends, in case a save failed between its renames.
pub fn leave_renames() {
    IN_RENAMES.store(false, Ordering::SeqCst);
    let status = PENDING_EXIT.load(Ordering::SeqCst);
    if status != 0 {
        imp::forced_exit(status - 128, status);
    }
}

/// The note of a forced exit after signal `signum`, into `buf`; returns its length.
fn forced_note(signum: i32, saved: u64, buf: &mut [u8; 256]) -> usize {
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        let n = bytes.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    put(match signum {
        2 => b"\nCtrl-C again: quitting at once; ",
        1 => b"\nSIGHUP again, 1 s or more after the first: quitting at once; ",
        _ => b"\nSIGTERM again, 1 s or more after the first: quitting at once; ",
    });
    if saved == NOTHING_SAVED {
        put(b"nothing was saved\n");
    } else {
        put(b"the checkpoint of step ");
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = saved;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        put(&digits[at..]);
        put(b" is kept (continue with --resume)\n");
    }
    len
}

#[cfg(unix)]
fn install(_flag: Arc<AtomicBool>) {
    imp::install();
}

#[cfg(not(unix))]
fn install(flag: Arc<AtomicBool>) {
    // A handler can only be set once per process; failing to set it only loses the clean stop.
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        FIRST_SIGNAL.store(2, Ordering::SeqCst);
        eprintln!("\nstopping: the last completed step is saved (Ctrl-C again to quit at once)");
    });
}

#[cfg(not(unix))]
mod imp {
    /// Exits with `status`.
    pub(super) fn forced_exit(_signum: i32, status: i32) {
        std::process::exit(status);
    }
}

#[cfg(unix)]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::Ordering;

    use super::{
        forced_note, judge, Verdict, FIRST_AT, FIRST_SIGNAL, FLAG, IN_RENAMES, PENDING_EXIT,
        SAVED_STEP,
    };

    /// `si_code` of a signal the kernel sent on its own behalf, as the terminal's Ctrl-C
    /// (Linux; other systems tell no such thing apart, and rely on the interval alone).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const SI_KERNEL: c_int = 0x80;

    /// Whether `info` is a Ctrl-C typed at the terminal.
    fn typed_at_terminal(signum: c_int, info: *const libc::siginfo_t) -> bool {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: the kernel passes a valid `siginfo_t` to an `SA_SIGINFO` handler; null
            // is checked all the same.
            signum == libc::SIGINT && !info.is_null() && unsafe { (*info).si_code } == SI_KERNEL
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            let _ = (signum, info);
            false
        }
    }

    /// `CLOCK_MONOTONIC` in nanoseconds, at least 1 (0 stands for "none").
    fn now_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock_gettime` is async-signal-safe and writes only `ts`. It cannot fail
        // for CLOCK_MONOTONIC; on failure `ts` stays 0 and every signal reads as a duplicate
        // of the first, never as a forced exit.
        unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        }
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
            .max(1)
    }

    /// Writes `bytes` to stderr (a failed write only loses the note).
    fn note(bytes: &[u8]) {
        // SAFETY: `write` is async-signal-safe; the buffer is valid for its length.
        unsafe {
            libc::write(2, bytes.as_ptr().cast::<c_void>(), bytes.len());
        }
    }

    /// Quits at once with `status`, unless a save is between its renames: then the exit
    /// waits for them ([`super::leave_renames`]).
    pub(super) fn forced_exit(signum: c_int, status: c_int) {
        // Pending first, then the renames asked: of this and `leave_renames` (which clears the
        // flag, then asks for a pending exit) one at least sees the other (sequentially
        // consistent), so the exit is never lost; both exiting is harmless.
        PENDING_EXIT.store(status, Ordering::SeqCst);
        if IN_RENAMES.load(Ordering::SeqCst) {
            note(b"\nquitting once the checkpoint being saved is renamed into place\n");
            return;
        }
        let mut buf = [0u8; 256];
        let len = forced_note(signum, SAVED_STEP.load(Ordering::SeqCst), &mut buf);
        note(&buf[..len]);
        // SAFETY: `_exit` is async-signal-safe and takes any status.
        unsafe { libc::_exit(status) }
    }

    /// The handler: only async-signal-safe work.
    extern "C" fn on_signal(signum: c_int, info: *mut libc::siginfo_t, _context: *mut c_void) {
        let now = now_ns();
        let typed = typed_at_terminal(signum, info);
        // The first request stores its time; a later one reads it.
        let first = FIRST_AT
            .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst)
            .err();
        match judge(first, now, typed) {
            Verdict::First => {
                FIRST_SIGNAL.store(signum, Ordering::SeqCst);
                if let Some(flag) = FLAG.get() {
                    flag.store(true, Ordering::SeqCst);
                }
                note(match signum {
                    libc::SIGINT => {
                        b"\nstopping: the last completed step is saved (Ctrl-C again to quit \
                          at once, keeping the last checkpoint)\n"
                    }
                    libc::SIGHUP => {
                        b"\nSIGHUP: stopping: the last completed step is saved (a stop signal 1 \
                          s or more later quits at once, keeping the last checkpoint)\n"
                    }
                    _ => {
                        b"\nSIGTERM: stopping: the last completed step is saved (a stop signal \
                          1 s or more later quits at once, keeping the last checkpoint)\n"
                    }
                });
            }
            Verdict::Duplicate => {}
            Verdict::Force => forced_exit(signum, 128 + signum),
        }
    }

    /// Installs [`on_signal`] for SIGINT, SIGTERM and SIGHUP (the stop flag it sets is
    /// already in [`FLAG`]).
    pub(super) fn install() {
        for signum in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed `sigaction` is a valid value to fill; `on_signal` has the
            // three-argument signature `SA_SIGINFO` calls and does only async-signal-safe
            // work. The three signals are blocked while it runs, so one thread handles one at
            // a time. A failure leaves the default action (a kill without a checkpoint).
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = on_signal;
                action.sa_sigaction = handler as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                for blocked in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::sigaddset(&mut action.sa_mask, blocked);
                }
                libc::sigaction(signum, &action, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_within_a_second_are_one_request_and_a_later_one_forces() {
        assert_eq!(judge(None, 5, false), Verdict::First);
        assert_eq!(judge(None, 5, true), Verdict::First);
        let first = 10_000_000_000;
        // `timeout`'s second SIGTERM, microseconds later; a group kill's copy within the second.
        assert_eq!(
            judge(Some(first), first + 20_000, false),
            Verdict::Duplicate
        );
        assert_eq!(
            judge(Some(first), first + DUPLICATE_WINDOW_NS - 1, false),
            Verdict::Duplicate
        );
        assert_eq!(
            judge(Some(first), first + DUPLICATE_WINDOW_NS, false),
            Verdict::Force
        );
        // A clock that went back (it cannot, being monotonic) is a duplicate, never a force.
        assert_eq!(judge(Some(first), first - 5, false), Verdict::Duplicate);
        // A second Ctrl-C typed at the terminal forces, however soon.
        assert_eq!(judge(Some(first), first + 1, true), Verdict::Force);
    }

    #[test]
    fn the_forced_note_names_the_kept_checkpoint() {
        let mut buf = [0u8; 256];
        let len = forced_note(15, 1234, &mut buf);
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(
            text.contains("SIGTERM again") && text.contains("checkpoint of step 1234 is kept"),
            "{text}"
        );
        let len = forced_note(2, NOTHING_SAVED, &mut buf);
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(text.contains("nothing was saved"), "{text}");
        let len = forced_note(1, u64::MAX - 1, &mut buf);
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(text.contains("18446744073709551614"), "{text}");
    }
}
